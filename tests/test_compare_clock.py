"""compare says the grid's expected time: at its start (from a few epochs timed then), after each run it trains (from
the runs' own clock) and after each run's gap reports, each line with its number and what it rests on."""
import re
import signal

from click.testing import CliRunner

from amortized_pyro.cli.commands import cli
from amortized_pyro.errors import Diverged, Interrupted
from amortized_pyro.study import clock
from amortized_pyro.study.clock import brief, duration

TINY = ["--dataset", "mnist-sample", "--n-obs", "60", "--n-test", "20", "--epochs", "4", "--batch-size", "30",
        "--hidden", "16", "--z-dim", "4", "--eval-every", "2", "--predictive-draws", "0", "--no-progress"]
SMALL_GAP = ["--gap-images", "2", "--gap-max-steps", "100", "--gap-ais-steps", "10", "--gap-importance-samples", "50",
             "--gap-samples", "10", "--gap-theta-draws", "2", "--gap-score-draws", "4", "--gap-select-draws", "4"]
TIME = r"(\d+ s|\d+\.\d min|\d+ min|\d+\.\d h)"
BRIEF = r"(\d+ ms|\d+\.\d s)"


def compare_lines(out, *extra):
    result = CliRunner().invoke(cli, ["compare", "--guides", "amortized,per-datapoint,shared", "--widths", "4",
                                      "--seeds", "0", "--out", str(out)] + TINY + list(extra))
    assert result.exit_code == 0, result.output
    return result.stderr.splitlines()


def test_compare_says_the_grids_time_at_its_start_and_after_each_run(tmp_path):
    lines = compare_lines(tmp_path / "grid", *SMALL_GAP)
    said = [i for i, line in enumerate(lines) if line.startswith("time: ")]
    runs = [i for i, line in enumerate(lines) if re.match(r"run \d of 3: ", line)]
    gaps = [i for i, line in enumerate(lines) if re.match(r"gaps \d of 6: .*test images: measuring", line)]
    assert len(runs) == 3 and len(gaps) == 3 and len(said) == 1 + 3 + 3, "\n".join(lines)
    start, after_runs, after_gaps = said[0], said[1:4], said[4:]
    assert start < runs[0] and all(r < s for r, s in zip(runs, after_runs)) and after_runs[-1] < gaps[0]
    assert all(g < s for g, s in zip(gaps, after_gaps))
    assert re.fullmatch(r"time: 3 of 3 runs to train \(12 epochs\), then the gap reports of 3 runs \(train and test "
                        r"images\); expected: training about %s \(%s per epoch and %s per evaluation, from 4 epochs of "
                        r"A-VI k=4 timed now\); the gap reports' time said once the first run's are measured"
                        % (TIME, BRIEF, BRIEF), lines[start]), lines[start]
    for line, left in zip((lines[i] for i in after_runs[:2]), (8, 4)):
        assert re.fullmatch(r"time: %s so far; training about %s left \(%d epochs, at the %s per epoch of the %d "
                            r"trained so far\); the gap reports' time said once the first run's are measured"
                            % (TIME, TIME, left, BRIEF, 12 - left), line), line
    assert re.fullmatch(r"time: %s so far; training done; the gap reports' time said once the first run's are "
                        r"measured" % TIME, lines[after_runs[2]])
    for line, left in zip((lines[i] for i in after_gaps), ("2 runs", "1 run", "0 runs")):
        assert re.fullmatch(r"time: %s so far; expected: %s in all, about %s left \(the gap reports of %s, at the "
                            r"%s per run of the %d measured so far\)" % (TIME, TIME, TIME, left, TIME,
                                                                       3 - int(left[0])), line), line


def test_without_gaps_a_line_says_the_whole_grids_time_and_a_finished_grid_trains_nothing(tmp_path):
    lines = [line for line in compare_lines(tmp_path / "grid") if line.startswith("time: ")]
    assert len(lines) == 4 and re.search(r"from 4 epochs of A-VI k=4 timed now\); in all about %s$" % TIME, lines[0])
    assert all(re.search(r"; in all about %s$" % TIME, line) for line in lines[1:])
    again = [line for line in compare_lines(tmp_path / "grid") if line.startswith("time: ")]
    assert again == ["time: 0 of 3 runs to train (0 epochs)"]  # every run found finished: nothing timed


def test_durations_read_as_people_say_them():
    assert [duration(s) for s in (4.4, 89, 450, 1500, 7200)] == ["4 s", "89 s", "7.5 min", "25 min", "2.0 h"]
    assert [brief(s) for s in (0.0153, 2.14)] == ["15 ms", "2.1 s"]


def test_a_signal_during_the_trial_stops_the_comparison(tmp_path, monkeypatch):
    """Ctrl-C while the first epochs are timed stops compare as it would in a run (exit 130), not the trial alone;
    a trial that fails for its own reasons (it diverged) only leaves the time to be said as runs end."""
    def stopped(*args, **kwargs):
        raise Interrupted(signal.SIGINT, 1)

    monkeypatch.setattr(clock, "fit", stopped)
    result = CliRunner().invoke(cli, ["compare", "--guides", "shared", "--seeds", "0", "--out", str(tmp_path / "a")]
                                + TINY)
    assert result.exit_code == 130 and "interrupted by SIGINT" in result.output, result.output
    assert "run 1 of 1" not in result.output

    def diverged(*args, **kwargs):
        raise Diverged(1, float("nan"))

    monkeypatch.setattr(clock, "fit", diverged)
    result = CliRunner().invoke(cli, ["compare", "--guides", "shared", "--seeds", "0", "--out", str(tmp_path / "b")]
                                + TINY)
    assert result.exit_code == 0, result.output
    assert "time: 1 of 1 run to train (4 epochs); expected time said as runs end" in result.stderr.splitlines()
