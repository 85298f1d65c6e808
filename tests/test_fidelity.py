"""The reference study's exact setting (experiments/seed-study.toml), run by ``fit``, against an independent
plain-torch implementation of that study's loss and update, written from its description:

    loss  = −[ −½ Σ z² − Σ (x − Ω(z; θ))² − ½ Σ θ² − log q(θ) − log q(z) ]    (constants dropped, as there)
    q(θ)  = one flat vector of means and log-sds (no weight decay); q(z) per the study's initialisation
    step  = torch.optim.AdamW(betas=(0.9, 0.99), weight_decay=0.1) on the tensors of two or more dimensions

on a tiny problem (full batch), in float64, with the same seed: the same random stream gives the same
draws, so the two must agree to rounding error after several steps.
"""
import math
from pathlib import Path

import pytest
import torch

from amortized_pyro import FitConfig, fit
from amortized_pyro.data import Data

from conftest import STUDY_GUIDES
from oracle import LAYERS

PRESET = Path(__file__).parents[1] / "experiments" / "seed-study.toml"
N, X_DIM, Z_DIM, HIDDEN, WIDTH, STEPS, SEED = 24, 10, 3, 6, 5, 4, 3


def leaky(h):
    return torch.where(h > 0, h, 0.2 * h)


class StudyReference:
    """The study's variational family and objective in plain torch (nothing from the package)."""

    def __init__(self, guide, seed, decay_theta=False):
        torch.manual_seed(seed)
        self.guide = guide
        self.shapes = [(HIDDEN, Z_DIM), (HIDDEN,), (HIDDEN, HIDDEN), (HIDDEN,), (X_DIM, HIDDEN), (X_DIM,)]
        size = sum(math.prod(s) for s in self.shapes)
        self.theta_mean = torch.zeros(size, requires_grad=True)
        self.theta_log_sd = torch.full((size,), -2.0, requires_grad=True)
        decayed, plain = ([self.theta_mean, self.theta_log_sd], []) if decay_theta else \
            ([], [self.theta_mean, self.theta_log_sd])
        if guide == "amortized":  # x → k (LeakyReLU 0.2) → mean, log-sd; nn.Linear's default initialisation
            self.hidden, self.mean_head, self.sd_head = (torch.nn.Linear(X_DIM, WIDTH), torch.nn.Linear(WIDTH, Z_DIM),
                                                         torch.nn.Linear(WIDTH, Z_DIM))
            layers = (self.hidden, self.mean_head, self.sd_head)
            decayed += [layer.weight for layer in layers]
            plain += [layer.bias for layer in layers]
        else:
            generator = torch.Generator().manual_seed(seed)
            shape = (N, Z_DIM) if guide == "per-datapoint" else (Z_DIM,)
            self.z_mean = torch.randn(shape, generator=generator).requires_grad_()
            self.z_log_sd = (torch.randn(shape, generator=generator) - float(guide == "per-datapoint")).requires_grad_()
            (decayed if guide == "per-datapoint" else plain).extend([self.z_mean, self.z_log_sd])
        self.optimizer = torch.optim.AdamW([{"params": decayed, "weight_decay": 0.1},
                                            {"params": plain, "weight_decay": 0.0}], lr=1e-3, betas=(0.9, 0.99))

    def q_z(self, x, idx):
        if self.guide == "amortized":
            h = leaky(self.hidden(x))
            return self.mean_head(h), self.sd_head(h)
        if self.guide == "per-datapoint":
            return self.z_mean[idx], self.z_log_sd[idx]
        return self.z_mean.expand(len(idx), -1), self.z_log_sd.expand(len(idx), -1)

    def loss(self, x, idx):
        """One full-batch step's loss; the draws in the order the guide makes them: θ layer by layer, then z."""
        eps_theta = torch.cat([torch.randn(shape).flatten() for shape in self.shapes])
        theta = self.theta_mean + self.theta_log_sd.exp() * eps_theta
        z_mean, z_log_sd = self.q_z(x, idx)
        z = z_mean + z_log_sd.exp() * torch.randn(z_mean.shape)
        w = dict(zip(LAYERS, torch.split(theta, [math.prod(s) for s in self.shapes])))
        w = {k: v.reshape(s) for (k, v), s in zip(w.items(), self.shapes)}
        h = leaky(z @ w["w1"].T + w["b1"])
        h = leaky(h @ w["w2"].T + w["b2"])
        mu = h @ w["w3"].T + w["b3"]
        log_joint = -0.5 * (z ** 2).sum() - ((x - mu) ** 2).sum() - 0.5 * (theta ** 2).sum()
        log_q = ((-self.theta_log_sd - 0.5 * eps_theta ** 2).sum()
                 + (-z_log_sd - 0.5 * ((z - z_mean) / z_log_sd.exp()) ** 2).sum())
        return -(log_joint - log_q)

    def train(self, x, steps):
        losses = []
        for _ in range(steps):
            idx = torch.randperm(N)  # the package shuffles every epoch, full batch or not
            loss = self.loss(x[idx], idx)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            losses.append(loss.item())
        return losses


