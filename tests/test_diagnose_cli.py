"""`diagnose` on a tiny finished run, as a user runs it: its files, its output's reading, the same numbers again for
the same seed, refusals in one line; and `fit --refine-share`, SA-VI refining only the worst share."""
import json

from click.testing import CliRunner

from amortized_pyro.cli.commands import cli
from amortized_pyro.gap.measure import gap_images
from amortized_pyro.local.gaps import GapSettings
from amortized_pyro.models.guides import config_label
from amortized_pyro.runs.fit import finished_run
from amortized_pyro.runs.config import FitConfig
from conftest import tiny_finished_run


def run(*args):
    return CliRunner().invoke(cli, list(args))


def test_diagnose_a_run(tmp_path):
    out = tiny_finished_run(tmp_path / "run")
    args = ("diagnose", str(out), "--n-images", "4", "--samples", "100", "--theta-draws", "2", "--refine-steps", "5",
            "--simulations", "40", "--sbc-draws", "19")
    result = run(*args)
    assert result.exit_code == 0, result.output
    report = json.loads((out / "diagnose.json").read_text())
    assert set(report["splits"]) == {"train", "test"}
    assert report["splits"]["train"]["images"] == gap_images(GapSettings(), 0, 60, 4)[1].tolist()  # gap's images
    for split in report["splits"].values():
        assert len(split["guide"]["khat"]) == 4 and len(split["refined-5"]["khat"]) == 4
        assert len(split["guide"]["khat_per_draw"]) == 2
    assert len(report["calibration"]["ranks"]) == 40 and report["calibration"]["bins"] == 5  # 20 ranks, 8 per bin
    assert (out / "diagnose_khat.png").exists() and (out / "diagnose_ecdf.png").exists()
    assert "calibration: 40 simulated images" in result.output and "reading:" in result.output
    again = run(*args, "--overwrite", "--out", str(tmp_path / "again"))
    assert again.exit_code == 0, again.output
    assert json.loads((tmp_path / "again" / "diagnose.json").read_text())["splits"] == report["splits"]


def test_diagnose_refuses_in_one_line(tmp_path):
    out = tiny_finished_run(tmp_path / "run")
    assert run("diagnose", str(out), "--samples", "100", "--simulations", "0").exit_code == 0
    again = run("diagnose", str(out))
    assert again.exit_code == 1 and "exists" in again.output and len(again.output.strip().splitlines()) == 1
    missing = run("diagnose", str(tmp_path / "nothing"))
    assert missing.exit_code == 1 and len(missing.output.strip().splitlines()) == 1


def test_fit_refines_the_worst_share(tmp_path):
    common = ["fit", "--dataset", "mnist-sample", "--n-obs", "60", "--n-test", "20", "--epochs", "1", "--batch-size",
              "30", "--hidden", "8", "--z-dim", "3", "--width", "4", "--no-progress"]
    result = run(*common, "--guide", "semi-amortized", "--refine-share", "0.5", "--refine-score", "khat",
                 "--refine-steps", "2", "--out", str(tmp_path / "sa"))
    assert result.exit_code == 0, result.output
    config = json.loads((tmp_path / "sa" / "config.json").read_text())["config"]
    assert config["refine_share"] == 0.5 and config["refine_score"] == "khat"
    guide = finished_run(tmp_path / "sa", log=lambda line: None)[0].guide
    assert (guide.share, guide.score, guide.q_z.share, guide.q_z.score) == (0.5, "khat", 0.5, "khat")
    assert config_label(FitConfig(guide="semi-amortized", width=4, refine_steps=2, refine_share=0.5)) == \
        "SA-VI k=4 r=2 worst 50% by spread"
    refused = run(*common, "--guide", "amortized", "--refine-share", "0.5", "--out", str(tmp_path / "a"))
    assert refused.exit_code == 2 and "refine-share" in refused.output
    for settings in (("--refine-share", "0.5", "--refine-steps", "0"), ("--refine-score", "khat")):  # would do nothing
        refused = run(*common, "--guide", "semi-amortized", *settings, "--out", str(tmp_path / "b"))
        assert refused.exit_code == 2 and "--refine-share below 1" in refused.output, refused.output
        assert len(refused.output.strip().splitlines()) == 1
