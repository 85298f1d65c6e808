"""The SVI step in its capturable form (issue 61, amortized_pyro/inference/static_step.py): on the CPU (nothing
captured) it reads its arguments from buffers and gives the eager step's parameters bit for bit over 50 steps,
batch shapes and KL weights changing, for A-VI, F-VI, constant-VI and a builder on a model the package did not
write; --graph is refused in one line where it cannot capture; on CUDA (skipped without one) a captured run's
ELBO falls within the eager runs' spread."""
import contextlib
import copy
import math

import pytest
import torch

import pyro
from pyro.infer import Trace_ELBO

from click.testing import CliRunner

from amortized_pyro import fit
from amortized_pyro.cli.commands import cli
from amortized_pyro.autoguides import AutoAmortizedNormal
from amortized_pyro.errors import AmortizedPyroError
from amortized_pyro.inference.static_step import StaticStep
from amortized_pyro.inference.svi import make_elbo, make_optimizer, step
from amortized_pyro.models.decoder import BayesianDecoderModel
from amortized_pyro.models.guides import make_guide
from conftest import requires_cuda
from toy_models import VAE

N, X_DIM = 40, 12
quiet = dict(log=lambda line: None)


def package_setup(guide_name):
    model = BayesianDecoderModel(N, X_DIM, 3, 8)
    return model, make_guide(guide_name, model, width=6)


def vae_setup():
    vae = VAE()
    guide = AutoAmortizedNormal(vae.model)
    guide(torch.zeros(4, X_DIM))  # its parameters (and the decoder's, by the plate read) made before the first step
    return vae.model, guide


def calls(package):
    """50 steps' arguments: batches of 16, 16 and 8 (the short last one), the KL weight moving each epoch."""
    x = torch.rand(N, X_DIM, generator=torch.Generator().manual_seed(0))
    found = []
    for epoch in range(17):
        order = torch.randperm(N, generator=torch.Generator().manual_seed(epoch))
        kl = torch.tensor(min(1.0, (epoch + 1) / 10))
        for idx in order.split(16):
            found.append((x[idx], idx, kl, None) if package else (x[idx].bernoulli(),))
    return found[:50]


@pytest.mark.parametrize("name", ["amortized", "per-datapoint", "shared", "builder on a VAE"])
def test_the_static_step_is_the_eager_step_bit_for_bit(name):
    package = name != "builder on a VAE"
    losses, trained = [], []
    for static in (False, True):
        store = {"params": {}, "constraints": {}}
        with pyro.get_param_store().scope(store):  # the VAE and its builder keep Pyro's global param store: one each
            torch.manual_seed(0)  # the same start on both sides
            model, guide = package_setup(name) if package else vae_setup()
            elbo = (make_elbo() if package else Trace_ELBO())(model, guide)
            params = dict(guide.named_parameters()) if package else {
                name: value.unconstrained() for name, value in pyro.get_param_store().items()}
            optimizer = make_optimizer(guide, 1e-2, params=params)
            run = StaticStep(elbo, optimizer) if static else lambda *args: step(elbo, optimizer, *args)
            pyro.set_rng_seed(1)
            with pyro.validation_enabled(False):
                losses.append(torch.stack([run(*args) for args in calls(package)]))
            trained.append({name: value.detach().clone() for name, value in params.items()})
    assert torch.equal(losses[0], losses[1])
    assert trained[0].keys() == trained[1].keys() and len(trained[0]) > 2
    assert all(torch.equal(trained[0][name], trained[1][name]) for name in trained[0])
    assert not torch.equal(losses[0][0], losses[0][-1])  # it trained


def test_a_buffer_per_shape_and_arguments_passed_as_they_are_where_fixed():
    seen = []
    static = StaticStep(lambda *args: seen.append(args) or torch.zeros((), requires_grad=True),
                        torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1), fixed=(2,))
    whole = torch.ones(5)
    for rows in (3, 3, 2):
        static(torch.full((rows,), float(rows)), None, whole)
    assert [a[0].tolist() for a in seen] == [[3.0] * 3, [3.0] * 3, [2.0] * 2]
    assert seen[0][0] is seen[1][0] and seen[0][0] is not seen[2][0]  # one buffer per shape, reused
    assert all(a[1] is None and a[2] is whole for a in seen)


def test_graph_is_refused_where_it_cannot_capture(tmp_path):
    from amortized_pyro.runs.packs import fit_replicas
    from amortized_pyro.runs.config import FitConfig

    options = dict(dataset="mnist-sample", n_obs=40, n_test=10, epochs=1, batch_size=20, hidden=8, z_dim=2, width=4,
                   progress=False, graph=True, device="cpu")
    with pytest.raises(AmortizedPyroError, match="--graph captures the step in a CUDA graph: it needs a CUDA device"):
        fit(**options, **quiet)
    config = FitConfig(**{k: v for k, v in options.items() if k != "progress"})
    with pytest.raises(AmortizedPyroError, match="does not capture packs of replicas"):
        fit_replicas(config, 2, progress=False, **quiet)
    result = CliRunner().invoke(cli, ["fit", "--graph", "--device", "cpu", "--dataset", "mnist-sample", "--n-obs", "40",
                                      "--n-test", "10", "--epochs", "1", "--no-progress", "--out", str(tmp_path / "run")])
    assert result.exit_code == 2 and "needs a CUDA device" in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1 and not (tmp_path / "run").exists()  # refused before writing