def run_package(guide):
    torch.set_default_dtype(torch.float64)
    x = torch.rand(N, X_DIM, generator=torch.Generator().manual_seed(99))
    config = FitConfig.from_toml(PRESET, guide=guide, n_obs=N, n_test=0, epochs=STEPS, hidden=HIDDEN, z_dim=Z_DIM,
                                 width=WIDTH, seed=SEED, device="cpu", predictive_draws=0, eval_every=STEPS)
    assert (config.batch_size, config.weight_decay, config.beta2, config.encoder_layers) == (10000, 0.1, 0.99, 1)
    result = fit(config, data=Data(x, x[:0], "tiny"), progress=False, log=lambda line: None)
    return x, config, result


def pairs(result, reference):
    """(package tensor, reference tensor) for every variational parameter, unconstrained (log-sds) as the
    guide's state_dict keeps them (q(θ) as one flat vector in the decoder's layer order, as the study's)."""
    params = {k: v.detach() for k, v in result.state_dict().items()}
    found = [(params["q_theta.loc_unconstrained"], reference.theta_mean),
             (params["q_theta.scale_unconstrained"], reference.theta_log_sd)]
    if reference.guide == "amortized":
        for name, layer in (("body.0", reference.hidden), ("loc", reference.mean_head), ("log_scale", reference.sd_head)):
            found += [(params["q_z.encoder.%s.weight" % name], layer.weight),
                      (params["q_z.encoder.%s.bias" % name], layer.bias)]
    else:
        found += [(params["q_z.loc"], reference.z_mean), (params["q_z.log_scale"], reference.z_log_sd)]
    return [(ours, theirs.detach()) for ours, theirs in found]


@pytest.mark.parametrize("guide", STUDY_GUIDES)
def test_seed_study_preset_trains_exactly_as_the_study_code(guide):
    x, config, result = run_package(guide)
    reference = StudyReference(guide, SEED)
    losses = reference.train(x, STEPS)
    # the package's ELBO keeps the constants the study's loss drops: −N·D·(log σ + ½ log 2π) with σ = 1/√2
    constant = -N * X_DIM * (math.log(config.obs_scale) + 0.5 * math.log(2 * math.pi))
    assert [r["elbo"] for r in result.history] == pytest.approx([-loss + constant for loss in losses], rel=1e-10)
    for ours, theirs in pairs(result, reference):
        assert torch.allclose(ours, theirs, rtol=1e-9, atol=1e-12)
    assert pairs(result, reference)[0][0].abs().max() > 1e-3  # the steps moved q(θ) off its initial 0


@pytest.mark.parametrize("guide", ["amortized", "per-datapoint"])
def test_the_comparison_would_see_decay_applied_to_q_theta(guide):
    """Power: a reference that also decays q(θ) ends measurably elsewhere than the package."""
    x, _, result = run_package(guide)
    reference = StudyReference(guide, SEED, decay_theta=True)
    reference.train(x, STEPS)
    theta_mean = pairs(result, reference)[0]
    assert not torch.allclose(*theta_mean, rtol=1e-6, atol=1e-9)
