"""Did amortized inference work, datapoint by datapoint? For any Pyro model and a trained guide builder:

    importance_diagnostics   per datapoint, the Pareto shape k̂ of the factor's importance weights, their spread
                             and the local ELBO (:mod:`amortized_pyro.local.diagnostics`), for the guide's factor
                             and any other factors given (q*, a refined one): where refinement fixed a datapoint
    local_sbc                calibration through the encoder: simulate (θ ~ q(θ), z_n ~ p(z), x_n ~ p(x | z_n, θ))
                             from the fitted model itself, run the guide on the simulated x_n, rank the true z_n
                             among draws of q(z_n | x_n) per coordinate; uniform ranks test
    diagnose                 both, one dict

**Which θ.** The weights are taken at fixed global draws, as the gap's estimators take theirs: M draws θ_m ~
q(θ) (the median of q(θ) once with ``theta="mean"``, or where q(θ) is a point mass or the model has no global
site), S draws of z per θ_m; k̂ is fitted per (datapoint, θ_m) on log p(x_n, z | θ_m) − log q(z | x_n), so each
targets the exact local posterior p(z_n | x_n, θ_m), and a datapoint's k̂ is the mean over the M draws (each
kept). Drawing θ afresh with each z would add log p(x_n | θ)'s spread over q(θ) to the weights, a property of
q(θ), not of the local factor.

**What calibration means here.** Ranks are uniform when q(z_n | x_n) is the exact posterior *of the fitted
model* (its own p(z) and p(x | z, θ), θ from q(θ)) for data the model itself simulates: a check of the guide
against the model, not of the model against the data. Simulated x_n can lie far from the data the encoder was
trained on (a model whose samples do not look like its data): then it checks the encoder where it was not
trained. Ranks are taken in each local site's unconstrained space (monotone per coordinate for the elementwise
bijections, so the same ranks as in constrained space there).
"""
import math

import numpy as np
import torch

from pyro import poutine

from amortized_pyro.autoguides.gap import REFINE_SEED, checked_steps, guide_factor, local_posterior
from amortized_pyro.autoguides.gap import theta_draws as keyed_theta_draws
from amortized_pyro.autoguides.options import count, positive
from amortized_pyro.errors import GuideError
from amortized_pyro.local.diagnostics import KHAT_DRAWS, grade, pareto_khat, ranks, uniformity, usable_below
from amortized_pyro.local.estimates import CHUNK, all_log_weights
from amortized_pyro.local.gaps import GapSettings
from amortized_pyro.local.optimize import converge, refine

REFINE_DRAWS = 8  # z draws per refinement step: the gap's step_samples


def built_guide(guide, args, kwargs, what):
    if not hasattr(guide, "structure"):
        raise GuideError("%s takes a guide builder of amortized_pyro.autoguides, not %s" % (what, type(guide).__name__))
    if guide.structure is None:  # a builder not called yet: read the model now
        with torch.no_grad():
            guide(*args, **kwargs)


CHEAP_DRAWS = 8  # ``spread_8``: the spread of the first 8 z draws per θ draw, what SA-VI's share scores by


def weight_summary(log_weights):
    """Per datapoint, from log weights [M, S, n]: k̂ (the mean over the M θ draws; ``khat_per_draw`` [M][n]), the
    log weights' standard deviation over z (``spread``, the mean over the draws; ``spread_8`` of the first
    :data:`CHEAP_DRAWS` z draws alone), the local ELBO (their mean) and the importance-weighted bound
    log-mean-exp (both averaged over the draws), and k̂'s usual grade."""
    khat = pareto_khat(log_weights.permute(0, 2, 1))  # [M, n]
    samples = log_weights.shape[1]
    mean_khat = khat.mean(0)
    return {"khat": mean_khat.tolist(), "khat_per_draw": khat.tolist(),
            "spread": log_weights.std(1).mean(0).tolist(),
            "spread_8": log_weights[:, :CHEAP_DRAWS].std(1).mean(0).tolist(), "elbo": log_weights.mean(1).mean(0).tolist(),
            "iwae": (log_weights.logsumexp(1) - math.log(samples)).mean(0).tolist(),
            "grade": grade(mean_khat, samples)}