@requires_cuda
def test_on_cuda_a_captured_run_ends_within_the_eager_runs_spread():
    """3 seeds eager and 3 captured, 300 steps each on the shipped sample: the captured runs' mean final ELBO
    within 4 standard errors (of the difference of the two means) of the eager runs' mean."""
    finals = {}
    for graph in (False, True):
        finals[graph] = [fit(dataset="mnist-sample", n_obs=500, n_test=50, epochs=30, batch_size=50, hidden=32,
                             z_dim=4, width=16, seed=seed, device="cuda", graph=graph, eval_every=30,
                             predictive_draws=0, progress=False, **quiet).history[-1]["elbo_per_obs"]
                         for seed in (0, 1, 2)]
    means = [sum(v) / 3 for v in finals.values()]
    se = math.sqrt(sum(sum((x - m) ** 2 for x in v) / 2 / 3 for v, m in zip(finals.values(), means)))
    assert all(math.isfinite(x) for v in finals.values() for x in v)
    assert abs(means[0] - means[1]) < 4 * max(se, 1e-3 * abs(means[0])), finals


class StandInGraphs:
    """CudaGraphs on the CPU: a capture leaves what a real one leaves (the parameters and the optimizer's state
    unchanged, each .grad a buffer of the graph's), a replay runs the step, writing its gradients into those
    buffers and its loss into the captured loss, as a real replay's kernels write theirs."""

    def __init__(self, params, optimizer):
        self.params, self.optimizer = params, optimizer

    def on_a_side_stream(self, run):
        return run()

    def capture(self, body):
        kept = [p.detach().clone() for p in self.params], copy.deepcopy(self.optimizer.state_dict())
        loss = body()
        buffers = [p.grad for p in self.params]
        with torch.no_grad():
            for p, value in zip(self.params, kept[0]):
                p.copy_(value)
        self.optimizer.load_state_dict(kept[1])
        return StandInGraph(self, body, buffers, loss), loss


class StandInGraph:
    def __init__(self, graphs, body, buffers, loss):
        self.graphs, self.body, self.buffers, self.loss = graphs, body, buffers, loss

    def replay(self):
        for p in self.graphs.params:
            p.grad = None
        self.loss.copy_(self.body())
        for p, buffer in zip(self.graphs.params, self.buffers):
            buffer.copy_(p.grad)
            p.grad = buffer


def test_the_first_eager_step_after_a_capture_adds_no_replays_gradient():
    """Batches of 4 rows (3 eager warm-up steps, the 4th captured, the 5th replayed), then one of 2 rows (eager,
    its shape's warm-up): the parameters are those of six eager steps. Before, the eager step added the last
    replay's gradient, left in the graph's buffers, to its own."""
    trained = []
    for captured in (False, True):
        torch.manual_seed(0)
        weight = torch.nn.Parameter(torch.randn(3))
        optimizer = torch.optim.SGD([weight], lr=0.1, momentum=0.9)

        def elbo(x):
            return ((x @ weight) - 1.0).pow(2).sum()

        static = StaticStep(elbo, optimizer, capture=captured, warmup=3,
                            cuda=StandInGraphs([weight], optimizer) if captured else None)
        data = torch.randn(6, 4, 3, generator=torch.Generator().manual_seed(1))
        for x in list(data[:5]) + [data[5, :2]]:
            static(x)
        trained.append(weight.detach().clone())
        if captured:
            assert len(static.graphs) == 1  # the 4-row shape was captured
    torch.testing.assert_close(trained[1], trained[0], rtol=1e-6, atol=1e-7)


def test_a_broken_capture_says_its_cause_and_leaves_the_capture_stream(monkeypatch):
    """torch.cuda.graph's exit ran capture_end() before leaving its stream: a capture broken by a host sync
    raised capture_end's error, not the cause, and left the capture stream current (issue 70). CudaGraphs
    ends the capture and leaves the stream on every path, and raises the cause."""
    from amortized_pyro.inference.static_step import CudaGraphs

    events = []

    class Graph:
        def capture_begin(self):
            events.append("begin")

        def capture_end(self):
            events.append("end")
            raise RuntimeError("CUDA error: operation failed due to a previous error during capture")

    class Stream:
        def wait_stream(self, other):
            pass

    @contextlib.contextmanager
    def on(stream):
        events.append("enter")
        yield
        events.append("leave")

    for name, value in (("CUDAGraph", Graph), ("Stream", Stream), ("stream", on), ("current_stream", Stream),
                        ("synchronize", lambda: None)):
        monkeypatch.setattr(torch.cuda, name, value)

    def body():
        raise RuntimeError("operation not permitted when stream is capturing (a host sync: .item())")

    with pytest.raises(RuntimeError, match="not permitted when stream is capturing"):
        CudaGraphs().capture(body)
    assert events == ["enter", "begin", "end", "leave"]


def test_no_random_stream_is_forked_on_the_gpu_while_capturing(monkeypatch):
    """A builder's plate read forks the random streams; setting a CUDA generator's state inside a capture is
    refused by PyTorch: while capturing, only the CPU's is forked (issue 70)."""
    from amortized_pyro.support import streams

    forked = []
    monkeypatch.setattr(torch.random, "fork_rng", lambda devices: forked.append(devices) or contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for capturing in (False, True):
        monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: capturing)
        with streams.outside_the_stream(torch.device("cuda", 0)):
            pass
    assert forked == [[0], []]
