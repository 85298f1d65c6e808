"""docs/cli.md's examples that go on from the Quickstart use its own run folders (runs/first, runs/first-grid), and
its ``sample`` examples, run as written on a tiny stand-in for runs/first, write into the run's folder and nothing
into the working directory."""
from pathlib import Path

from click.testing import CliRunner

from amortized_pyro.cli.commands import cli
from conftest import tiny_finished_run
from test_docs import commands

CLI_PAGE = Path(__file__).resolve().parents[1] / "docs" / "cli.md"


def examples(name):
    return [args for args, _ in commands(CLI_PAGE) if args[0] == name]


def test_resume_sample_and_plot_examples_go_on_from_the_quickstarts_folders():
    assert any(args[:3] == ["fit", "--resume", "runs/first"] for args in examples("fit"))
    assert "runs/first" in [args[1] for args in examples("sample")]
    assert [args[1] for args in examples("plot")] == ["runs/first-grid/results.jsonl"]


def test_the_sample_example_writes_into_the_runs_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    tiny_finished_run(Path("runs/first"))
    (example,) = [args for args in examples("sample") if args[1] == "runs/first"]
    result = CliRunner().invoke(cli, example)
    assert result.exit_code == 0, result.output
    assert Path("runs/first/samples.png").is_file() and "wrote runs/first/samples.png" in result.output
    assert not list(tmp_path.glob("*.png"))
