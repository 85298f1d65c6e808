"""Grids of runs: the ``compare`` study (comparison), how its runs execute, locally or on Ray (executors), and the
results table it writes (results).
"""
