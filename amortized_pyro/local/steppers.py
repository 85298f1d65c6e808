"""The hand-written optimizers of the local optimizations (:mod:`amortized_pyro.local.optimize`), where torch's
do not do what they need: a learning rate per row (:class:`RowAdam`, the gap's q* and q*_m), smooth Adam steps
that stay on the autograd graph (:class:`SmoothAdam`, unrolled refinement), and Kim et al. (2018)'s inner loop,
SGD with momentum on clipped gradients (:class:`ClippedMomentum`), per image; and :func:`outside_the_trace`,
which runs such steps inside a ``torch.jit.trace`` (Pyro's JitTrace_ELBO) as one Python node of the trace."""
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


def outside_the_trace(region, *args):
    """``region(*args)``; under ``torch.jit.trace`` run as one Python node of the trace, which runs ``region`` again
    on each later call's tensors. For the steps on a local ELBO inside a guide (SA-VI, IA-VI): their
    ``torch.autograd.grad`` cannot be traced (measured, torch 2.x: the backward pass of an op that saves its own
    output, exp or sigmoid, unpacks that output as a new tensor the tracer does not know, "Cannot insert a
    Tensor that requires grad as a constant"), and a region run with tracing off would leave its results in the
    trace as constants of the first call. So every tensor in ``args`` (the data, the plate's indices, θ) is an
    input of the node, and so is every parameter the region's result depends on (found by one run of the region
    when traced), so that the gradient reaches them (:class:`_OutsideTheTrace`). The region's random draws are
    made when the node runs, in the order of the untraced program's (the global streams: a generator of the
    guide's own, ``refine_generator``, set only while an evaluation measures, is advanced by the finding run too).
    Any other state the region reads must not change from call to call (the guide's settings, the model's code).

    :param callable region: a function of ``args`` returning tensors (or None) in a fixed nesting of tuples,
        lists and dicts.
    :param args: its arguments: tensors, nestings of them, and values the trace may keep.
    :returns: ``region(*args)``, its tensors the node's outputs.
    """
    if not torch.jit.is_tracing():
        return region(*args)
    from torch.utils._pytree import tree_flatten, tree_unflatten  # private: see _run
    leaves, spec = tree_flatten(args)
    where = [i for i, leaf in enumerate(leaves) if torch.is_tensor(leaf)]
    tensors = [leaves[i] for i in where]
    template = ([None if torch.is_tensor(leaf) else leaf for leaf in leaves], spec, where)  # no tensor kept
    devices = sorted({t.device.index or 0 for t in tensors if t.is_cuda})
    with torch.random.fork_rng(devices):  # the finding run draws nothing: a traced call draws as an untraced one
        outputs, out_spec, copies = _run(region, template, tensors)
        params = _reached(outputs, copies)
    flat = _OutsideTheTrace.apply(region, template, len(where), *tensors, *params)
    flat = iter(flat)
    return tree_unflatten([next(flat) if torch.is_tensor(o) else o for o in outputs], out_spec)


def _run(region, template, tensors):
    """The region on ``tensors`` (put where the template's tensors were), with tracing off and gradients on:
    (its flat outputs, their nesting, the tensors' detached copies it ran on)."""
    from torch.utils._pytree import tree_flatten, tree_unflatten
    leaves, spec, where = template
    copies = [t.detach().requires_grad_(t.requires_grad) for t in tensors]
    leaves = list(leaves)
    for i, copy in zip(where, copies):
        leaves[i] = copy
    # private torch names, unavoidable: torch has no public way to pause a trace (torch._C._get/_set_tracing_state)
    # nor to flatten nested outputs (torch.utils._pytree); tests/test_jit.py fails loudly where torch changes them
    state = torch._C._get_tracing_state()
    torch._C._set_tracing_state(None)
    try:
        with torch.enable_grad():  # as when traced: a replay under no_grad runs the node as traced
            outputs, out_spec = tree_flatten(region(*tree_unflatten(leaves, spec)))
    finally:
        torch._C._set_tracing_state(state)
    return outputs, out_spec, copies


def _reached(outputs, copies):
    """The leaf tensors (parameters) the outputs' autograd graph reaches, other than ``copies``."""
    seen, params, known = set(), {}, {id(c) for c in copies}
    nodes = [o.grad_fn for o in outputs if torch.is_tensor(o) and o.grad_fn is not None]
    params.update({id(o): o for o in outputs if torch.is_tensor(o) and o.requires_grad and o.grad_fn is None})
    while nodes:
        node = nodes.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        variable = getattr(node, "variable", None)  # an AccumulateGrad node: its leaf
        if variable is not None:
            params[id(variable)] = variable
        nodes.extend(next_node for next_node, _ in node.next_functions)
    return [p for key, p in params.items() if key not in known]


class _OutsideTheTrace(torch.autograd.Function):
    """:func:`outside_the_trace`'s node: forward runs the region on its inputs (the ``count`` tensors of its
    arguments, then the parameters it reaches) and keeps its graph; backward differentiates that graph. Its
    outputs are the region's tensors, detached inside and on the node's graph outside."""

    @staticmethod
    def forward(ctx, region, template, count, *inputs):
        outputs, _, copies = _run(region, template, inputs[:count])
        tensors = [o for o in outputs if torch.is_tensor(o)]
        ctx.graph = (tensors, copies + list(inputs[count:]))
        # the tracer records the node's body too (a subgraph its replays do not run): it is handed views of copies
        # detached untraced, which it keeps there as constants (tensors on the region's graph it refuses)
        state = torch._C._get_tracing_state()
        torch._C._set_tracing_state(None)
        detached = [o.detach() for o in tensors]
        torch._C._set_tracing_state(state)
        return tuple(d.view_as(d) for d in detached)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, *grads):
        outputs, inputs = ctx.graph
        pairs = [(o, g) for o, g in zip(outputs, grads) if o.requires_grad and g is not None]
        wrt = [i for i, t in enumerate(inputs) if t.requires_grad]
        found = [None] * len(inputs)
        if pairs and wrt:
            got = torch.autograd.grad([o for o, _ in pairs], [inputs[i] for i in wrt], [g for _, g in pairs],
                                      allow_unused=True)
            for i, g in zip(wrt, got):
                found[i] = g
        return (None, None, None) + tuple(found)
