"""A training step of the package's model and guides written in plain PyTorch as a user would write it: the
yardstick of the package's step (bench/bench_step.py's ``plain`` method).

Model: θ (every decoder weight and bias) ~ N(0, prior_scale²), z_n ~ N(0, I), x_n ~ N(decoder(z_n; θ), σ²I),
the decoder z → H → H → x_dim with LeakyReLU(0.2). Guide: mean-field q(θ) (a mean and a log-scale per weight)
and q(z_n) from an encoder x → k → k → (μ, log σ) (A-VI), a free factor per image (F-VI) or one for all
(constant-VI). The loss is Trace_ELBO's estimator with one reparameterized draw: −[log p(θ) − log q(θ) + N/B
Σ_batch (log p(x | z, θ) + log p(z) − log q(z))], with torch.distributions (argument validation off, as in
the package's training) and torch.optim.Adam with its defaults but the learning rate. No Pyro.
"""
import torch
from torch import nn
from torch.distributions import Distribution, Normal

SLOPE = 0.2


class PlainModelGuide(nn.Module):
    def __init__(self, guide, n_obs, x_dim, z_dim, hidden, width, obs_scale=1.0, prior_scale=1.0, init_scale=0.135):
        super().__init__()
        self.guide, self.n_obs, self.obs_scale, self.prior_scale = guide, n_obs, obs_scale, prior_scale
        shapes = {"w1": (hidden, z_dim), "b1": (hidden,), "w2": (hidden, hidden), "b2": (hidden,),
                  "w3": (x_dim, hidden), "b3": (x_dim,)}
        self.theta_loc = nn.ParameterDict({k: nn.Parameter(0.1 * torch.randn(s)) for k, s in shapes.items()})
        self.theta_log_scale = nn.ParameterDict({k: nn.Parameter(torch.full(s, float(torch.tensor(init_scale).log())))
                                                 for k, s in shapes.items()})
        if guide == "amortized":
            self.encoder = nn.Sequential(nn.Linear(x_dim, width), nn.LeakyReLU(SLOPE), nn.Linear(width, width),
                                         nn.LeakyReLU(SLOPE), nn.Linear(width, 2 * z_dim))
        else:
            rows = (n_obs,) if guide == "per-datapoint" else ()
            self.z_loc = nn.Parameter(torch.zeros(rows + (z_dim,)))
            self.z_log_scale = nn.Parameter(torch.zeros(rows + (z_dim,)))

    def loss(self, x, idx):
        theta, global_term = {}, 0.0
        for name, loc in self.theta_loc.items():
            q = Normal(loc, self.theta_log_scale[name].exp())
            theta[name] = q.rsample()
            global_term = global_term + Normal(0.0, self.prior_scale).log_prob(theta[name]).sum() \
                - q.log_prob(theta[name]).sum()
        if self.guide == "amortized":
            z_loc, z_log_scale = self.encoder(x).chunk(2, dim=-1)
        elif self.guide == "per-datapoint":
            z_loc, z_log_scale = self.z_loc[idx], self.z_log_scale[idx]
        else:
            z_loc, z_log_scale = self.z_loc.expand(len(idx), -1), self.z_log_scale.expand(len(idx), -1)
        q_z = Normal(z_loc, z_log_scale.exp())
        z = q_z.rsample()
        h = nn.functional.leaky_relu(nn.functional.linear(z, theta["w1"], theta["b1"]), SLOPE)
        h = nn.functional.leaky_relu(nn.functional.linear(h, theta["w2"], theta["b2"]), SLOPE)
        mean = nn.functional.linear(h, theta["w3"], theta["b3"])
        local = Normal(mean, self.obs_scale).log_prob(x).sum() + Normal(0.0, 1.0).log_prob(z).sum() \
            - q_z.log_prob(z).sum()
        return -(global_term + self.n_obs / len(idx) * local)


class PlainStep:
    """One optimizer step of :class:`PlainModelGuide`'s loss on a minibatch (x, idx)."""

    def __init__(self, guide, n_obs, x_dim, z_dim, hidden, width, lr, device):
        Distribution.set_default_validate_args(False)
        self.module = PlainModelGuide(guide, n_obs, x_dim, z_dim, hidden, width).to(device)
        self.optimizer = torch.optim.Adam(self.module.parameters(), lr=lr)

    def __call__(self, x, idx):
        loss = self.module.loss(x, idx)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.detach()
