"""The conditional accuracy (issue 63, amortized_pyro/report/class_accuracy.py): the k-nearest-neighbour classifier
against a brute-force one written here, its leave-one-out accuracy on the shipped sample, a grid whose rows
ignore their class (exactly chance) against one of real images of each row's class (the classifier's own
accuracy on them), and `sample` printing it for a conditional run."""
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from amortized_pyro.cli.commands import cli
from amortized_pyro.report.class_accuracy import conditional_accuracy, nearest_labels
from amortized_pyro.runs.data import SAMPLE_PATH

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def sample():
    with np.load(SAMPLE_PATH) as arrays:
        images, labels = arrays["images"], arrays["labels"]
    return torch.tensor(images.reshape(len(images), -1) / 255.0), torch.tensor(labels, dtype=torch.long)


def brute_force(image, reference, labels, k):
    """Sort every distance, vote among the k nearest, a tie to the class whose member comes first."""
    order = sorted(range(len(reference)), key=lambda r: float(((reference[r] - image) ** 2).sum()))[:k]
    votes = Counter(int(labels[r]) for r in order)
    most = max(votes.values())
    return next(int(labels[r]) for r in order if votes[int(labels[r])] == most)


def test_the_classifier_is_the_brute_force_one(sample):
    images, labels = sample
    queries, reference, known = images[:40], images[200:700], labels[200:700]
    for k in (1, 4, 5):  # 4: ties of two against two
        found = nearest_labels(queries, reference, known, k)
        assert found.tolist() == [brute_force(q, reference, known, k) for q in queries]
    left_out = nearest_labels(images[:300], images[:300], labels[:300], 5, exclude=torch.arange(300), chunk=64)
    assert left_out.tolist() == [brute_force(images[i], torch.cat([images[:i], images[i + 1:300]]),
                                             torch.cat([labels[:i], labels[i + 1:300]]), 5) for i in range(300)]


def test_a_decoder_that_ignores_the_class_scores_chance_and_real_images_their_accuracy(sample):
    images, labels = sample
    reference, known, held = images[:2500], labels[:2500], images[2500:]
    held_labels = labels[2500:]
    per_class = 20
    real = torch.stack([held[held_labels == c][:per_class] for c in range(10)])  # row c: real images of class c
    accuracy = conditional_accuracy(real, torch.arange(10), reference, known)
    expected = (nearest_labels(real.reshape(-1, real.shape[-1]), reference, known).reshape(10, per_class)
                == torch.arange(10)[:, None]).double().mean().item()
    assert accuracy.overall == pytest.approx(expected) and accuracy.overall > 0.8
    assert 0.85 < accuracy.reference_accuracy < 0.95 and accuracy.references == 2500 and accuracy.draws == per_class
    same = real[3].expand(10, per_class, real.shape[-1])  # every row the same draws: the label ignored
    ignoring = conditional_accuracy(same, torch.arange(10), reference, known)
    assert ignoring.overall == pytest.approx(0.1)  # each draw is one class's, right in exactly one row of ten
    assert "conditional accuracy 10.0 %" in ignoring.line() and "5-nearest-neighbour" in ignoring.line()


@pytest.mark.parametrize("z_dim, low, high", [(2, 35.0, 100.0), (64, 0.0, 28.0)])
def test_sample_prints_the_conditional_accuracy_and_the_recipe_s_rows_show_their_class(tmp_path, z_dim, low, high):
    """experiments/cvae.toml shrunk to seconds (500 images, 60 epochs, narrower networks): `sample` prints the
    accuracy of what it drew; the recipe's z of 2 dimensions draws rows a classifier reads as their class far
    more often than the preset's 64 (measured on seeds 0, 1, 2 of this tiny run: 44.2, 44.2, 51.2 % against 17.6,
    16.2, 20.2 %; chance 10 %), the thresholds between them."""
    out = tmp_path / "run"
    run = CliRunner().invoke(cli, ["fit", "--config", str(ROOT / "experiments" / "cvae.toml"), "--dataset",
                                   "mnist-sample", "--n-obs", "500", "--n-test", "100", "--epochs", "60",
                                   "--batch-size", "100", "--hidden", "64", "--width", "32", "--eval-every", "60",
                                   "--predictive-draws", "0", "--no-progress", "--z-dim", str(z_dim), "--out", str(out)])
    assert run.exit_code == 0, run.output
    drawn = CliRunner().invoke(cli, ["sample", str(out), "--per-class", "50"])
    assert drawn.exit_code == 0, drawn.output
    line = drawn.output.splitlines()[-1]
    assert line.startswith("conditional accuracy ") and "of 50 draws per class" in line and "600 labelled" in line
    assert low < float(line.split()[2]) < high, line
    if z_dim == 64:  # --same-z of an unconditional run: refused in one line, usage status, nothing written
        plain = tmp_path / "plain"
        assert CliRunner().invoke(cli, ["fit", "--dataset", "mnist-sample", "--n-obs", "40", "--n-test", "10",
                                        "--epochs", "1", "--no-progress", "--out", str(plain)]).exit_code == 0
        refused = CliRunner().invoke(cli, ["sample", str(plain), "--same-z"])
        assert refused.exit_code == 2 and "needs a conditional run" in refused.output, refused.output
        assert len(refused.output.strip().splitlines()) == 1 and not (plain / "samples.png").exists()


def test_same_z_shares_each_columns_noise_and_a_decoder_blind_to_the_label_scores_chance(sample):
    """draw_grid(same_z=True): row c's column j is E[x | z_j, c, θ] with one z_j for every row; where the
    decoder's weights on the label are zero (it ignores c), every row is the same images and the conditional
    accuracy is exactly chance."""
    from amortized_pyro.models.decoder import BayesianDecoderModel
    from amortized_pyro.models.generation import draw_grid
    from amortized_pyro.models.guides import make_guide

    images, labels = sample
    torch.manual_seed(0)
    model = BayesianDecoderModel(100, 784, 2, 16, n_classes=10, decoder_prior="none")
    theta = make_guide("amortized", model, width=4).global_mean()
    grid = draw_grid(model, theta, 4, torch.Generator().manual_seed(5), same_z=True)
    eps = torch.randn((1, 4, 2), generator=torch.Generator().manual_seed(5))[0]
    for c in (0, 7):
        code = torch.nn.functional.one_hot(torch.full((4,), c), 10).float()
        torch.testing.assert_close(grid[c], model.mean_image(eps, theta, code))
    assert not torch.allclose(grid[0], grid[7])  # the label moves the images
    blind = dict(theta, **{"decoder.w1": torch.cat([theta["decoder.w1"][:, :2], torch.zeros(16, 10)], 1)})
    same = draw_grid(model, blind, 4, torch.Generator().manual_seed(5), same_z=True)
    assert torch.equal(same[0], same[9])
    assert conditional_accuracy(same, torch.arange(10), images[:500], labels[:500]).overall == pytest.approx(0.1)
