"""The per-image optimizers of local ELBOs: :func:`refine` (a fixed number of steps: the semi-amortized
guide's refinement, the gap's refinement rows) and :func:`converge` (until each row's windowed stopping rule:
the gap's q*, and with ``per_draw`` the q*_m of every θ draw at once), both on the estimates of
:mod:`amortized_pyro.local.estimates`; :func:`best_of` chooses among several factors (:func:`pick` assembles the
winners, row by row) and :func:`kept_iterates` keeps a refinement's best iterate.
"""
import math
from dataclasses import dataclass

import torch

import pyro

from amortized_pyro.local.steppers import ClippedMomentum, RowAdam, SmoothAdam
from amortized_pyro.local.draws import Draws
from amortized_pyro.local.estimates import CHUNK, draw_log_weights, draw_rows, per_draw, weights
from amortized_pyro.local.flows import pulled


@dataclass
class StoppingRule:
    """Per row (an image, or with ``per_draw`` a pair of image and θ draw): stop when the row's mean objective
    over a window of ``window`` steps has not risen more than ``tolerance`` nats above its best for
    ``patience`` windows, keeping its best window's *average* iterate; every row stops after ``max_steps``.
    The row's learning rate halves whenever it has not so risen for ``decay_patience`` + 1 windows since it
    last rose or halved (torch's ReduceLROnPlateau, per row).

    The average of a window's iterates (Polyak–Ruppert averaging) rather than its last: at a fixed learning
    rate Adam's iterates jitter around the optimum by the gradient noise of a few z draws, and their mean
    sits closer to it. On an informative run, averaged and at a first learning rate of 0.05, q* and the q*_m
    reached higher values of their own objectives in 1,500 steps than the last iterates of 3,000 steps at 0.01
    (bench/archive/gap_optimizer.py, BENCHMARKS.md). Cremer et al.'s rule is ``tolerance`` 0 and ``patience`` 10:
    a window mean that creeps up by noise and ever smaller learning rates then keeps nearly every row to the
    cap (BENCHMARKS.md)."""

    window: int = 100
    patience: int = 10
    max_steps: int = 5000
    decay_patience: int = 2
    tolerance: float = 0.0


@dataclass
class Optimum:
    """What :func:`converge` found: per row the best iterate (loc, log σ), the steps it took, and whether
    it was stopped by the cap rather than by the rule (its L_n is then a lower bound on the converged one), and
    for a flow factor its transforms' best parameters (a :class:`~amortized_pyro.local.flows.RowFlow`)."""

    loc: torch.Tensor
    log_scale: torch.Tensor
    steps: torch.Tensor
    capped: torch.Tensor
    flow: object = None


def pick(choice, candidates):
    """The :class:`Optimum` whose row r is candidate ``choice[r]``'s, for rows [n] (images) or [M, n] (image and
    θ draw): each candidate's tensors broadcast to the rows' shape, so that one factor per image ([n, ...], a
    q*) may stand beside one per image and draw ([M, n, ...], the q*_m); flow candidates all (or none)."""
    def chosen(tensors):
        shape = torch.broadcast_shapes(*(t.shape for t in tensors))
        stacked = torch.stack([t.expand(shape) for t in tensors])
        index = choice.view(1, *choice.shape, *[1] * (len(shape) - choice.dim())).expand(1, *shape)
        return stacked.gather(0, index)[0]

    flow = candidates[0].flow
    return Optimum(*(chosen([getattr(c, f) for c in candidates]) for f in ("loc", "log_scale", "steps", "capped")),
                   None if flow is None else flow.with_params(chosen([c.flow.params for c in candidates])))


def best_of(log_joint, x, draws, samples, chunk, candidates, per_theta=False):
    """Per image the candidate :class:`~amortized_pyro.local.optimize.Optimum` of highest L_n on ``draws``, each
    by ``samples`` z draws from the draws' own generators (the same z for every candidate); with ``per_theta``, per
    image and draw θ_m the candidate of highest L_n(q; θ_m) (candidates [n, ...] or [M, n, ...]). A NaN estimate
    never wins; of equal ones the first. Returns (the winners, assembled; each row's winner's index; the values
    the choice was made on, [candidates, rows], NaN as −∞)."""
    values = torch.stack([per_draw(log_joint, x, c.loc, c.log_scale.exp(), draws, samples, "mean", chunk, c.flow)
                          for c in candidates])
    values = (values if per_theta else values.mean(1)).nan_to_num(nan=-math.inf)
    choice = values.argmax(0)
    return pick(choice, candidates), choice, values


