"""The sample command within its ceiling (issue 71: ``sample RUN --per-class 100000`` ran over 10 minutes at 10.5
GB and ignored Ctrl-C). The options are bounded at 100 (tests/test_conditional.py); what is left is that the largest
grid they allow is drawn in seconds, as one image (one axes per image took 6.4 minutes and 4 GB for 100 × 100, and a
Ctrl-C while it was written ended the command 28 s later: the time of the largest grid is bench/sample_grid.py's),
and that a Ctrl-C while it draws ends the command at once, in one line, with exit status 130."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from amortized_pyro.cli.commands import MAX_GRID
from amortized_pyro.report.samples import sample_figure
from conftest import tiny_finished_run

ROOT = Path(__file__).parents[1]


def test_the_grid_is_one_image_its_rows_named(tmp_path):
    rng = np.random.default_rng(0)
    images = rng.random((3, 4, 3 * 5 * 6))  # 3 rows of 4 colour images of 5 × 6 pixels, channel-first
    fig = sample_figure(images, (3, 5, 6), ["a", "b", "c"], "three rows", tmp_path / "g.png")
    (ax,) = fig.axes
    (shown,) = ax.get_images()
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b", "c"] and ax.get_xticks().size == 0
    grid = np.asarray(shown.get_array())
    # image (r, c) at its place in the mosaic, a one-pixel line between images
    assert np.allclose(grid[6:11, 7:13], images[1, 1].reshape(3, 5, 6).transpose(1, 2, 0))
    assert np.allclose(grid[0:5, 0:6], images[0, 0].reshape(3, 5, 6).transpose(1, 2, 0))


DRAWING = """
import sys
import amortized_pyro.report.samples as samples
from amortized_pyro.cli.commands import main
save = samples.save_figure
def announced(*args, **kwargs):
    sys.stderr.write("drawing\\n"); sys.stderr.flush()
    return save(*args, **kwargs)
samples.save_figure = announced
sys.argv = ["python -m amortized_pyro"] + sys.argv[1:]
main()
"""


def test_ctrl_c_while_the_largest_grid_is_drawn_ends_it_at_once(tmp_path):
    run = tiny_finished_run(tmp_path / "run")
    out = tmp_path / "grid.png"
    child = subprocess.Popen([sys.executable, "-c", DRAWING, "sample", str(run), "--per-class", str(MAX_GRID),
                              "--rows", str(MAX_GRID), "--out", str(out)], stderr=subprocess.PIPE, text=True,
                             cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert child.stderr.readline() == "drawing\n"
        time.sleep(0.2)
        child.send_signal(signal.SIGINT)
        sent = time.perf_counter()
        rest = child.stderr.read()
        child.wait(timeout=60)
        waited = time.perf_counter() - sent
    finally:
        child.kill()
    assert child.returncode == 130, rest
    assert rest.strip().splitlines() == ["Error: interrupted; nothing was written"], rest
    assert waited < 10, "%.1f s from Ctrl-C to the end" % waited  # 28 s before: the save ran to its end
    assert not out.exists()
