"""Plumbing without modelling, under every other layer: the device a run asks for, SIGINT/SIGTERM between
epochs, the global random streams, the rows of replicas and particles, minibatch orders, JSON with NaN as
null, and the mean ± standard error every table gives (stats).
"""
