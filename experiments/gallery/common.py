"""What every gallery model shares: the builders by name, one training run of a (model, guide, seed), and what is
measured of it.

Measured per run (one JSON line, :func:`run_one`):

    steps, stopped     Adam-family steps taken (the model's own optimizer and budget) and, where training stopped
                       early, the one line that stopped it (a refusal, a loss that is not finite)
    ms_per_step        wall milliseconds per training step (one process, one thread)
    train_elbo,        the local ELBO per datapoint, E_q(θ) mean_n E_q(z_n|x_n)[log p(x_n, z_n | θ) − log q(z_n)] on
    heldout_elbo       the training and the held-out datapoints (J draws of θ × K draws of z each, the sites' own
                       log-densities unscaled; the global KL term of the ELBO is left out, as measure_gap leaves it)
    heldout_iw         the importance-weighted bound of the same: E_q(θ) mean_n log mean_k w_nk, K draws of z_n per θ
    heldout_recon      E_q[log p(x_n | z_n, θ)] per held-out datapoint: the observed sites' part of the ELBO
    downstream         the example's own number (each model's ``downstream``)
    gap                measure_gap's amortization gap (mean, s.e. over its datapoints) on held-out datapoints (a
                       per-datapoint guide: on training ones), or ``gap_refused``: the one line of its refusal
    gap_held           an AutoGuideList's gap (its builder part's, measure_gap holding the other parts' sites at one
                       draw each from its seed): the held sites' names; the gap is conditional on those draws
    scale_link         the encoder's scale link, read from the built guide (None: none; lines recorded before this
                       field: their name says it, :func:`label`)

The default A-VI guide (:data:`DEFAULT`; ``measured=True``) also records, on the same first 16 datapoints:

    train_gap          measure_gap's amortization gap on training datapoints (``seen=True``; ``train_gap_stderr``,
                       or ``train_gap_refused``): beside ``gap``, whether the gap is mostly held out
    khat               diagnose's k̂ per held-out datapoint (importance_diagnostics at :data:`DIAGNOSE`'s budget),
                       ``khat_threshold`` (unreliable above it for that many draws), ``khat_reading`` (diagnose's
                       sentence), or ``khat_refused``
    calibration_p      diagnose's calibration through the encoder (local_sbc): the Bonferroni p-value of uniform
                       ranks (``calibration_p_values`` per coordinate, ``calibration_bins``), or
                       ``calibration_refused``

A guide that has no factor for new datapoints (a per-datapoint guide) has held-out entries None.
"""
import functools
import math
import time
import warnings

import torch

import pyro
from pyro import poutine
from pyro.infer import SVI
from pyro.poutine.util import site_is_subsample

from amortized_pyro import GapSettings
from amortized_pyro.autoguides import (AutoAmortizedNormal, AutoIterativeAmortizedNormal, AutoPerDatapointNormal,
                                       AutoSemiAmortizedNormal, importance_diagnostics, local_sbc, measure_gap)
from amortized_pyro.autoguides.diagnose import reading

LINKS = ("exp", "softplus")
"""The encoder builders' scale links (``scale_link=``): σ_n = exp or softplus of the scale head's output."""
ENCODERS = {
    "amortized": AutoAmortizedNormal,
    "semi-amortized": AutoSemiAmortizedNormal,
    "iterative": AutoIterativeAmortizedNormal,
    "flow": lambda model, **options: AutoAmortizedNormal(model, flow=2, **options),
}
"""The encoder builders by the gallery's base names (``flow``: A-VI with two autoregressive transforms)."""
BUILDERS = {"%s+%s" % (name, link): functools.partial(builder, scale_link=link)
            for link in LINKS for name, builder in ENCODERS.items()}
BUILDERS["per-datapoint"] = AutoPerDatapointNormal
"""The package's builders by the gallery's guide names: an encoder builder's name says its scale link, passed
explicitly (``amortized+exp``, ``amortized+softplus``), so that a recorded name, run again, is built the same
whatever the builder's default is; the per-datapoint guide has no scale head."""
EXP = tuple(name + "+exp" for name in ENCODERS)
"""The encoder builders with σ_n = exp of the scale head (the builders' default until commit 18d653a;
as Pyro's examples/vae writes its guide)."""
SOFTPLUS = tuple(name + "+softplus" for name in ENCODERS)
"""The encoder builders with ``scale_link="softplus"`` (σ_n = softplus of the scale head, as Pyro's AutoNormal
constrains its scales): the builders' default since commit 18d653a (exp stopped some of them on
counts: issue 68, and LDA here)."""
DEFAULT = "amortized+softplus"
"""The default A-VI guide, ``AutoAmortizedNormal(model)`` as it stands (its default scale link: tests check it);
its runs also record the training-split gap and ``diagnose`` (:func:`run_one`)."""
RECORDED_EXP = ("amortized", "semi-amortized", "iterative", "flow", "builder-body", "builder-body+torch-heads",
                "builder-body+hand-start", "contrib-model")
