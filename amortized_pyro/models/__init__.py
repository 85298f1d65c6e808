"""The package's own model (decoder: the Bayesian decoder p(θ) p(z) p(x | z, θ)), its variational q(θ)
(q_theta), and its guides, built on :mod:`amortized_pyro.autoguides` (guides: the families, their labels and
make_guide).
"""
