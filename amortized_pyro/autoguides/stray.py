"""Observations in a plate of their own that each depend on one datapoint of the data plate (the radon layout:
per-group intercepts in plate "groups", observations in plate "obs" indexed by their group), for the per-datapoint
log joint (:class:`~.local_joint.LocalJoint`): which datapoint each depends on, and their log-densities summed into
that datapoint's term.

**Which datapoint an observation depends on** is read once per call off the model by forward-mode
differentiation (:func:`stray_rows`) at one point: D_0, the derivative of each observation's
log-density along weights w per datapoint and coordinate (in [1, 2), a fixed seed: along ones, a contrast
z_n0 − z_n1 has none; along w, Σ_c ∂log p/∂u_nc w_nc is 0 with probability 0), and D_k along w scaled per
datapoint n by 2^(e_k(n)), e_k(n) the k-th base-32 digit of n less 16: a power of 2 scales every rounding
exactly, so one datapoint's observation has D_k / D_0 = 2^(e_k(n)) exactly, several datapoints' a mean of their
2^e that is none; 1 + ⌈log_32 B⌉ passes (2 up to 32 datapoints, 3 up to 1,024). An observation of several
datapoints is refused in one line; unmasked observations of none (every D zero) are said in one line
(:class:`ObservationsOfNoDatapoint`) and count in no datapoint's term.
"""
import warnings

import torch
import torch.autograd.forward_ad as fwAD

from amortized_pyro.errors import GuideError

CODE = 32  # datapoint n's k-th digit in base CODE, less CODE // 2, is the power of 2 of its tangent in pass k


class ObservationsOfNoDatapoint(UserWarning):
    """Observations in a plate of their own that depend on no datapoint's latents: in no datapoint's log joint."""


def masked_log_prob(site):
    """A sample site's log-density, its masked terms 0 (even where -inf)."""
    log_p = site["fn"].log_prob(site["value"])
    if site["mask"] is not None:
        log_p = torch.where(torch.as_tensor(site["mask"], device=log_p.device), log_p, torch.zeros_like(log_p))
    return log_p


def stray_rows(trace_at, structure, batch, device):
    """observed site outside the plate → LongTensor [M]: the datapoint (row of the call's B) each of its M
    observations depends on, -1 where none; read by forward-mode differentiation (module docstring) of the model's
    trace at local values u [B, size], ``trace_at(u)``, on ``device``; one line of :class:`GuideError` where an
    observation depends on several, of :class:`ObservationsOfNoDatapoint` where unmasked ones depend on none.

    :param structure: the model's :class:`~amortized_pyro.autoguides.structure.Structure`.
    """
    generator, size = torch.Generator().manual_seed(0), structure.size
    point = 0.5 * torch.randn(batch, size, generator=generator).to(device)
    weights = (1.0 + torch.rand(batch, size, generator=generator)).to(device)
    passes = next(k for k in range(1, 64) if CODE ** k >= batch)
    digits = [(torch.arange(batch, device=device) // CODE ** k) % CODE - CODE // 2 for k in range(passes)]
    derivatives = []  # per pass: site → D [M]
    for tangent in [weights] + [weights * torch.exp2(e.to(point.dtype)).unsqueeze(-1) for e in digits]:
        with fwAD.dual_level():
            trace = trace_at(fwAD.make_dual(point, tangent))
            duals = {name: fwAD.unpack_dual(masked_log_prob(trace.nodes[name]))
                     for name in structure.stray_observations}
        derivatives.append({name: (torch.zeros_like(d.primal) if d.tangent is None else d.tangent).reshape(-1)
                            for name, d in duals.items()})
    rows = {}
    for name in structure.stray_observations:
        along, *scaled = (d[name] for d in derivatives)
        touched = torch.stack([along] + scaled).ne(0).any(0)
        single, row = along.ne(0), torch.zeros_like(along, dtype=torch.long)
        for k, d in enumerate(scaled):  # D_k / D_0 = 2^(the k-th digit of n's, less CODE / 2) for one datapoint n
            ratio = d / torch.where(single, along, 1.0)
            exponent = torch.log2(ratio).round()  # NaN where the ratio is ≤ 0: not one datapoint
            # exact on deterministic kernels; 1e-5 leaves room for a device's sums in another order
            single &= ((ratio / torch.exp2(exponent) - 1).abs() <= 1e-5) \
                & (exponent >= -(CODE // 2)) & (exponent < CODE // 2)
            row += (exponent.nan_to_num() + CODE // 2).clamp(0, CODE - 1).long() * CODE ** k
        if (touched & ~(single & (row < batch))).any():
            raise GuideError("the observed site %r sits in another plate than %r and an observation of it "
                             "depends on several of its datapoints: give the log joint by hand"
                             % (name, structure.plate))
        rows[name] = torch.where(touched, row, -1)
        mask = trace.nodes[name]["mask"]
        alone = int((~touched & torch.as_tensor(True if mask is None else mask, device=device)
                     .expand(duals[name].primal.shape).reshape(-1)).sum())
        if alone:
            warnings.warn("%d of %d observations of the site %r depend on no datapoint's latents (of plate %r): "
                          "their terms are in no datapoint's log joint"
                          % (alone, len(along), name, structure.plate), ObservationsOfNoDatapoint, stacklevel=3)
    return rows


def scattered(site, rows, draws, batch, nesting):
    """An observed site outside the plate, its log-densities summed into the datapoint each observation
    depends on (``rows``, :func:`stray_rows`): [draws, B]; ``nesting`` the model's plates and the draws' dim."""
    log_p = masked_log_prob(site)
    log_p = log_p.reshape((1,) * (nesting - log_p.dim()) + tuple(log_p.shape))
    per_observation = log_p.reshape(log_p.shape[0], -1).expand(draws, -1)  # [draws, M]
    keep = rows >= 0
    out = per_observation.new_zeros(draws, batch)
    return out.index_add(1, rows[keep].to(out.device), per_observation[:, keep.to(out.device)])
