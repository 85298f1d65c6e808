"""Masked local sites, as Pyro's examples/dmm.py masks a sequence's padded steps: with ``local_mask`` the guide
masks its own log q the same way, so masked rows pay no entropy and do not drift (F-VI's keep their initial
scale exactly), SA-VI's and IA-VI's steps stay finite at SA-VI's refinement rate 1e-2, and a masked model without
``local_mask`` is refused in one line."""
import math

import pytest
import torch

import pyro
import pyro.distributions as dist
from pyro.infer import SVI, Trace_ELBO

from amortized_pyro.autoguides import AUTOGUIDES
from amortized_pyro.autoguides.masking import MaskedJoint

B, T, Z, D = 8, 5, 2, 3


@pytest.fixture(autouse=True)
def clean_store():
    pyro.clear_param_store()
    yield
    pyro.clear_param_store()


def padded_sequences():
    """B sequences of lengths 1..T, their padded steps zeros, and the mask [B, T] of the real steps."""
    generator = torch.Generator().manual_seed(0)
    lengths = torch.arange(B) % T + 1
    mask = torch.arange(T) < lengths.unsqueeze(-1)
    return torch.randn(B, T, D, generator=generator) * mask.unsqueeze(-1), mask


def dmm(seqs, mask):
    """A linear-Gaussian state-space model written as Pyro's DMM writes its steps (``.mask(...)`` per step)."""
    W = pyro.sample("W", dist.Normal(torch.zeros(Z, D), 1.0).to_event(2))
    with pyro.plate("sequences", len(seqs)):
        z = seqs.new_zeros(Z)  # broadcast by the plate: the model is broadcast-safe over the gap's draws
        for t in range(T):
            keep = mask[:, t:t + 1]
            z = pyro.sample("z_%d" % t, dist.Normal(0.8 * z, 1.0).mask(keep).to_event(1))
            pyro.sample("x_%d" % t, dist.Normal((z.unsqueeze(-2) @ W).squeeze(-2), 0.5).mask(keep).to_event(1), obs=seqs[:, t])


def per_step(seqs, mask):
    return {"z_%d" % t: mask[:, t] for t in range(T)}


def build(name, **kwargs):
    options = {"steps": 5, "lr": 1e-2} if name == "semi-amortized" else {"iterations": 2} if name == "iterative" else {}
    if name in ("amortized", "semi-amortized", "iterative"):
        options.update(width=16, encoder_input=lambda seqs, mask: seqs.reshape(len(seqs), -1))
    return AUTOGUIDES[name](dmm, plate="sequences", **options, **kwargs)


def masked_scales(guide, seqs, mask):
    """σ of q on the masked and on the unmasked coordinates (the flat layout: site z_t's block is t's)."""
    indices = torch.arange(B)
    with torch.no_grad():
        _, scale = guide.local_factor(indices, (seqs, mask), {}, guide.global_mean())
    kept = mask.repeat_interleave(Z, dim=1)
    return scale[~kept], scale[kept]


@pytest.mark.parametrize("name", list(AUTOGUIDES))
def test_masked_rows_do_not_drift(name):
    seqs, mask = padded_sequences()
    pyro.clear_param_store()
    pyro.set_rng_seed(0)
    guide = build(name, local_mask=per_step)
    guide(seqs, mask)
    before, _ = masked_scales(guide, seqs, mask)
    svi = SVI(dmm, guide, pyro.optim.Adam({"lr": 1e-2}), Trace_ELBO())
    # 100 steps (IA-VI: 300): with the guide's log q unmasked (tried: q.mask(...) dropped in base.py) the amortized
    # and SA-VI guides' masked σ reach 37 and 20 times the unmasked ones' by then (0.75 at most with it; 3 asked)
    # and the per-datapoint guide's masked rows move; IA-VI's drift slower: 3.3 times at 300 steps (2.3 with it)
    losses = [svi.step(seqs, mask) for _ in range(300 if name == "iterative" else 100)]
    assert all(math.isfinite(loss) for loss in losses)
    masked, kept = masked_scales(guide, seqs, mask)
    assert torch.isfinite(masked).all()
    if name == "per-datapoint":
        assert torch.equal(masked, before)  # no gradient reaches a masked row
    else:  # shared heads or one shared row: pulled by the unmasked rows of the same coordinates, not pushed apart
        assert masked.max() < 3 * kept.max(), (masked.max(), kept.max())


