"""A seed beyond what torch's generator takes is refused in one line, as ``gap --seed`` refuses it (issue 71's
class of fault: ``sample --seed 2**70`` and ``diagnose --seed 2**70`` ended in "Overflow when unpacking long long"
and "this is a bug of amortized_pyro")."""
import pytest
from click.testing import CliRunner

from amortized_pyro.cli.commands import cli
from conftest import tiny_finished_run

HUGE = str(2 ** 70)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return tiny_finished_run(tmp_path_factory.mktemp("runs") / "run")


@pytest.mark.parametrize("command", [["sample"], ["diagnose", "--n-images", "2", "--simulations", "0"]])
def test_a_seed_beyond_the_generators_is_a_usage_error(run, tmp_path, command):
    result = CliRunner().invoke(cli, [command[0], str(run), *command[1:], "--seed", HUGE, "--out",
                                      str(tmp_path / ("grid.png" if command[0] == "sample" else "d"))])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and "bug" not in result.output, result.output
    assert result.output.strip().splitlines()[-1].startswith("Error: Invalid value for '--seed'"), result.output



def test_capacity_refuses_an_encoder_seed_beyond_the_generators(run, tmp_path):
    result = CliRunner().invoke(cli, ["capacity", str(run), "--widths", "2", "--layers", "1", "--seeds", "1," + HUGE,
                                      "--n-images", "2", "--out", str(tmp_path / "cap")])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("Error: Invalid value for '--seeds'") and "at most 9223372036854775807" in last, last
    assert not (tmp_path / "cap").exists()