"""Guide names of lines recorded before the names said their link: each built on the builders' default scale
link, then exp (every such line of figures/gallery/runs.jsonl was recorded before commit 18d653a); read as
the name with ``+exp`` (:func:`label`), their numbers untouched."""


def label(record):
    """The guide's name of a recorded line, saying its scale link: the recorded name, or, for a line recorded
    before names said it (no ``scale_link`` field, a name of :data:`RECORDED_EXP`), the name with ``+exp``."""
    name = record["guide"]
    return name + "+exp" if "scale_link" not in record and name in RECORDED_EXP else name


def link_of(guide):
    """The scale link of a built guide (an AutoGuideList's encoder part's), or None where it has none (a
    hand-written guide, a per-datapoint one, a builder refused at construction)."""
    parts = list(guide) if isinstance(guide, torch.nn.ModuleList) else [guide]
    links = {getattr(part, "scale_link", None) for part in parts} - {None}
    return links.pop() if len(links) == 1 else None


GAP_SETTINGS = GapSettings(samples=32, importance_samples=100, ais_steps=0, theta_draws=2, score_draws=4,
                           select_draws=4, window=50, max_steps=400, step_samples=4)
"""A small gap budget, sized for the CPU: the gap's q* is a lower bound on the best factor (fewer steps)."""
GAP_POINTS = 16  # datapoints the gap (and diagnose) is measured on
DIAGNOSE = {"samples": 200, "theta_draws": 2, "simulations": 96, "sbc_draws": 99}
"""diagnose's budget, sized for the CPU: k̂ from 200 draws of z per datapoint at each of 2 θ draws (its threshold
for 200 draws: diagnose's ``threshold``); calibration (local SBC) from 96 simulated datapoints, 99 draws of q each."""
THETA_DRAWS, Z_DRAWS = 4, 16  # the held-out ELBO's and IW bound's draws of θ and of z per θ


class Setup:
    """One (model, guide) ready to train: ``model`` and ``guide`` for SVI with ``loss``; ``score_model`` the model
    whose log joint is scored and measured (the same model, or the example's with a discrete site summed out);
    ``after_step`` run after each step (the example's clipping); ``serves_new`` whether the guide has a factor
    for new datapoints; ``module`` what is put in eval mode for scoring (None: nothing)."""

    def __init__(self, model, guide, loss, score_model=None, after_step=None, serves_new=True, module=None):
        self.model, self.guide, self.loss = model, guide, loss
        self.score_model = score_model or model
        self.after_step, self.serves_new, self.module = after_step, serves_new, module


def minibatch_indices(n, batch, steps, generator, keep=None):
    """The indices of ``steps`` minibatches of ``batch`` of ``n`` datapoints, epochs of fresh permutations from
    ``generator`` (a minibatch that ``keep(idx)`` rejects is skipped, not counted)."""
    taken = 0
    while True:
        for idx in torch.randperm(n, generator=generator).split(batch):
            if taken == steps:
                return
            if keep is None or keep(idx):
                taken += 1
                yield idx


def one_line(error):
    """An exception as the one line the tables print."""
    return "%s: %s" % (type(error).__name__, (str(error).strip().splitlines() or [""])[0][:300])


def _per_datapoint(trace, plate, observed):
    """Σ over the sites of ``plate`` (``observed``: the observed ones; else the latent ones) of their unscaled
    log-densities, per datapoint [B]; and the same of every latent site outside the plate (a scalar)."""
    local, outside = 0.0, 0.0
    for site in trace.nodes.values():
        if site["type"] != "sample" or site_is_subsample(site) or site["is_observed"] != observed:
            continue
        frames = [f for f in site["cond_indep_stack"] if f.name == plate]
        log_p = site["fn"].log_prob(site["value"])
        if frames:
            local = local + log_p.movedim(frames[0].dim, 0).reshape(frames[0].size, -1).sum(1)
        elif not observed:
            outside = outside + log_p.sum()
    return local, outside