def test_refining_the_worst_share_of_a_masked_model():
    seqs, mask = padded_sequences()
    pyro.set_rng_seed(0)
    guide = build("semi-amortized", local_mask=per_step, share=0.5)
    svi = SVI(dmm, guide, pyro.optim.Adam({"lr": 1e-2}), Trace_ELBO())
    assert all(math.isfinite(svi.step(seqs, mask)) for _ in range(20))


def test_without_the_guides_mask_masked_rows_drift():
    """The check above can fail: a per-datapoint guide that scores q on the masked rows (local_mask naming no
    site: the model's masks unserved) lets their σ grow."""
    seqs, mask = padded_sequences()
    pyro.clear_param_store()
    guide = build("per-datapoint", local_mask=lambda seqs, mask: {})
    guide(seqs, mask)
    before, _ = masked_scales(guide, seqs, mask)
    svi = SVI(dmm, guide, pyro.optim.Adam({"lr": 1e-2}), Trace_ELBO())
    for _ in range(300):
        svi.step(seqs, mask)
    masked, kept = masked_scales(guide, seqs, mask)
    assert masked.min() > 10 * before.max() and masked.min() > 3 * kept.max()  # e^(300 lr) = 20× its start


def test_a_masked_model_without_local_mask_is_refused():
    seqs, mask = padded_sequences()
    for name in AUTOGUIDES:
        # z_0's mask is all true (every sequence has a first step): no mask; z_1's is the first that masks
        with pytest.raises(ValueError, match="masks the local site 'z_1': give local_mask") as caught:
            build(name)(seqs, mask)
        assert "\n" not in str(caught.value)
    with pytest.raises(ValueError, match="no local_mask"):
        AUTOGUIDES["amortized"](dmm, plate="sequences", flow=2, local_mask=per_step)


def test_the_refining_families_local_elbo_puts_a_standard_normal_on_masked_coordinates():
    """MaskedJoint adds log N(u; 0, 1) on the dropped coordinates only: the unmasked ones' terms unchanged."""
    kept = torch.tensor([[True, False], [True, True]])
    joint = MaskedJoint(lambda x, u, theta: u.sum(-1), kept)
    u = torch.tensor([[[0.5, 2.0], [1.0, -1.0]]])
    expected = u.sum(-1) + torch.tensor([[dist.Normal(0.0, 1.0).log_prob(torch.tensor(2.0)), 0.0]])
    torch.testing.assert_close(joint(None, u, {}), expected)


def test_the_gap_of_a_masked_model():
    """measure_gap gives masked coordinates the same standard Normal reference: a per-datapoint guide whose masked
    rows sit at N(0, 1) (their reference's optimum) and whose other rows are trained reads small gaps (scoring
    noise of 8 draws about them), not the drift of an unbounded entropy."""
    from amortized_pyro import GapSettings
    from amortized_pyro.autoguides import measure_gap
    seqs, mask = padded_sequences()
    guide = build("per-datapoint", local_mask=per_step, init_scale=1.0)
    svi = SVI(dmm, guide, pyro.optim.Adam({"lr": 1e-2}), Trace_ELBO())
    for _ in range(100):
        svi.step(seqs, mask)
    settings = GapSettings(theta_draws=2, score_draws=8, samples=50, importance_samples=50, ais_steps=0, max_steps=300)
    report = measure_gap(dmm, guide, seqs, mask, settings=settings)
    gaps = torch.tensor(report["per_image"]["amortization_gap"])
    # without the reference the masked coordinates' q* drifts: 24 to 95 nats per sequence read here (seen); with it
    # 0 to 3, and 0 exactly where the guide's factor wins q*
    assert torch.isfinite(gaps).all() and gaps.abs().max() < 10
