"""A gap q* never measured reads as such at the command line (issue 71: ``GapSettings(max_steps=50)`` on an untrained
guide reported an amortization gap of exactly 0.000 ± 0.000). The API warns (GapNotMeasured,
tests/test_autoguide_gap.py); the ``gap`` command printed Python's two warning lines (the category, then a line of
our source) above a table whose row still read a clean 0.000. Now the warning is one line, and the table's row says
that it is a lower bound."""
import warnings

from click.testing import CliRunner

from amortized_pyro.cli.commands import cli
from amortized_pyro.report.tables import format_gap
from conftest import tiny_finished_run

GAP = ["--n-images", "2", "--max-steps", "20", "--ais-steps", "0", "--samples", "2", "--importance-samples", "2",
       "--theta-draws", "1", "--no-progress"]


def test_a_gap_q_star_never_measured_is_said_in_one_line_and_in_its_row(tmp_path):
    run = tiny_finished_run(tmp_path / "run")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = CliRunner().invoke(cli, ["gap", str(run), *GAP])
    assert result.exit_code == 0, result.output
    assert not [w for w in caught if w.category.__name__ == "GapNotMeasured"]  # said by the command, not left to Python
    lines = result.output.splitlines()
    said = [line for line in lines if "without beating it" in line]
    assert len(said) == 1 and said[0].startswith("warning: for 2 of 2 datapoints q*'s optimization"), result.output
    assert "GapNotMeasured" not in result.output and "measure_gap(" not in result.output
    (row,) = [line for line in lines if line.startswith("| amortization_gap |")]
    assert "a lower bound: q* never beat the guide's factor in 20 steps for 2 of 2 images" in row, row


def test_a_measured_gap_row_carries_no_note():
    report = {"settings": {"importance_samples": 2, "theta": "mean", "theta_draws": 1, "max_steps": 20},
              "n_images": 2, "run": "r", "split": "test", "optimizer_steps": 20, "refinement": [],
              "optimized_plugin_mse": 0.1, "amortization_gap": {"mean": 1.5, "stderr": 0.5}, "kept_at_cap": 0}
    (row,) = [line for line in format_gap(report).splitlines() if line.startswith("| amortization_gap |")]
    assert row == "| amortization_gap | 1.500 | 0.500 |"