@torch.no_grad()
def local_weights(model, guide, args, plate, theta_draws=THETA_DRAWS, z_draws=Z_DRAWS):
    """(log w [J, K, B], log p(x_n | z_n, θ) [J, K, B]): log p(x_n, z_n | θ) − log q(z_n) per datapoint of the call
    ``model(*args)``, for J draws θ ~ q(θ) and K draws z ~ q(z | θ) each (the guide run again with its global
    sites held at the θ draw)."""
    weights, likelihoods = [], []
    for _ in range(theta_draws):
        first = poutine.trace(guide).get_trace(*args)
        theta = [name for name, site in first.nodes.items() if site["type"] == "sample"
                 and not site["is_observed"] and not any(f.name == plate for f in site["cond_indep_stack"])
                 and not site_is_subsample(site)]
        held = poutine.Trace()  # the θ draw alone: the guide replayed on it draws its local sites afresh
        for name in theta:
            held.add_node(name, **first.nodes[name])
        row_w, row_l = [], []
        for k in range(z_draws):
            drawn = first if k == 0 else poutine.trace(poutine.replay(guide, trace=held)).get_trace(*args)
            traced = poutine.trace(poutine.replay(model, trace=drawn)).get_trace(*args)
            latent, _ = _per_datapoint(traced, plate, observed=False)
            likelihood, _ = _per_datapoint(traced, plate, observed=True)
            q, _ = _per_datapoint(drawn, plate, observed=False)
            row_w.append(latent + likelihood - q)
            row_l.append(likelihood)
        weights.append(torch.stack(row_w))
        likelihoods.append(torch.stack(row_l))
    return torch.stack(weights), torch.stack(likelihoods)


def score(setup, chunks, plate):
    """(ELBO, IW bound, reconstruction) per datapoint, averaged over the datapoints of the calls ``chunks``."""
    elbo, iw, recon = [], [], []
    for args in chunks:
        w, likelihood = local_weights(setup.score_model, setup.guide, args, plate)
        elbo.append(w.mean((0, 1)))
        iw.append((w.logsumexp(1) - math.log(w.shape[1])).mean(0))
        recon.append(likelihood.mean((0, 1)))
    return tuple(float(torch.cat(v).mean()) for v in (elbo, iw, recon))


