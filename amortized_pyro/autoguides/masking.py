"""Models that mask their local sites (``poutine.mask``, ``.mask(...)``; Pyro's examples/dmm.py masks a sequence's
padded steps): which sites they mask, the masks a guide applies to its own log q (``local_mask``), and the local
log joint of the refining families with a standard Normal reference on the masked coordinates.

A masked row has no model terms, so nothing bounds q there: a guide that scores its log q on it pays entropy and
its σ grows without end (seen: 1,420× the unmasked rows' after 300 steps, SA-VI NaN). The guide masks its log q
the same way (the row drops out of the ELBO), and the local ELBO that SA-VI and IA-VI climb inside the guide adds
log N(u; 0, I) on the masked coordinates, whose ELBO −KL(q ‖ N(0, I)) ≤ 0 peaks at 0 at N(0, I): bounded, and
no change to the unmasked coordinates' optimum.
"""
import torch

import pyro.distributions as dist

from amortized_pyro.errors import GuideError
from amortized_pyro.local.estimates import HALF_LOG_2PI


def _no_mask(mask):
    """Whether a mask keeps everything: None, True, or a tensor all true (Pyro's idiom for an optional mask,
    ``.mask(True)``, is no mask). Read once, at the prototype call."""
    return mask is None or mask is True or (torch.is_tensor(mask) and bool(mask.all()))


def _is_masked(node):
    """Whether the model masks this site by a tensor or False (``poutine.mask``, or a ``.mask(...)`` anywhere in
    its distribution: ``Independent`` and ``MaskedDistribution`` wrap one another); a mask that keeps
    everything is none."""
    if not _no_mask(node["mask"]):
        return True
    fn = node["fn"]
    while fn is not None:
        if isinstance(fn, dist.MaskedDistribution) and not _no_mask(fn._mask):  # its mask (no public accessor)
            return True
        fn = getattr(fn, "base_dist", None)
    return False


def masked_sites(trace, structure):
    """The local sites the model masks, in trace order."""
    return [site.name for site in structure.locals if _is_masked(trace.nodes[site.name])]


def check_unmasked(site, node, local_mask):
    """One line of :class:`GuideError` where the model masks the local site ``site`` (its message or trace
    node ``node``) and the guide was given no ``local_mask``."""
    if local_mask is None and _is_masked(node):
        raise GuideError("the model masks the local site %r: give local_mask=a function of the model's "
                         "arguments returning the mask of the call's datapoints [B], as the model computes it" % site)


def local_masks(mask, structure, batch):
    """``local_mask``'s answer (a bool tensor [B], or site → [B]) as site → bool mask [B, 1…] in the site's batch
    shape, or None for a site not masked; the flat layout's coordinate mask [B, size] (True: kept) beside it."""
    per_site = mask if isinstance(mask, dict) else {site.name: mask for site in structure.locals}
    unknown = sorted(set(per_site) - {site.name for site in structure.locals})
    if unknown:
        raise GuideError("local_mask names %s, not local sites of the plate %r" % (", ".join(map(repr, unknown)),
                                                                                 structure.plate))
    masks, columns = {}, []
    for site in structure.locals:
        m = per_site.get(site.name)
        if m is None:
            masks[site.name] = None
            columns.append(None)
            continue
        m = torch.as_tensor(m, dtype=torch.bool)
        if m.shape != (batch,):
            raise GuideError("local_mask gave a mask of shape %s for the site %r; it needs [B] = [%d]"
                             % (tuple(m.shape), site.name, batch))
        masks[site.name] = m.reshape(structure.batch_shape(batch))
        columns.append(m.unsqueeze(-1).expand(batch, site.stop - site.start))
    device = next((c.device for c in columns if c is not None), None)
    coordinates = torch.cat([torch.ones(batch, site.stop - site.start, dtype=torch.bool, device=device)
                             if c is None else c for c, site in zip(columns, structure.locals)], -1)
    return masks, coordinates


class MaskedJoint:
    """A local log joint ``joint(x, u, θ)`` → [*lead, B] plus log N(u; 0, I) over the coordinates that ``kept``
    [B, size] marks False (see the module docstring)."""

    def __init__(self, joint, kept):
        self.joint, self.dropped = joint, (~kept).to(torch.get_default_dtype())

    def __call__(self, x, u, theta):
        reference = -(0.5 * u.square() + HALF_LOG_2PI) * self.dropped.to(u.dtype)
        return self.joint(x, u, theta) + reference.sum(-1)
