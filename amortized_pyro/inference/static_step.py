"""The SVI step in a form a CUDA graph can capture (issue 61).

The eager step (:func:`~amortized_pyro.inference.svi.step`) runs Pyro's trace, its messengers and the optimizer's
loop in Python at every step: on a GPU the device then waits for Python and for about a hundred kernel launches
one after another. A CUDA graph records the kernels of one step once and replays them, Python skipped. What a step
needs for that, and what :class:`StaticStep` gives it:

    inputs at fixed addresses          the minibatch's rows and indices (and the KL weight) copied into buffers
                                       made once per batch shape; the step reads the buffers
    nothing created lazily inside      parameters exist before (the package's guides make them at their first
                                       call) and the optimizer's state is made by the eager warm-up steps
    no host sync inside                no ``.item()``, no tensor built from Python data: the package's model and
                                       guides take N/B from shapes; validation is off (train's context)
    an optimizer that captures         torch's Adam with ``capturable=True`` (its step count on the device)
    the loss kept                      each replay overwrites the graph's loss: it is cloned out after each step

On the CPU nothing is captured: the same step runs eagerly on the same buffers, so its numbers are the eager
step's, bit for bit (tests/test_static_step.py), and it costs what the eager step costs (Python is not skipped
without a graph; BENCHMARKS.md). On CUDA (``capture=True``) each batch shape is captured after ``warmup`` eager
steps of that shape on a side stream (the documented recipe of torch.cuda.graphs); those warm-up steps are real
training steps. Random draws inside a replay come from the CUDA generator's graph-safe stream: the same
distribution as the eager step's, not the same numbers. Where a capture fails (an operation that syncs with the host,
one a graph cannot hold), one warning names why and the eager step goes on.
"""
import warnings

import torch

from amortized_pyro.inference.svi import step as eager_step

WARMUP = 3  # eager steps of a batch shape before it is captured (optimizer state, allocator, cuBLAS workspaces)


class CudaGraphs:
    """What :class:`StaticStep` asks of CUDA, in one place (a test gives a stand-in that runs on the CPU):
    a side stream for warm-up steps, and a capture whose beginning and end, and the capture stream, are managed
    here rather than by ``torch.cuda.graph``, whose exit calls ``capture_end()`` before it leaves the capture
    stream: a capture broken by a host sync raised ``capture_end``'s error there, hiding the cause, and left the
    capture stream current (issue 70)."""

    def on_a_side_stream(self, run):
        """``run()`` on a side stream, the current one waiting for it (torch.cuda.graphs' warm-up recipe)."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            result = run()
        torch.cuda.current_stream().wait_stream(side)
        return result

    def capture(self, body):
        """A CUDA graph of ``body()`` and what it returned; the first error raised inside it or by ending the
        capture (the cause first), with the capture ended and the stream restored whatever happened."""
        graph, stream = torch.cuda.CUDAGraph(), torch.cuda.Stream()
        torch.cuda.synchronize()
        stream.wait_stream(torch.cuda.current_stream())
        cause, result = None, None
        with torch.cuda.stream(stream):  # left on every path
            graph.capture_begin()
            try:
                result = body()
            except RuntimeError as error:
                cause = error
            finally:
                try:
                    graph.capture_end()
                except RuntimeError as error:  # raised by a broken capture: the cause, where there is none before
                    cause = cause or error
        torch.cuda.current_stream().wait_stream(stream)
        if cause is not None:
            raise cause
        return graph, result


class StaticStep:
    """``static(*args)`` → the step's loss (a device tensor): one SVI step of the ELBO module ``elbo`` (called on
    ``args``, e.g. a minibatch's rows x [B, ...], its indices idx [B], the KL weight) with ``optimizer``, every
    tensor argument read from a buffer of its shape (None passed as it is), except the positions ``fixed``, the
    same tensor at every call (the model's whole data), passed as they are; with ``capture`` (CUDA only) replayed
    from a CUDA graph per shape of the arguments after ``warmup`` eager steps of it."""

    def __init__(self, elbo, optimizer, capture=False, warmup=WARMUP, fixed=(), cuda=None):
        self.elbo, self.optimizer, self.capture, self.warmup, self.fixed = elbo, optimizer, capture, warmup, fixed
        self.cuda = cuda or CudaGraphs()
        self.buffers, self.graphs, self.seen = {}, {}, {}

    def _static(self, args):
        """(the arguments' key, the arguments as the step reads them: copied into this key's buffers)."""
        key = tuple(None if a is None or i in self.fixed else (tuple(a.shape), a.dtype) for i, a in enumerate(args))
        if key not in self.buffers:
            self.buffers[key] = [a if shape is None else torch.empty_like(a) for a, shape in zip(args, key)]
        static = self.buffers[key]
        for i, (a, shape) in enumerate(zip(args, key)):
            if shape is None:
                static[i] = a
            else:
                static[i].copy_(a)
        return key, static

    def __call__(self, *args):
        key, static = self._static(args)
        if key in self.graphs:
            graph, loss = self.graphs[key]
            graph.replay()
            return loss.clone()  # the graph's loss, detached at capture: the next replay overwrites it
        self.seen[key] = self.seen.get(key, 0) + 1
        if not self.capture or self.seen[key] <= self.warmup:
            return self._eager(static)
        return self._captured(key, static)

    def _eager(self, static):
        # after a capture each .grad is a graph's buffer, holding its last replay's gradient: the eager step
        # (which zeroes after its update) would add it to its own (issue 70: a weight moved by 6.0 for 2.0)
        self.optimizer.zero_grad(set_to_none=True)
        if not self.capture:
            return eager_step(self.elbo, self.optimizer, *static)
        return self.cuda.on_a_side_stream(lambda: eager_step(self.elbo, self.optimizer, *static))

    def _captured(self, key, static):
        self.optimizer.zero_grad(set_to_none=True)

        def body():
            loss = self.elbo(*static)
            loss.backward()
            self.optimizer.step()
            return loss.detach()  # no autograd graph kept beyond the capture

        try:
            graph, loss = self.cuda.capture(body)
        except RuntimeError as error:  # a capture runs nothing: the parameters are as they were
            self.capture = False
            self.optimizer.zero_grad(set_to_none=True)
            warnings.warn("the SVI step could not be captured in a CUDA graph (%s): the eager step from here on"
                          % str(error).splitlines()[0], RuntimeWarning, stacklevel=2)
            return eager_step(self.elbo, self.optimizer, *static)
        self.graphs[key] = (graph, loss)
        graph.replay()  # capture records without running: this call's step is the first replay
        return loss.clone()