@torch.no_grad()
def importance_diagnostics(model, guide, *args, samples=1000, theta_draws=4, theta="sample", factors=None, seed=0,
                           seen=True, refine_steps=(), refine_lr=1e-2, q_star=False, q_star_steps=2000, draws="auto",
                           chunk=CHUNK, **kwargs):
    """Per datapoint of the model's call ``model(*args, **kwargs)``, k̂ and the other summaries of
    :func:`weight_summary` for the guide's factor and for each of ``factors``.

    :param model: the Pyro model the guide was built from.
    :param guide: a trained :class:`~amortized_pyro.autoguides.AutoLocalGuide` (a flow's factor included; its
        refinement rows and q* take a Gaussian one).
    :param int samples: S, z draws per datapoint and θ draw, at least 25 (fewer give every datapoint k̂ = ∞;
        ArviZ warns below ~100; k̂ settles with ~1,000).
    :param int theta_draws: M, draws θ_m ~ q(θ) (module docstring).
    :param str theta: ``"sample"`` or ``"mean"`` (θ at q(θ)'s median).
    :param dict factors: name → (loc, scale) [n, size] of other Gaussian factors on the same datapoints, in the
        flat unconstrained layout (q* from :func:`~amortized_pyro.autoguides.measure_gap`, a refined factor).
    :param refine_steps: also the factor after each of these numbers of Adam steps from the guide's (learning
        rate ``refine_lr``, 8 z draws a step, on the mean local ELBO over the θ draws: the gap's refinement rows),
        as ``"refined-K"``: where refinement fixes a datapoint.
    :param bool q_star: also q* (``"q*"``): the gap's optimization from the guide's factor on the mean local ELBO
        over the θ draws (Adam, its windowed stopping rule, :class:`~amortized_pyro.local.gaps.GapSettings`'
        defaults, at most ``q_star_steps`` steps), its best window's iterate; without the gap's choice among
        candidates on fresh draws, so on few θ draws it can fit their noise.
    :param int seed: keys the θ draws and every z draw.
    :param bool seen: whether the guide was trained on these datapoints (a per-datapoint guide has no factor
        for others).
    :returns: {"guide": summary, name: summary for each factor, "samples", "theta_draws", "theta", "threshold"
        (k̂ is unreliable above it: 0.7, or Vehtari et al.'s lower threshold for S draws), "size" (the local
        dimension)}.
    """
    count("samples", samples, KHAT_DRAWS)
    count("theta_draws", theta_draws, 1)
    count("chunk", chunk, 1)
    refine_steps = checked_steps(refine_steps)
    if refine_steps:
        positive("refine_lr", refine_lr)
    built_guide(guide, args, kwargs, "importance_diagnostics")
    if refine_steps or q_star:
        guide.check_gaussian("k̂ of refined factors and of q*")
    settings = GapSettings(theta_draws=theta_draws, score_draws=1, theta=theta, seed=seed,
                           max_steps=q_star_steps).check()
    posterior = local_posterior(model, guide, args, kwargs, seen, draws)
    fit, _ = keyed_theta_draws(posterior, guide, settings, selection=False)
    factor = guide_factor(posterior, guide, fit.at("guide"))
    if factor is None:
        raise GuideError("the guide has no factor for these datapoints (a per-datapoint guide on datapoints it was "
                         "not trained on): nothing to diagnose")
    scored = fit.at("score")
    factors = dict(factors or {})
    for k in refine_steps:
        loc, log_scale = refine(posterior.log_joint, posterior.x, factor[0], factor[1].log(), fit.at("refine"),
                                refine_lr, k, REFINE_DRAWS, chunk=chunk)
        factors["refined-%d" % k] = (loc, log_scale.exp())
    if q_star:
        found = converge(posterior.log_joint, posterior.x, factor[0], factor[1].log(), fit.at("fit"), settings.lr,
                         settings.rule(), settings.step_samples, compact=posterior.compact, chunk=chunk)
        factors["q*"] = (found.loc, found.log_scale.exp())
    result = {"samples": samples, "theta_draws": len(fit), "theta": theta, "size": posterior.size,
              "threshold": usable_below(samples)[1]}
    flow = posterior.flow()  # the guide's flow after its Gaussian factor, or None
    for name, (loc, scale) in {"guide": factor, **factors}.items():
        result[name] = weight_summary(all_log_weights(posterior.log_joint, posterior.x, loc, scale, scored, samples,
                                                      chunk, flow if name == "guide" else None))
    return result


