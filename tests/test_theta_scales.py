"""experiments/theta_scales.py reads q(θ)'s scales per decoder weight tensor from a run's saved parameters."""
from pathlib import Path

import torch

from conftest import tiny_finished_run
from in_process import run_python

SCRIPT = Path(__file__).resolve().parents[1] / "experiments" / "theta_scales.py"


def test_theta_scales_reads_each_layers_scale(tmp_path):
    run = tiny_finished_run(tmp_path / "run")  # z 3 → 8 → 8 → 784
    done = run_python(SCRIPT, run)  # in this process, as python would run it (load_run keeps the random streams)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    state = torch.load(run / "params.pt", map_location="cpu", weights_only=False)["guide"]
    scale = state["q_theta.log_scale"].exp()  # the flat vector, by hand
    w1, w2 = scale[:24], scale[24 + 8:24 + 8 + 64]  # w1 (8, 3), b1 (8,), w2 (8, 8)
    row = [line for line in out.splitlines() if line.startswith("| A-VI k=4 |")]
    assert len(row) == 1, out
    cells = [c.strip() for c in row[0].strip("|").split("|")]
    assert cells[1] == "1" and len(cells) == 5  # configuration, seeds, w1, w2, w3
    # one run: its mean, no spread to show
    assert cells[2] == "%.4f" % w1.mean().item() and cells[3] == "%.4f" % w2.mean().item()
