"""A trained guide builder's posterior as ArviZ's ``InferenceData``, which ArviZ cannot make from an SVI result
(``az.from_pyro`` reads MCMC only: arviz-devs/arviz issue #2453). :func:`to_inference_data` draws (θ, z) from
the guide and writes, with the data plate as a named dimension:

    posterior        every global site (chain 1, draw s) and every local site per datapoint, in constrained space
    log_likelihood   log p(x_n | z_n, θ) per draw and datapoint (the observed sites in the plate; ``az.loo`` and
                     ``az.waic`` read it: with local latents this is the conditional log-likelihood, each
                     datapoint's own z_n in it, and the draws are the guide's, not the posterior's)
    sample_stats     ``log_weight``: log p(x_n, z_n | θ) − log q(z_n | x_n, θ) per draw and datapoint (in the local
                     sites' unconstrained space, Jacobian included), the importance weights of q against the
                     local posterior at each draw's θ
    importance       ``pareto_k`` per datapoint: ArviZ's k̂ of those weights over all draws (θ changes with the
                     draw: it carries log p(x_n | θ)'s spread over q(θ); :func:`~.diagnose.importance_diagnostics`
                     fits k̂ at fixed θ draws instead)
    observed_data    the observed sites' values for the call's datapoints

Draws: with M = ``num_samples`` draws θ_m ~ q(θ), one z each; where q(θ) is a point mass or the model has no
global site, ``num_samples`` z draws at the one θ. All keyed by ``seed``.
"""

import torch


from amortized_pyro.autoguides.diagnose import built_guide, seeded_trace
from amortized_pyro.autoguides.gap import TracedPosterior, checked_seed, guide_factor
from amortized_pyro.autoguides.gap import theta_draws as keyed_theta_draws
from amortized_pyro.autoguides.local_joint import LocalJoint, check_draws
from amortized_pyro.autoguides.options import count
from amortized_pyro.errors import GuideError
from amortized_pyro.local.diagnostics import pareto_khat
from amortized_pyro.local.estimates import CHUNK, broadcast_factor, draw_log_weights
from amortized_pyro.local.gaps import GapSettings


def _numpy(t):
    return t.detach().cpu().numpy()


@torch.no_grad()
def to_inference_data(model, guide, *args, num_samples=500, seed=0, draws="auto", chunk=CHUNK, **kwargs):
    """The InferenceData of the module docstring for the call ``model(*args, **kwargs)``.

    :param model: the Pyro model the guide was built from.
    :param guide: a trained :class:`~amortized_pyro.autoguides.AutoLocalGuide` with a Gaussian factor.
    :param int num_samples: draws.
    :param int seed: keys every draw.
    :param str draws: how the model is run on many draws (:func:`~amortized_pyro.autoguides.measure_gap`'s option).
    :param int chunk: rows (draws × datapoints) scored at a time.

    Each argument is refused in one line of :class:`~amortized_pyro.errors.GuideError` before anything is drawn
    (ArviZ's k̂ needs two draws: one ended in its IndexError, none in torch's, before; issue 71).
    """
    if not callable(model):
        raise GuideError("to_inference_data takes the Pyro model first (a callable), got %s" % type(model).__name__)
    count("num_samples", num_samples, 2)
    checked_seed(count("seed", seed))  # None too: it keys every draw
    check_draws(draws)
    count("chunk", chunk, 1)
    import arviz as az
    import xarray as xr

    built_guide(guide, args, kwargs, "to_inference_data")
    guide.check_gaussian("to_inference_data")
    structure = guide.structure
    posterior = TracedPosterior(model, guide, args, kwargs, True, draws)  # not a model's own: its θ carry extra terms
    fit, _ = keyed_theta_draws(posterior, guide, GapSettings(theta_draws=num_samples, score_draws=1, seed=seed),
                               selection=False)
    per_theta = num_samples // len(fit)
    loc, scale = guide_factor(posterior, guide, fit.at("guide"))
    likelihood = LocalJoint(model, structure, args, kwargs, posterior.indices, stacked=True, draws=draws,
                            observed=True)
    n, size = loc.shape[-2:]
    scored, pieces = fit.at("score"), []
    for start, stop in scored.chunks(per_theta * n, chunk):
        part = scored.part(start, stop)
        eps = part.normal(part.generators(), (per_theta, n, size), loc.dtype)
        u = broadcast_factor(loc) + broadcast_factor(scale) * eps
        pieces.append((u.flatten(0, 1), draw_log_weights(posterior.log_joint, posterior.x, loc, scale, part.values,
                                                         eps).flatten(0, 1),
                       likelihood(posterior.x, u, part.values).flatten(0, 1)))
    u, log_weight, log_lik = (torch.cat(p) for p in zip(*pieces))  # [draws, n, ...]
    plate = structure.plate
    coords = {plate: _numpy(posterior.indices)}
    values = {name: _numpy(v.repeat_interleave(per_theta, 0))[None] for name, v in fit.values.items()
              if name in structure.globals}
    for site in structure.locals:
        unconstrained = u[..., site.start:site.stop].reshape((u.shape[0], n) + site.unconstrained_shape)
        values[site.name] = _numpy(site.transform(unconstrained))[None]
    dims = {site.name: [plate] + ["%s_dim_%d" % (site.name, i) for i in range(len(site.event_shape))]
            for site in structure.locals}
    trace = seeded_trace(model, structure, posterior.indices, args, kwargs, 0)  # the observed values
    observed = {name: site["value"] for name, site in trace.nodes.items() if site["type"] == "sample"
                and site["is_observed"] and plate in [f.name for f in site["cond_indep_stack"]]}
    name = next(iter(observed)) if len(observed) == 1 else "+".join(observed) or "obs"
    data = az.from_dict(posterior=values, log_likelihood={name: _numpy(log_lik)[None]},
                        sample_stats={"log_weight": _numpy(log_weight)[None]},
                        observed_data={k: _numpy(v.reshape(n, -1)) for k, v in observed.items()},
                        coords=coords, dims={**dims, name: [plate], "log_weight": [plate],
                                             **{k: [plate] for k in observed}})
    khat = pareto_khat(log_weight.T)
    data.add_groups({"importance": xr.Dataset({"pareto_k": ((plate,), khat)}, coords=coords)},
                    warn_on_custom_groups=False)
    data.attrs.update(inference_library="amortized_pyro", guide=type(guide).__name__, draws_per_theta=per_theta,
                      theta_draws=len(fit), seed=seed)
    return data