def kept_iterates(values, rows, candidates):
    """{k: (the factor refinement row k keeps, each image's steps of it)}: per image the best, on the values the
    choice of q* was made on (:func:`best_of`), of the guide's factor (candidate 0) and the iterates of at most k
    steps (``rows``: steps → candidate index), as q* keeps its best; of equal ones the fewest steps. So a row of
    more steps never leaves a worse factor there than one of fewer."""
    kept, among = {}, [(0, 0)]
    for k in sorted(rows):
        among.append((k, rows[k]))
        choice = values[[index for _, index in among]].argmax(0)
        winner = pick(choice, [candidates[index] for _, index in among])
        kept[k] = ((winner.loc, winner.log_scale), torch.tensor([steps for steps, _ in among])[choice.cpu()])
    return kept


def _objective(log_joint, x, loc, log_scale, theta, draws, noise, per_draw_factor, chunk, among=None, flow=None):
    """This step's objective, in parts (one per span of θ draws, made as they are consumed, so that one
    part's graph lives at a time), for the images x and their factors ``loc``, ``log_scale``: one θ: [n], z
    from ``noise`` (a generator). Draws: the mean over them of each L_n(q; θ_m) ([n] in parts that add up),
    or with ``per_draw_factor`` each one ([M, n]); ``noise`` the draws' generators. ``among``: (indices, N)
    where x (and θ's per-image values) are the images ``indices`` of N; the z draws are then made for all N
    and taken at the indices, so that an image's numbers do not depend on which others are computed beside it.
    ``flow``: the factor's transforms (:class:`~amortized_pyro.local.flows.RowFlow`, parameters per row)."""
    images, n = among if among is not None else (None, x.shape[0])
    size = loc.shape[-1]
    live = (lambda t: t) if images is None else (lambda t: t[..., images, :])
    if not isinstance(theta, Draws):
        eps = live(torch.randn((draws,) + loc.shape[:-2] + (n, size), generator=noise, device=loc.device))
        yield weights(pulled(log_joint, flow), x, loc, log_scale.exp(), theta, eps).mean(0)
        return
    rows = draws * x.shape[0]
    for start, stop in ([(0, len(theta))] if per_draw_factor else theta.chunks(rows, chunk)):
        eps = live(theta.normal(noise[start:stop], (draws, n, size), loc.dtype))
        values = {k: v[start:stop] for k, v in theta.values.items()}
        w = draw_log_weights(pulled(log_joint, flow, start, stop), x, draw_rows(loc, start, stop), draw_rows(log_scale, start, stop).exp(),
                             values, eps).mean(1)
        yield w if per_draw_factor else w.sum(0) / len(theta)


REFINE_OPTIMIZERS = ("adam", "sgd-momentum")


def noise_of(theta, generator=None):
    """The z draws' source for a run of steps at ``theta``: ``generator`` for one θ, the draws' own
    generators (made once, so that each step draws afresh) for :class:`~amortized_pyro.local.draws.Draws`."""
    return theta.generators() if isinstance(theta, Draws) else generator


def local_objective(log_joint, x, loc, log_scale, theta, draws, noise, chunk=CHUNK):
    """Σ_n-ready L_n per image at (``loc``, ``log_scale``) [..., n, size], by ``draws`` z draws from ``noise``
    (:func:`noise_of`): at one θ [..., n], or for Draws the mean over them of L_n(q; θ_m) [n]; on the autograd
    graph of the factor (iterative amortized inference's per-iteration objective and its gradient input)."""
    return sum(_objective(log_joint, x, loc, log_scale, theta, draws, noise, False, chunk))


def _steps_on_local_elbos(log_joint, x, loc, log_scale, theta, lr, draws, generator, differentiable=False,
                          smooth=False, chunk=CHUNK, optimizer="adam"):
    """Steps of ``optimizer`` (Adam, or Kim et al.'s :class:`ClippedMomentum` for ``"sgd-momentum"``) on Σ_n L_n from (``loc``, ``log_scale``), ``draws`` z per image and step, at ``theta``: one θ
    (site → tensor; z from ``generator``) or :class:`~amortized_pyro.local.draws.Draws` (z from each draw's
    generator; the objective is the mean of L_n over the draws). Runs forever; the tensors are updated in
    place after each step. ``differentiable``: they are non-leaf tensors and every step stays on the autograd
    graph (gradients taken with ``create_graph``), so that what they end at can be differentiated with
    respect to where they started. ``smooth``: Adam's steps are :class:`SmoothAdam`'s with ε = lr (unrolled
    refinement, in training and in evaluation alike), else torch's Adam. Yields, after each step, whether the local
    ELBO of some datapoint was finite in every span of draws, a device bool (no host sync)."""
    tensors = [loc, log_scale]
    if optimizer == "sgd-momentum":
        stepper = ClippedMomentum(tensors, lr, differentiable=differentiable)
    elif smooth:
        stepper = SmoothAdam(tensors, lr, eps=lr, differentiable=differentiable)
    else:
        stepper = torch.optim.Adam(tensors, lr=lr)
    noise = noise_of(theta, generator)
    # the model's argument checks off inside the steps (the ELBO around them keeps Pyro's validation): a datapoint
    # whose draws the model refuses (a library size of e^90 overflowing a rate) gets no gradient from that step
    # (its optimizer's momentum alone moves it), the others step on; a step that refuses every datapoint is said
    # by the caller, once after the steps (:func:`refine`)
    with torch.enable_grad(), pyro.validation_enabled(False):
        while True:
            grads, some_finite = None, []  # per span of draws
            for part in _objective(log_joint, x, loc, log_scale, theta, draws, noise, False, chunk):
                finite = torch.isfinite(part)
                some_finite.append(finite.any())
                # one backward pass per span of draws: memory bounded by the chunk
                part_grads = torch.autograd.grad(-part.where(finite, 0.0).sum(), tensors,
                                                 create_graph=differentiable)
                grads = part_grads if grads is None else [a + b for a, b in zip(grads, part_grads)]
            for tensor, grad in zip(tensors, grads):
                tensor.grad = grad.nan_to_num(0.0, 0.0, 0.0)  # a refused datapoint's row: no step
            stepper.step()
            yield torch.stack(some_finite).all()


