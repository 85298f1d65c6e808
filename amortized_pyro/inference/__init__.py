"""Training and evaluating a model and guide: the SVI step and its optimizer (svi), the training loop (training),
seeds packed as replicas (replicas), and the evaluation of a fitted guide (evaluation: MSEs, reconstructions,
the guide's factor).
"""
