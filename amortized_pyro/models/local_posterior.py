"""The package model's local posterior (the protocol of :mod:`amortized_pyro.autoguides.gap`): its hand-written
log joint (:meth:`~amortized_pyro.models.decoder.BayesianDecoderModel.local_log_joint`, WᵀW of its last layer
precomputed per θ draw by :meth:`~amortized_pyro.models.decoder.BayesianDecoderModel.with_gram`), which the
optimizations may call on any subset of the images (``compact``), and the optimized plug-in MSE as its extra.
Hand-written for speed, not for a missing feature: the same quantities as the trace-read log joint, 1.15–1.75×
faster per call (BENCHMARKS.md, 2026-11-23; tests/test_autoguide_gap.py compares the two)."""
import torch


class ModelPosterior:
    """The local posterior of images ``x`` as the model reads them (a conditional model's rows [x, one-hot(c)]) for
    ``guide``; ``idx``: their training indices (a per-datapoint guide's factors), None for images the guide
    never saw."""

    compact = True  # the log joint of some images is theirs alone: stopped images leave the optimizations
    unchecked = True  # no argument checks of the Normals built in the loops: 9% of a gap (BENCHMARKS.md)

    def __init__(self, model, guide, x, idx=None):
        self.model, self.guide, self.x, self.idx = model, guide, x, idx
        self.rows = torch.arange(x.shape[0], device=x.device) if idx is None else idx
        self.log_joint, self.size = model.local_log_joint, model.z_dim

    def prepare(self, draws):
        return self.model.with_gram(draws, self.x)

    def factor(self, theta):
        if self.idx is None and not self.guide.can_infer_unseen:
            return None
        return self.guide.local_factor(self.rows, (self.x, self.rows), {}, theta)

    def flow(self):
        return self.guide.row_flow(self.rows, (self.x, self.rows), {})

    @torch.no_grad()
    def extras(self, best):
        """The plug-in MSE of q*'s mean (through the flow, for a flow family) at the median of q(θ)."""
        images, codes = self.model.split(self.x)
        z = best.loc if best.flow is None else best.flow.push(best.loc)[0]
        plugin = self.model.mean_image(z, self.guide.global_mean(), codes)
        return {"optimized_plugin_mse": (images - plugin).pow(2).mean().item()}
