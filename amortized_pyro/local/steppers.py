"""The hand-written optimizers of the local optimizations (:mod:`amortized_pyro.local.optimize`), where torch's
do not do what they need: a learning rate per row (:class:`RowAdam`, the gap's q* and q*_m), smooth Adam steps
that stay on the autograd graph (:class:`SmoothAdam`, unrolled refinement), and Kim et al. (2018)'s inner loop,
SGD with momentum on clipped gradients (:class:`ClippedMomentum`), per image."""
import math

import torch


class RowAdam:
    """torch's Adam (its defaults and its update, step for step) on tensors [R, n, size] with a learning rate
    per row ``lr`` [R, n, 1]. Hand-written because torch's optimizers take one learning rate per parameter
    group, and each row of the gap's optimizations (image, θ draw) halves its own on its own plateaus, so that
    a row's numbers do not depend on the rows beside it; :meth:`keep` drops the rows of images that stopped."""

    def __init__(self, params, lr, betas=(0.9, 0.999), eps=1e-8):
        self.params, self.lr, self.betas, self.eps, self.steps = params, lr, betas, eps, 0
        self.moments = [(torch.zeros_like(p), torch.zeros_like(p)) for p in params]

    @torch.no_grad()
    def step(self, grads):
        self.steps += 1
        b1, b2 = self.betas
        step_size = self.lr / (1 - b1 ** self.steps)
        root_correction = math.sqrt(1 - b2 ** self.steps)
        for param, grad, (m, v) in zip(self.params, grads, self.moments):
            m.lerp_(grad, 1 - b1)
            v.mul_(b2).addcmul_(grad, grad, value=1 - b2)
            param.sub_(step_size * m / (v.sqrt() / root_correction + self.eps))

    def keep(self, live):
        """Keep the images ``live`` (indices into the current ones) of every tensor."""
        self.params = [p.detach()[:, live].requires_grad_() for p in self.params]
        self.moments = [(m[:, live], v[:, live]) for m, v in self.moments]
        self.lr = self.lr[:, live]

class SmoothAdam:
    """Adam with the step m̂ / √(v̂ + ε²) in place of torch's m̂ / (√v̂ + ε), for steps that stay on the
    autograd graph (unrolled refinement). Hand-written for two failures of torch's ``Adam(differentiable=True)``
    in unrolled SA-VI (experiments/sa-vi.sh: seeds 1 and 2 diverged to NaN): (1) it differentiates √v at
    v = 0, so an exactly zero gradient entry gives 0 · ∞ = NaN (tests/test_refinement.py); (2) near zero the
    step g / √(g² + ε²) has slope 1/ε, so with ε = 1e-8 a small entry multiplies the encoder's gradient by up
    to lr/ε = 1e6 per step, which a probe by hand saw overflow. :func:`refine` therefore takes ε = lr when
    unrolled (slope at most 1 per step), which changes the step only for entries with |g| ≲ lr, and an
    unrolled guide refines so when evaluated too. Training through these steps is still unstable (docs/results.md: SA-VI in the gap table)."""

    def __init__(self, params, lr, betas=(0.9, 0.999), eps=1e-8, differentiable=False):
        self.params, self.lr, self.betas, self.eps, self.steps = params, lr, betas, eps, 0
        self.differentiable = differentiable  # the steps on the autograd graph (non-leaf params), as torch's flag
        self.moments = [(torch.zeros_like(p), torch.zeros_like(p)) for p in params]

    def step(self):
        self.steps += 1
        b1, b2 = self.betas
        m_correction, v_correction = 1 - b1 ** self.steps, 1 - b2 ** self.steps  # Adam's bias corrections
        with torch.set_grad_enabled(self.differentiable):
            for i, (param, (m, v)) in enumerate(zip(self.params, self.moments)):
                m, v = b1 * m + (1 - b1) * param.grad, b2 * v + (1 - b2) * param.grad.square()
                self.moments[i] = m, v
                param.sub_(self.lr * (m / m_correction) / (v / v_correction + self.eps ** 2).sqrt())


KIM_MOMENTUM, KIM_MAX_NORM = 0.5, 5.0  # harvardnlp/sa-vae's defaults (--momentum, --svi_max_grad_norm)


class ClippedMomentum:
    """Kim et al. (2018)'s refinement steps: p ← μ p − g, x ← x + lr p, with each gradient g clipped to norm
    ``max_norm`` before it enters (μ = ``momentum``). Their code clips the whole minibatch's gradient of the
    mean and of the log-variance as one vector each; here each image's row of each tensor (loc, log σ) is
    clipped on its own, so that an image's refinement does not depend on the images beside it. The steps are
    plain tensor operations, so with ``differentiable`` they stay on the autograd graph (unrolled), where Kim
    et al. differentiate through them by finite differences of Hessian-vector products."""

    def __init__(self, params, lr, momentum=KIM_MOMENTUM, max_norm=KIM_MAX_NORM, differentiable=False):
        self.params, self.lr, self.momentum, self.max_norm = params, lr, momentum, max_norm
        self.differentiable = differentiable
        self.velocities = [torch.zeros_like(p) for p in params]

    def step(self):
        with torch.set_grad_enabled(self.differentiable):
            for i, param in enumerate(self.params):
                grad = param.grad
                norm = grad.norm(dim=-1, keepdim=True)
                grad = grad * (self.max_norm / (norm + 1e-6)).clamp(max=1.0)  # torch's clip_grad_norm_, per row
                self.velocities[i] = self.momentum * self.velocities[i] - grad
                param.add_(self.lr * self.velocities[i])
