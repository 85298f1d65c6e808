"""A standard VAE beside the Bayesian one (``decoder_prior="none"``: θ point-estimated, no prior) and a β-VAE
(``kl_weight``): Pyro's ELBO against the handwritten one on the same draw, training with every guide, the gap
without a coupling term, the objective recorded apart from the ELBO, and the settings refused together."""
import json
import math

import pytest
import torch
from click.testing import CliRunner
from matplotlib.colors import to_hex

import pyro
from pyro import poutine
from pyro.infer import Trace_ELBO

from amortized_pyro import AmortizedPyroError
from amortized_pyro.cli.commands import cli
from amortized_pyro.models.decoder import BayesianDecoderModel
from amortized_pyro.models.guides import ENCODER_GUIDES, GUIDES, display_order, make_guide
from amortized_pyro.runs.config import FitConfig

from oracle import LAYERS, encoder_factor, log_normal, mlp_forward

N, B, X_DIM, Z_DIM, HIDDEN, WIDTH, OBS_SCALE = 30, 6, 12, 3, 5, 4, 0.7
SHAPES = [(HIDDEN, Z_DIM), (HIDDEN,), (HIDDEN, HIDDEN), (HIDDEN,), (X_DIM, HIDDEN), (X_DIM,)]
TINY = ["--dataset", "mnist-sample", "--n-obs", "40", "--n-test", "10", "--epochs", "2", "--batch-size", "20",
        "--hidden", "8", "--z-dim", "2", "--width", "4", "--no-progress", "--device", "cpu"]


def split(flat):
    sizes = [math.prod(s) for s in SHAPES]
    return {layer: part.reshape(s) for layer, part, s in zip(LAYERS, flat.split(sizes), SHAPES)}


def standard_vae_elbo(x, theta, z, q_z, beta=1.0, scale=N / B):
    """(N/B) Σ_batch [log p(x | z, θ̂) + β (log p(z) − log q(z | x))]: no θ terms (no prior, a point q(θ))."""
    out = mlp_forward(z, [theta["w1"], theta["w2"], theta["w3"]], [theta["b1"], theta["b2"], theta["b3"]])
    local = log_normal(x, out, OBS_SCALE).sum() + beta * (log_normal(z, 0.0, 1.0).sum() - log_normal(z, *q_z).sum())
    return scale * local


@pytest.mark.parametrize("beta", [None, 0.3, 4.0])
@pytest.mark.parametrize("family", ["amortized", "per-datapoint"])
def test_the_standard_vae_elbo_equals_the_handwritten_one_on_the_same_draw(family, beta):
    torch.set_default_dtype(torch.float64)
    try:
        pyro.set_rng_seed(0)
        model = BayesianDecoderModel(N, X_DIM, Z_DIM, HIDDEN, obs_scale=OBS_SCALE, decoder_prior="none")
        guide = make_guide(family, model, width=WIDTH)
        with torch.no_grad():
            for p in guide.parameters():
                p.add_(0.3 * torch.randn_like(p))
        x_all = torch.rand(N, X_DIM)
        idx = torch.tensor([3, 17, 5, 29, 0, 11])
        x = x_all[idx]
        args = (x, idx) if beta is None else (x, idx, torch.tensor(beta))
        trace = poutine.trace(guide).get_trace(*args)
        state = {k: v.detach() for k, v in guide.state_dict().items()}
        theta_hat = split(state["q_theta.loc"])
        for layer in LAYERS:  # the point estimate itself, no noise
            assert torch.equal(trace.nodes["decoder." + layer]["value"], theta_hat[layer])
        if family == "amortized":
            q_z = encoder_factor(x, {k[len("q_z.encoder."):]: v for k, v in state.items() if k.startswith("q_z.encoder.")})
        else:
            q_z = (state["q_z.loc"][idx], state["q_z.log_scale"][idx].exp())
        expected = standard_vae_elbo(x, theta_hat, trace.nodes["z"]["value"], q_z, beta or 1.0)
        got = -Trace_ELBO().loss(model, poutine.replay(guide, trace=trace), *args)
        assert got == pytest.approx(expected.item(), rel=1e-9)
        # the Bayesian decoder's ELBO on the same θ and z differs by its θ terms: the prior is really gone
        bayesian = BayesianDecoderModel(N, X_DIM, Z_DIM, HIDDEN, obs_scale=OBS_SCALE)
        with_prior = -Trace_ELBO().loss(bayesian, poutine.replay(guide, trace=trace), *args)
        assert abs(with_prior - got) > 1.0
    finally:
        torch.set_default_dtype(torch.float32)