def seeded_trace(model, structure, indices, args, kwargs, seed, values=None, simulate=False):
    """The model's trace at the call's datapoints ``indices`` (the plate conditioned on them) and the given
    ``values`` (site → value), its other draws from a forked global stream seeded by ``seed`` (the stream is left
    as it was); ``simulate``: the observed sites drawn too (``poutine.uncondition``, inside the conditioning so
    that the given values stay)."""
    device = indices.device
    inner = poutine.uncondition(model) if simulate else model
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []), poutine.block():
        torch.manual_seed(seed)
        conditioned = poutine.condition(inner, data={**(values or {}), structure.plate: indices})
        return poutine.trace(conditioned).get_trace(*args, **kwargs)


def _flat_locals(structure, trace, batch):
    """The true local values of a simulated trace in the flat unconstrained layout [B, size]."""
    parts = [site.transform.inv(trace.nodes[site.name]["value"]).reshape(batch, -1) for site in structure.locals]
    return torch.cat(parts, -1)


def _simulated(trace, structure):
    """The observed sites in the data plate of a trace under ``poutine.uncondition``: name → (the data's value,
    the simulated one)."""
    return {name: (site["infer"]["obs"], site["value"]) for name, site in trace.nodes.items()
            if site["type"] == "sample" and site["infer"].get("was_observed")
            and structure.plate in [f.name for f in site["cond_indep_stack"]]}


def _with_value(args, kwargs, kind, key, value):
    args, kwargs = list(args), dict(kwargs)
    if kind == "a":
        args[key] = value
    else:
        kwargs[key] = value
    return tuple(args), kwargs


def default_with_data(simulated, indices, full_size, args, kwargs, observes):
    """The model's arguments with the simulated observations in the data's place, as the model says: each tensor
    argument (positional or keyword) with as many elements as the one observed site in the plate (the batch's
    rows; or, for an argument of all ``full_size`` datapoints that the plate subsamples, the rows ``indices``)
    is given the simulated values, and kept where the model run on it, ``observes(args, kwargs)`` → site → the
    observed value, observes exactly those values (a re-trace: a model that transforms its data before observing
    it, ``obs=x / 255``, is never simulated on the wrong scale). One line of :class:`GuideError` where no
    argument, or more than one, passes."""
    if len(simulated) != 1:
        raise GuideError("local_sbc: %d observed sites in the data plate; give with_data=a function (simulated "
                         "observations, args, kwargs) -> (args, kwargs)" % len(simulated))
    (name, (value, new)), = simulated.items()
    batch = len(indices)
    places = [("a", i, a) for i, a in enumerate(args)] + [("k", k, a) for k, a in kwargs.items()]
    passed = []
    for kind, key, arg in places:
        if not torch.is_tensor(arg) or arg.dim() == 0:
            continue
        if arg.numel() == value.numel():
            replaced = new.reshape(arg.shape).to(arg.dtype)
        elif arg.shape[0] == full_size != batch and arg.numel() == value.numel() // batch * full_size:
            replaced = arg.clone()
            replaced[indices.to(arg.device)] = new.reshape((batch,) + arg.shape[1:]).to(arg.dtype)
        else:
            continue
        candidate = _with_value(args, kwargs, kind, key, replaced)
        seen = observes(*candidate).get(name)
        if seen is not None and seen.shape == new.shape and torch.allclose(seen.to(new.dtype), new):
            passed.append(candidate)
    if len(passed) != 1:
        raise GuideError("local_sbc: %s of the model's arguments, given the simulated values of the observed site "
                         "%r, makes the model observe them (a model that transforms its data before observing it "
                         "cannot be given them by position); give with_data=a function (simulated observations, "
                         "args, kwargs) -> (args, kwargs)" % ("none" if not passed else "more than one", name))
    return passed[0]


