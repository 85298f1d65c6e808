"""The handwritten ELBO: the test oracle, written from the formulas in plain torch.

    ELBO = β [log p(θ) − log q(θ)] + (N / B) Σ_{n ∈ batch} [log p(x_n | z_n, θ) + β (log p(z_n) − log q(z_n))]

with p(θ) = N(0, prior_scale²), p(z) = N(0, I), p(x | z, θ) = N(Ω(z; θ), obs_scale² I) or
Bernoulli(sigmoid(Ω(z; θ))), q Gaussian, and β the KL warm-up's scale (1: the ELBO itself); and the
conditional model's (:func:`conditional_elbo`), whose decoder and encoder read the one-hot label beside z and x.
It never calls the package's model, decoder or guides. The benchmark's handwritten step uses it too.
"""
import math

import torch

LAYERS = ("w1", "b1", "w2", "b2", "w3", "b3")
HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def log_normal(v, m, s):
    """log N(v | m, s²) elementwise; s a tensor or a number."""
    log_s = math.log(s) if isinstance(s, (int, float)) else torch.log(s)
    return -0.5 * ((v - m) / s) ** 2 - log_s - HALF_LOG_2PI


def leaky(h):
    return torch.where(h > 0, h, 0.2 * h)


def mlp_forward(h, ws, bs):
    """Linear layers with LeakyReLU(0.2) between them: h @ w.T + b."""
    for i, (w, b) in enumerate(zip(ws, bs)):
        h = h @ w.T + b
        if i < len(ws) - 1:
            h = leaky(h)
    return h


def encoder_factor(x, e):
    """(μ, σ) of the amortized q(z | x) from encoder weights ``e`` (names as in the package's Encoder's
    state_dict)."""
    h = mlp_forward(x, [e["body.0.weight"], e["body.2.weight"]], [e["body.0.bias"], e["body.2.bias"]])
    h = leaky(h)
    return h @ e["loc.weight"].T + e["loc.bias"], torch.exp(h @ e["log_scale.weight"].T + e["log_scale.bias"])


def log_bernoulli(x, logits):
    """log Bernoulli(x | sigmoid(logits)) elementwise, written as x log p + (1 − x) log(1 − p)."""
    p = torch.sigmoid(logits)
    return x * torch.log(p) + (1 - x) * torch.log1p(-p)


def elbo(x, q_theta, q_z, theta, z, scale, prior_scale=1.0, obs_scale=1.0, likelihood="normal", kl_scale=1.0):
    """The ELBO at one draw (θ, z) of q, for a minibatch x whose local terms are scaled by ``scale`` = N/B;
    with ``kl_scale`` β < 1, the warm-up objective."""
    log_p_theta = sum(log_normal(theta[l], 0.0, prior_scale).sum() for l in LAYERS)
    log_q_theta = sum(log_normal(theta[l], *q_theta[l]).sum() for l in LAYERS)
    out = mlp_forward(z, [theta["w1"], theta["w2"], theta["w3"]], [theta["b1"], theta["b2"], theta["b3"]])
    log_lik = log_bernoulli(x, out) if likelihood == "bernoulli" else log_normal(x, out, obs_scale)
    local = log_lik.sum() + kl_scale * (log_normal(z, 0.0, 1.0).sum() - log_normal(z, *q_z).sum())
    return kl_scale * (log_p_theta - log_q_theta) + scale * local


def draw(q_theta, q_z):
    """A reparameterized draw θ = m + s ε, z = μ + σ ε."""
    theta = {l: m + s * torch.randn_like(m) for l, (m, s) in q_theta.items()}
    return theta, q_z[0] + q_z[1] * torch.randn_like(q_z[0])


def kl_normal(m, s, prior_scale):
    """KL(N(m, s²) ‖ N(0, prior_scale²)) elementwise, in closed form."""
    return torch.log(prior_scale / s) + (s ** 2 + m ** 2) / (2 * prior_scale ** 2) - 0.5


def meanfield_elbo(x, q_theta, q_z, theta, z, scale, prior_scale=1.0, obs_scale=1.0, likelihood="normal",
                   kl_scale=1.0):
    """The ELBO with analytic KL terms at one draw (θ, z) for the likelihood:
    (N/B) Σ log p(x | z, θ) − β [KL(q(θ) ‖ p(θ)) + (N/B) Σ_batch KL(q(z_n) ‖ p(z))]."""
    out = mlp_forward(z, [theta["w1"], theta["w2"], theta["w3"]], [theta["b1"], theta["b2"], theta["b3"]])
    log_lik = log_bernoulli(x, out) if likelihood == "bernoulli" else log_normal(x, out, obs_scale)
    kl_theta = sum(kl_normal(*q_theta[l], prior_scale).sum() for l in LAYERS)
    kl_z = kl_normal(q_z[0], q_z[1], 1.0).sum()
    return scale * log_lik.sum() - kl_scale * (kl_theta + scale * kl_z)


def conditional_elbo(x, codes, q_theta, q_z, theta, z, scale, prior_scale=1.0, obs_scale=1.0, every_layer=False):
    """The ELBO of the conditional model (a CVAE) at one draw (θ, z), for a minibatch x with one-hot labels
    ``codes`` e_c: the decoder reads [z, e_c] (``every_layer``: each layer reads [h, e_c]); p(z | c) =
    N(M e_c, diag exp(S e_c)²) where θ holds M and S (``prior_loc``, ``prior_log_scale``, [z_dim, K], under the
    decoder's prior and mean-field q), else N(0, I)."""
    log_p_theta = sum(log_normal(theta[l], 0.0, prior_scale).sum() for l in q_theta)
    log_q_theta = sum(log_normal(theta[l], *q_theta[l]).sum() for l in q_theta)
    if every_layer:
        h = leaky(torch.cat([z, codes], -1) @ theta["w1"].T + theta["b1"])
        h = leaky(torch.cat([h, codes], -1) @ theta["w2"].T + theta["b2"])
        out = torch.cat([h, codes], -1) @ theta["w3"].T + theta["b3"]
    else:
        out = mlp_forward(torch.cat([z, codes], -1), [theta["w1"], theta["w2"], theta["w3"]],
                          [theta["b1"], theta["b2"], theta["b3"]])
    if "prior_loc" in theta:
        m, s = codes @ theta["prior_loc"].T, torch.exp(codes @ theta["prior_log_scale"].T)
    else:
        m, s = 0.0, 1.0
    local = log_normal(x, out, obs_scale).sum() + log_normal(z, m, s).sum() - log_normal(z, *q_z).sum()
    return log_p_theta - log_q_theta + scale * local