def gap(setup, args, seen, draws="auto"):
    """(amortization gap mean, its s.e., None, the held sites) by measure_gap on the call ``setup.score_model(*args)``
    (its ``draws`` option; the held sites: an AutoGuideList's other parts', the gap conditional on their draws, else
    None), or (None, None, the refusal's line, None)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("once")  # a capped q*, a model not broadcast-safe: said once, not raised
            report = measure_gap(setup.score_model, setup.guide, *args, settings=GAP_SETTINGS, seen=seen,
                                 draws=draws)
    except Exception as error:  # noqa: BLE001 — every refusal is a result: its line goes in the table
        return None, None, one_line(error), None
    return (report["amortization_gap"]["mean"], report["amortization_gap"]["stderr"], None,
            report.get("held_at_draws"))


def diagnosed(setup, args, seen, draws="auto", with_data=None):
    """What ``diagnose`` says of ``setup.guide`` on the call ``setup.score_model(*args)`` at :data:`DIAGNOSE`'s
    budget, as record fields: its two parts, k̂ per datapoint (importance_diagnostics) and calibration through the
    encoder (local_sbc; ``with_data``: the model's arguments for its simulated observations, where the model
    observes more than one site), each run alone so that one's refusal (its one line) keeps the other's result."""
    fields = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ArviZ's own k̂ warnings: the numbers are the result
        try:
            found = importance_diagnostics(setup.score_model, setup.guide, *args, samples=DIAGNOSE["samples"],
                                           theta_draws=DIAGNOSE["theta_draws"], seen=seen, draws=draws)
            fields.update(khat=found["guide"]["khat"], khat_threshold=found["threshold"], khat_reading=reading(found))
        except Exception as error:  # noqa: BLE001 — a refusal is a result: its line goes in the page
            fields["khat_refused"] = one_line(error)
        try:
            found = local_sbc(setup.score_model, setup.guide, *args, simulations=DIAGNOSE["simulations"],
                              draws=DIAGNOSE["sbc_draws"], with_data=with_data)
            fields.update(calibration_p=found["p_value"], calibration_p_values=found["p_values"],
                          calibration_bins=found["bins"])
        except Exception as error:  # noqa: BLE001
            fields["calibration_refused"] = one_line(error)
    return fields


def train(setup, optimizer, batches):
    """Train by stock SVI on each of ``batches`` (argument tuples); returns (steps, stopped line or None,
    wall ms per step after the first, the losses)."""
    svi = SVI(setup.model, setup.guide, optimizer, setup.loss)
    losses, stopped, start = [], None, None
    for args in batches:
        if len(losses) == 1:  # the clock starts after the first step (the guide's and the parameters' setup)
            start = time.perf_counter()
        try:
            loss = svi.step(*args)
        except (ValueError, RuntimeError, AssertionError) as error:  # a refusal, Pyro's argument check
            stopped = one_line(error)
            break
        if not math.isfinite(loss):
            stopped = "loss %r at step %d" % (loss, len(losses) + 1)
            break
        if setup.after_step is not None:
            setup.after_step()
        losses.append(loss)
    timed = len(losses) - 1 + (stopped is not None)
    ms = 1000 * (time.perf_counter() - start) / timed if start is not None and timed > 0 else None
    return len(losses), stopped, ms, losses


def run_one(spec, guide_name, seed, data, optimizer="example", steps=None, measured=None):
    """One JSON record of the module docstring for ``spec`` (a gallery model module) and ``guide_name``, from
    ``seed`` (the parameters' initialization, the guide's and the minibatches' draws), trained by the optimizer
    ``spec.OPTIMIZERS[optimizer]`` (``"example"``: the example's own); ``measured`` (default: whether the guide is
    :data:`DEFAULT`): also the training-split gap and diagnose, measured after everything else (the other fields
    are those a run without them gives)."""
    pyro.clear_param_store()
    pyro.set_rng_seed(seed)
    steps = steps or spec.STEPS
    setup = spec.build(guide_name, data)
    taken, stopped, ms, losses = train(setup, spec.OPTIMIZERS[optimizer](),
                                       spec.batches(data, steps, torch.Generator().manual_seed(seed)))
    record = {"model": spec.NAME, "guide": guide_name, "seed": seed, "optimizer": optimizer, "steps": taken,
              "budget": steps, "scale_link": link_of(setup.guide),
              "stopped": stopped, "ms_per_step": ms, "first_loss": losses[0] if losses else None,
              "last_loss": losses[-1] if losses else None}
    if stopped is not None:
        return record
    if setup.module is not None:
        setup.module.eval()
    pyro.set_rng_seed(seed)
    record["train_elbo"] = score(setup, spec.chunks(data["train"]), spec.PLATE)[0]
    if setup.serves_new:
        record["heldout_elbo"], record["heldout_iw"], record["heldout_recon"] = score(setup, spec.chunks(data["test"]),
                                                                                     spec.PLATE)
    record["downstream_name"], record["downstream"] = spec.downstream(setup, data, record)
    split = "test" if setup.serves_new else "train"
    record["gap_split"] = split
    first = getattr(spec, "first", lambda x, n: x[:n])  # the first n datapoints of a data tensor
    record["gap"], record["gap_stderr"], record["gap_refused"], held = gap(
        setup, spec.chunks(first(data[split], GAP_POINTS))[0], seen=not setup.serves_new,
        draws=getattr(spec, "GAP_DRAWS", "auto"))
    if held is not None:  # an AutoGuideList's builder part, the other parts' sites held at their draws
        record["gap_held"] = held
    if measured if measured is not None else guide_name == DEFAULT:
        if setup.serves_new:  # the training split beside the held-out one (a per-datapoint guide's gap is on it)
            record["train_gap"], record["train_gap_stderr"], record["train_gap_refused"], _ = gap(
                setup, spec.chunks(first(data["train"], GAP_POINTS))[0], seen=True,
                draws=getattr(spec, "GAP_DRAWS", "auto"))
        record["diagnose_split"] = split
        record.update(diagnosed(setup, spec.chunks(first(data[split], GAP_POINTS))[0], seen=not setup.serves_new,
                                draws=getattr(spec, "GAP_DRAWS", "auto"), with_data=getattr(spec, "with_data", None)))
    return record
