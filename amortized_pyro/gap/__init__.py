"""The amortization gap of trained runs of the package's model: one run's report (measure) with the estimator of
:mod:`amortized_pyro.local.gaps`, Cremer et al.'s capacity sweep on a frozen decoder (capacity), and errors
over seeds and images together (pooling).
"""
