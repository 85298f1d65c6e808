"""Per-image inference for any model, given its local log joint: the local ELBO's estimates (estimates), the
optimizers that fit a factor per image (optimize, with their steppers in steppers), AIS (ais), the gap's keyed θ
draws (draws), a flow's parameters per image (flows) and the gap estimator itself (gaps). No model, guide or run is imported here.
"""
