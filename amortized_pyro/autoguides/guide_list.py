"""measure_gap through Pyro's ``AutoGuideList``: the gap of its one builder part, the other parts' sites held at
their draws (:func:`held_at_draws`).

The other parts (any guides: AutoNormal, a hand-written classifier, enumerated or not) are run once at the call's
arguments, their latent sites drawn from the measurement's seed (the global random streams left as they were), in
the list's plates made once for the call, which the builder part then reads too (the same datapoints, a subsampled
plate's rows among them); the model is conditioned on those values (``poutine.condition``) and the builder part's
gap is measured on the conditioned model. The gap is then conditional on the draws: each datapoint's log joint is
log p(x_n, held_n, z_n | θ), its log p(x_n) estimate log p(x_n, held_n) (the held sites' log-densities stay in the
log joint: a held site may depend on the builder's latents, whose posterior it then shapes). The report names the
held sites (``held_at_draws``).

A held site must be in the data plate where the builder part's local sites are: one draw per datapoint, so that the
gap's mean over datapoints averages over the draws too. A site outside it (a global, or a site of another plate)
would be one draw shared by every datapoint, and the gap's mean and standard error those of that one draw: refused.
"""
import torch

from pyro import poutine
from pyro.poutine.util import site_is_subsample

from amortized_pyro.autoguides.base import AutoLocalGuide
from amortized_pyro.errors import GuideError
from amortized_pyro.settings import INT64_MAX
from amortized_pyro.support.streams import outside_the_stream

REFUSED = "measure_gap takes a guide builder of amortized_pyro.autoguides, not AutoGuideList"


def builder_part(guide):
    """The one part of the AutoGuideList ``guide`` that is a builder of :mod:`amortized_pyro.autoguides`; one line
    of :class:`GuideError` where it has none or several."""
    parts = [part for part in guide if isinstance(part, AutoLocalGuide)]
    if len(parts) != 1:
        raise GuideError("%s, except a list with exactly one builder part (its gap measured with the other parts' "
                         "sites held at their draws): this one has %d of its %d parts (%s)"
                         % (REFUSED, len(parts), len(guide), ", ".join(type(p).__name__ for p in guide) or "none"))
    return parts[0]


@torch.no_grad()
def held_draws(guide, part, args, kwargs, seed):
    """site → value: the latent sites of ``guide``'s parts other than ``part`` (auxiliary sites left out), drawn
    once at the call's arguments from ``seed`` + 1 (the measurement's θ draws take ``seed`` itself), the global
    random streams left as they were; one line of :class:`GuideError` at a site outside ``part``'s data plate
    (module docstring)."""
    with outside_the_stream(*{p.device for p in guide.parameters()}):
        if guide.prototype_trace is None or part.structure is None:  # not called yet: read the model now
            guide(*args, **kwargs)
        device = next(part.parameters()).device
        torch.default_generator.manual_seed((seed + 1) % (INT64_MAX + 1))
        if device.type == "cuda":
            with torch.cuda.device(device):
                torch.cuda.manual_seed((seed + 1) % (INT64_MAX + 1))

        def others():
            for other in guide:
                if other is not part:
                    other(*args, **kwargs)

        with poutine.block():
            guide._create_plates(*args, **kwargs)  # the list's plates of the call, which every part reads (Pyro's
            trace = poutine.trace(others).get_trace()  # protocol): the measurement's builder part reads them too
    plate = part.structure.plate
    held = {}
    for name, site in trace.nodes.items():
        if (site["type"] != "sample" or site["is_observed"] or site_is_subsample(site)
                or site["infer"].get("is_auxiliary")):
            continue
        if plate not in [frame.name for frame in site["cond_indep_stack"]]:
            raise GuideError("%s, except a list whose other parts' sites are in the data plate %r of its builder "
                             "part: the site %r is outside it, one draw shared by every datapoint, which would make "
                             "the gap's mean and standard error over datapoints those of that one draw; guide it in "
                             "the builder part (a global site, whose draws the gap averages over)"
                             % (REFUSED, plate, name))
        held[name] = site["value"].detach()
    return held


def held_at_draws(model, guide, args, kwargs, seed):
    """(the builder part of the AutoGuideList ``guide``, ``model`` conditioned on the other parts' draws
    (:func:`held_draws`), the held sites' names, sorted)."""
    part = builder_part(guide)
    held = held_draws(guide, part, args, kwargs, seed)
    return part, poutine.condition(model, data=held), sorted(held)