@torch.no_grad()
def local_sbc(model, guide, *args, simulations=200, draws=99, seed=0, with_data=None, **kwargs):
    """Calibration through the encoder (module docstring): ``simulations`` datapoints simulated from the fitted
    model in rounds of the call's batch (each round one θ ~ q(θ), so a call of fewer datapoints tests q at more θ
    draws; the model's own p(z) and p(x | z, θ) through ``poutine.uncondition``), the guide's factor on each simulated batch (its flow's draws through the flow), and
    the rank of every true local coordinate among ``draws`` draws of q(z_n | x_n).

    :param int simulations: N, simulated datapoints (rounded up to whole batches, then cut).
    :param int draws: L, draws of q per simulated datapoint (L + 1 = 100: bins of equal width for the test).
    :param int seed: keys θ, the simulations (the global torch stream is forked: left as it was) and q's draws.
    :param with_data: ``(simulated observations {site: value}, args, kwargs) → (args, kwargs)``, the model's
        arguments with the simulated data; default :func:`default_with_data`.
    :returns: {"ranks" [N][size], "draws", "simulations", "bins", "p_values" per coordinate, "p_value" (their
        Bonferroni combination), "size"}.
    """
    count("simulations", simulations, 1)
    count("draws", draws, 1)
    built_guide(guide, args, kwargs, "local_sbc")
    if not guide.can_infer_unseen:
        raise GuideError("local SBC runs the guide on simulated data: a per-datapoint guide has no factor for it")
    structure = guide.structure
    indices = guide.indices_of(*args, **kwargs)
    batch = len(indices)
    device = next(guide.parameters()).device
    generator = torch.Generator(device).manual_seed(seed)
    found = []
    for _ in range(math.ceil(simulations / batch)):
        theta = guide.global_sample(generator) if structure.globals else {}
        key = int(torch.randint(2 ** 62, (), generator=generator, device=device))
        trace = seeded_trace(model, structure, indices, args, kwargs, key, theta, simulate=True)
        truth = _flat_locals(structure, trace, batch)
        simulated = _simulated(trace, structure)
        def observes(args_, kwargs_, key=key, theta=theta):
            """site → the value the model observes in the plate when run on these arguments."""
            return {name: value for name, (value, _) in _simulated(
                seeded_trace(model, structure, indices, args_, kwargs_, key, theta, simulate=True), structure).items()}

        if with_data is None:
            new_args, new_kwargs = default_with_data(simulated, indices, structure.full_size, args, kwargs, observes)
        else:
            new_args, new_kwargs = with_data({name: new for name, (_, new) in simulated.items()}, args, kwargs)
        with guide.refinement_draws(torch.Generator(device).manual_seed(REFINE_SEED + key)):
            loc, scale = guide.local_factor(indices, new_args, new_kwargs, theta)
        eps = torch.randn((draws,) + tuple(loc.shape), generator=generator, device=device, dtype=loc.dtype)
        values = guide.push(loc + scale * eps, indices, new_args, new_kwargs)
        found.append(ranks(truth, values))
    rank_values = torch.cat(found)[:simulations].cpu()
    test = uniformity(rank_values, draws)
    return {"ranks": rank_values.tolist(), "draws": draws, "simulations": len(rank_values), "size": structure.size,
            **test}


def diagnose(model, guide, *args, samples=1000, theta_draws=4, theta="sample", simulations=200, sbc_draws=99,
             seed=0, seen=True, with_data=None, draws="auto", **kwargs):
    """:func:`importance_diagnostics` and :func:`local_sbc` of ``guide`` on the call ``model(*args, **kwargs)``:
    {"importance": ..., "calibration": ... (None for a per-datapoint guide, which has no factor for simulated
    data), "reading": what k̂'s thresholds say here}. The parameters are theirs."""
    importance = importance_diagnostics(model, guide, *args, samples=samples, theta_draws=theta_draws, theta=theta,
                                        seed=seed, seen=seen, draws=draws, **kwargs)
    calibration = None
    if guide.can_infer_unseen:
        calibration = local_sbc(model, guide, *args, simulations=simulations, draws=sbc_draws, seed=seed,
                                with_data=with_data, **kwargs)
    return {"importance": importance, "calibration": calibration, "reading": reading(importance)}


def reading(importance):
    """What k̂'s usual thresholds say for these results, in one sentence."""
    khat, limit = np.asarray(importance["guide"]["khat"]), importance["threshold"]
    share = float(np.mean(khat > limit))
    if share == 1.0 and importance["size"] >= 10:
        return ("k̂ > %.2f for every datapoint, with %d local dimensions: importance sampling from q is unreliable "
                "for all of them, and the thresholds single none out (the log weights of a high-dimensional factor "
                "sum many terms, and are heavy-tailed wherever q misses the posterior); read k̂ as a ranking of the "
                "datapoints, worst first" % (limit, importance["size"]))
    return ("%.0f %% of the datapoints have k̂ > %.2f (importance sampling from q unreliable there), %.0f %% below "
            "0.5 (good)" % (100 * share, limit, 100 * float(np.mean(khat < 0.5))))