@pytest.mark.parametrize("guide", GUIDES)
def test_every_guide_trains_a_standard_vae_and_gap_reports_no_coupling_term(tmp_path, guide):
    run = tmp_path / "run"
    tiny = TINY if guide in ENCODER_GUIDES else [a for a in TINY if a not in ("--width", "4")]  # no encoder there
    result = CliRunner().invoke(cli, ["fit", "--guide", guide, "--decoder-prior", "none", "--out", str(run), *tiny]
                                + (["--refine-steps", "2"] if guide == "semi-amortized" else []))
    assert result.exit_code == 0, result.output
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert all(math.isfinite(m["elbo"]) for m in metrics) and metrics[-1]["theta_scale_mean"] == 0.0
    report = tmp_path / "gap.json"
    result = CliRunner().invoke(cli, ["gap", str(run), "--split", "train", "--n-images", "3", "--theta-draws", "4",
                                      "--importance-samples", "20", "--max-steps", "60", "--ais-steps", "0",
                                      "--no-progress", "--out", str(report)])
    assert result.exit_code == 0, result.output
    gap = json.loads(report.read_text())
    assert gap["coupling_gap"] is None and gap["theta_draws"] == 1 and gap["coupling"] is False
    assert gap["approximation_gap"]["mean"] == pytest.approx(gap["log_px"]["mean"] - gap["elbo_optimized"]["mean"], abs=1e-3)
    assert "q(θ) is a point mass, or there is no global latent: no coupling term" in result.output


def test_a_beta_vae_records_its_objective_apart_from_the_elbo(tmp_path):
    run = tmp_path / "run"
    result = CliRunner().invoke(cli, ["fit", "--kl-weight", "4", "--eval-every", "2", "--out", str(run), *TINY])
    assert result.exit_code == 0, result.output
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert metrics[0]["elbo"] is None and metrics[0]["kl_scale"] == 4.0  # not an ELBO: recorded apart
    last = metrics[-1]  # an evaluation: the true ELBO beside the objective, and larger (β > 1 weighs the KL more)
    assert last["elbo"] is not None and last["elbo"] > last["objective"]
    assert json.loads((run / "config.json").read_text())["config"]["kl_weight"] == 4.0


@pytest.mark.parametrize("settings, names", [
    (dict(decoder_prior="none", estimator="meanfield"), "estimator"),
])
def test_settings_that_cannot_go_together_are_refused(settings, names):
    with pytest.raises(AmortizedPyroError, match=names):
        FitConfig(**settings).check()


def test_replicas_refuse_a_point_estimated_decoder(tmp_path):
    result = CliRunner().invoke(cli, ["fit", "--decoder-prior", "none", "--replicas", "2", "--out",
                                      str(tmp_path / "pack"), *TINY])
    assert result.exit_code == 2 and "decoder prior" in result.output and "Traceback" not in result.output


def test_compare_draws_standard_vae_runs_with_their_labels(tmp_path, saved_figures):
    """Every figure takes the labels a point-estimated decoder gives (``F-VI, point θ``): a colour each."""
    out = tmp_path / "cmp"
    result = CliRunner().invoke(cli, ["compare", "--guides", "amortized,per-datapoint", "--widths", "4", "--seeds", "0",
                                      "--decoder-prior", "none", "--out", str(out),
                                      *[a for a in TINY if a not in ("--width", "4")]])
    assert result.exit_code == 0, result.output
    assert "F-VI, point θ" in (out / "summary.md").read_text()
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    elbos = {}  # each configuration's ELBO per observation by epoch (one seed: the curve itself)
    for r in rows:
        if r.get("kind") == "metrics" and r.get("elbo_per_obs") is not None:
            elbos.setdefault(r["label"], {})[r["epoch"]] = r["elbo_per_obs"]
    assert set(elbos) == {"A-VI k=4, point θ", "F-VI, point θ"}
    (ax,) = saved_figures["fig1_neg_elbo.png"].axes
    curves = {line.get_label(): line for line in ax.get_lines() if line.get_label() in elbos}
    assert [t.get_text() for t in ax.get_legend().get_texts()] == list(curves) == sorted(elbos, key=display_order)
    for label, line in curves.items():  # −ELBO against epoch, every ELBO here negative
        assert list(line.get_xdata()) == sorted(elbos[label])
        assert list(line.get_ydata()) == pytest.approx([-elbos[label][e] for e in sorted(elbos[label])])
    assert len({to_hex(line.get_color()) for line in curves.values()}) == 2  # a colour each