def refine(log_joint, x, loc, log_scale, theta, lr, steps, draws=1, generator=None, unrolled=False, chunk=CHUNK,
           optimizer="adam"):
    """``steps`` steps of ``optimizer`` (:data:`REFINE_OPTIMIZERS`: Adam, or Kim et al.'s SGD with momentum on
    clipped gradients) on Σ_n L_n from (loc, log σ) at ``theta`` (one θ, or Draws: their mean objective) (the
    semi-amortized guide, the gap's refinement rows); returns (loc, log σ), detached, or, ``unrolled`` and
    where (loc, log σ) carry gradients, still on the graph through every step (Kim et al. 2018's
    semi-amortized training). Unrolled Adam steps are :class:`SmoothAdam`'s with ε = lr, with or without
    the graph, so that an unrolled SA-VI guide refines alike when trained and when evaluated. A ValueError, after
    the steps (one host sync), where at some step the local ELBO of no datapoint was finite."""
    graph = unrolled and torch.is_grad_enabled() and (loc.requires_grad or log_scale.requires_grad)
    if graph:
        loc, log_scale = loc.clone(), log_scale.clone()
    else:
        loc, log_scale = loc.detach().clone().requires_grad_(), log_scale.detach().clone().requires_grad_()
    some_finite = [some for _, some in zip(range(steps), _steps_on_local_elbos(
        log_joint, x, loc, log_scale, theta, lr, draws, generator, graph, unrolled, chunk, optimizer))]
    if some_finite and not torch.stack(some_finite).all():
        raise ValueError("the local ELBO of no datapoint is finite, but found invalid values")
    return (loc, log_scale) if graph else (loc.detach(), log_scale.detach())


def converge(log_joint, x, loc, log_scale, theta, lr, rule, draws=1, generator=None, per_draw=False, compact=False,
             chunk=CHUNK, bar=None, flow=None):
    """Adam on L_n from (loc, log σ) [n, size] for every image at once until each row has stopped by
    ``rule`` (a :class:`StoppingRule`) or the cap. A row is an image, or with ``per_draw`` a pair of image and
    θ draw; each has its own learning rate, halvings, stopping and best iterate, so that its numbers do not
    depend on the rows beside it. ``theta``: one θ (z from ``generator``) or Draws: the objective is the mean
    over the draws of L_n(q; θ_m) (the gap's q*), or with ``per_draw`` one factor per draw on L_n(q; θ_m)
    alone (the q*_m), all at once in spans of draws that fit the chunk; the Optimum's tensors then lead with
    the draws ([M, n, …]). ``compact``: an image leaves the computation once its rows have stopped; right
    where ``log_joint(x[idx], z, theta.images(idx))`` is the rows idx of the whole (the package's model; not
    a log joint that reads the data from elsewhere). One host sync per window. ``bar``: a tqdm progress bar,
    advanced by the steps of every window. ``flow``: a flow factor, the transforms' parameters per image
    (:class:`~amortized_pyro.local.flows.RowFlow`, [n, P]) optimized with (loc, log σ) (the flow family's q*
    and q*_m). Returns an :class:`Optimum`."""
    if not per_draw:
        if bar is not None:
            bar.reset(total=rule.max_steps)
        best = _converge(log_joint, x, loc[None], log_scale[None], theta, lr, rule, draws, generator, False, compact,
                         chunk, bar, None if flow is None else flow.with_params(flow.params[None]))
        return Optimum(best.loc[0], best.log_scale[0], best.steps[0], best.capped[0],
                       None if flow is None else best.flow.with_params(best.flow.params[0]))
    n = loc.shape[-2]
    chunks = theta.chunks(draws * n, chunk)
    if bar is not None:
        bar.reset(total=rule.max_steps * len(chunks))
    spans = [_converge(log_joint, x, loc.expand(stop - start, *loc.shape), log_scale.expand(stop - start,
                       *log_scale.shape), theta.part(start, stop), lr, rule, draws, None, True, compact, chunk, bar,
                       None if flow is None else flow.with_params(flow.params.expand(stop - start, *flow.params.shape)))
             for start, stop in chunks]
    fields = [torch.cat([getattr(s, f) for s in spans]) for f in ("loc", "log_scale", "steps", "capped")]
    return Optimum(*fields, None if flow is None else flow.with_params(torch.cat([s.flow.params for s in spans])))


