import math
import os
from pathlib import Path

import pytest
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.container import ErrorbarContainer
from matplotlib.figure import Figure

import pyro

from amortized_pyro.models.guides import FAMILIES
from amortized_pyro.runs.data import Data, load_data

if os.environ.get("PYTEST_XDIST_WORKER"):  # two workers on two cores (setup.cfg): one torch thread each, their
    # subprocesses too (two processes of two torch threads each on this 2-core machine slowed a fit 54×)
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
STUDY_GUIDES = tuple(f.name for f in FAMILIES.values() if f.in_studies)  # the studies' families (SA-VI is ours)


def build_guide(name, model, **kwargs):
    """make_guide for any family, SA-VI refining (2 steps), the iterative guide iterating twice."""
    from amortized_pyro import make_guide
    return make_guide(name, model, refine_steps=2, iterations=2, **kwargs)


@pytest.fixture(autouse=True)
def fresh_pyro():
    """Every test starts with validation on and the default float32, and leaves Pyro's global param store
    as empty as it found it: the package keeps every parameter in its modules."""
    pyro.clear_param_store()
    pyro.enable_validation(True)
    yield
    torch.set_default_dtype(torch.float32)
    assert not list(pyro.get_param_store().keys()), "a parameter leaked into Pyro's global param store"


@pytest.fixture(scope="session")
def sample_data():
    """400 training and 100 test images of the shipped real MNIST sample."""
    return load_data("mnist-sample", n_obs=400, n_test=100, seed=0, log=lambda line: None)


@pytest.fixture(scope="session")
def tiny_data(sample_data):
    return Data(sample_data.train[:120], sample_data.test[:30], sample_data.source)


class SavedFigures(dict):
    """{file name: figure} of every figure saved while a test runs, in the order each was last saved."""

    @property
    def last(self):
        """The figure saved last."""
        return next(reversed(self.values()))


@pytest.fixture
def saved_figures(monkeypatch):
    """Every figure saved while the test runs (:class:`SavedFigures`), caught at ``Figure.savefig`` and still
    written, so that a test reads what a figure shows (its lines, labels, legend) and not only that a file exists."""
    figures, save = SavedFigures(), Figure.savefig

    def catch(fig, path, *args, **kwargs):
        figures.pop(Path(path).name, None)  # saved again: now the last
        figures[Path(path).name] = fig
        return save(fig, path, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", catch)
    return figures


def same_records(a, b):
    """Lists of dicts equal key for key, NaN equal to NaN (pytest.approx takes no nested structures)."""
    def same(x, y):
        return x == y or (isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y))
    return len(a) == len(b) and all(r.keys() == s.keys() and all(same(r[k], s[k]) for k in r) for r, s in zip(a, b))


def legend_clear_of(ax):
    """Whether ``ax`` has a legend and it lies outside the axes' area (covers no data)."""
    renderer = FigureCanvasAgg(ax.figure).get_renderer()  # a renderer for the figure, whatever its canvas
    legend = ax.get_legend()
    return legend is not None and not legend.get_window_extent(renderer).overlaps(ax.get_window_extent(renderer))


def labelled_points(ax):
    """{legend label: (x, y) of its points} of the axes' labelled lines and error bars (an error bar's points:
    its container's data line; caps, bars and unlabelled lines left out)."""
    lines = [(c.get_label(), c.lines[0]) for c in ax.containers if isinstance(c, ErrorbarContainer)]
    return {label: (list(line.get_xdata()), list(line.get_ydata()))
            for label, line in lines + [(line.get_label(), line) for line in ax.get_lines()] if not label.startswith("_")}


def tiny_finished_run(out, guide="amortized"):
    """A finished run of ``guide`` (A-VI k = 4 by default) on 60 images of the shipped sample, trained for 2 epochs
    into ``out``."""
    from click.testing import CliRunner
    from amortized_pyro.cli.commands import cli
    from amortized_pyro.models.guides import ENCODER_GUIDES
    width = ["--width", "4"] if guide in ENCODER_GUIDES else []  # the others take no width (refused)
    result = CliRunner().invoke(cli, ["fit", "--guide", guide, "--dataset", "mnist-sample", "--n-obs", "60",
                                      "--n-test", "20", "--epochs", "2", "--batch-size", "30", "--hidden", "8",
                                      "--z-dim", "3", *width, "--no-progress", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


# whole files whose tests start other processes or run whole pages and runs (the slowest part of the suite,
# docs/testing.md): marked ``slow``, so that ``python -m pytest -q -m "not slow"`` is a quick subset
SLOW_FILES = {"test_tutorial.py", "test_ray.py", "test_ray_cluster.py", "test_your_model_page.py", "test_lightning.py",
              "test_reliability.py", "test_cvae_gap.py", "test_docs.py", "test_fidelity.py"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in SLOW_FILES:
            item.add_marker(pytest.mark.slow)