def _converge(log_joint, x, loc, log_scale, theta, lr, rule, draws, generator, per_draw_factor, compact, chunk, bar,
              flow=None):
    """:func:`converge` for the rows of ``loc``, ``log_scale`` [R, n, size] (R = 1, or the draws'), and of a
    flow's parameters [R, n, P] where given."""
    shape, like = loc.shape[:2], loc
    best = torch.full(shape, -math.inf, dtype=like.dtype, device=like.device)
    steps = torch.full(shape, rule.max_steps, dtype=torch.long, device=like.device)
    running = torch.ones(shape, dtype=torch.bool, device=like.device)
    start = [loc, log_scale] + ([flow.params] if flow is not None else [])
    best_params = [t.detach().clone() for t in start]
    images = torch.arange(shape[1], device=like.device)  # the images still computed
    adam = RowAdam([t.detach().clone().requires_grad_() for t in start],
                   torch.full(shape + (1,), float(lr), dtype=like.dtype, device=like.device))
    stale, bad = (torch.zeros(shape, dtype=torch.long, device=like.device) for _ in range(2))
    rose_to = best.clone()  # each row's level at its last rise that counted
    window, sums = 0, [0] * len(start)
    noise = noise_of(theta, generator)
    live_x, live_theta, among, live_flow = x, theta, None, flow  # the images computed (compact: those not stopped)
    for step in range(1, rule.max_steps + 1):
        params, grads, objective = adam.params, None, 0
        with torch.enable_grad():
            rows = params if per_draw_factor else [p[0] for p in params]
            for part in _objective(log_joint, live_x, rows[0], rows[1], live_theta, draws, noise, per_draw_factor,
                                   chunk, among, None if flow is None else live_flow.with_params(rows[2])):
                part_grads = torch.autograd.grad(-part.sum(), params)  # one backward pass per span of draws
                grads = part_grads if grads is None else [a + b for a, b in zip(grads, part_grads)]
                objective = objective + part.detach()
        adam.step(grads)
        objective = objective if per_draw_factor else objective.unsqueeze(0)
        window = window + objective
        sums = [total + p.detach() for total, p in zip(sums, adam.params)]
        if step % rule.window:
            continue
        live = images if compact else slice(None)
        mean, averages = window / rule.window, [total / rule.window for total in sums]
        window, sums = 0, [0] * len(start)
        higher = running[:, live] & (mean > best[:, live])
        best[:, live] = torch.where(higher, mean, best[:, live])
        for kept, average in zip(best_params, averages):
            kept[:, live] = torch.where(higher[..., None], average, kept[:, live])
        rose = mean > rose_to[:, live] + rule.tolerance  # a rise that counts: above the tolerance
        rose_to[:, live] = torch.where(rose, mean, rose_to[:, live])
        stale[:, live] = torch.where(rose, 0, stale[:, live] + 1)
        bad[:, live] = torch.where(rose, 0, bad[:, live] + 1)
        halve = bad[:, live] > rule.decay_patience
        adam.lr = torch.where(halve[..., None], adam.lr / 2, adam.lr)
        bad[:, live] = torch.where(halve, 0, bad[:, live])
        done = running[:, live] & (stale[:, live] >= rule.patience)
        steps[:, live] = torch.where(done, step, steps[:, live])
        running[:, live] = running[:, live] & ~done
        left = int(running.sum())  # the window's one sync
        if bar is not None:
            bar.update(rule.window if left else rule.max_steps - step + rule.window)
        if not left:
            break
        if compact:
            keep = running[:, images].any(0)
            if not keep.all():
                images = images[keep]
                adam.keep(keep.nonzero().squeeze(-1))
                live_x, among = x[images], (images, x.shape[0])
                live_theta = theta.images(images) if isinstance(theta, Draws) else theta
                live_flow = None if flow is None else flow.images(images)
    return Optimum(best_params[0], best_params[1], steps, running,
                   None if flow is None else flow.with_params(best_params[2]))
