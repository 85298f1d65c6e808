"""The conditional accuracy (issue 63, amortized_pyro/report/class_accuracy.py): the k-nearest-neighbour classifier
against a brute-force one written here, its leave-one-out accuracy on the shipped sample, a grid whose rows
ignore their class (exactly chance) against one of real images of each row's class (the classifier's own
accuracy on them), and `sample` printing it for a conditional run."""
from collections import Counter

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from amortized_pyro.cli.commands import cli
from amortized_pyro.report.class_accuracy import conditional_accuracy, nearest_labels
from amortized_pyro.runs.data import SAMPLE_PATH


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
    left_out = nearest_labels(images[:300], images[:300], labels[:300], 5, exclude_self=True, chunk=64)
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


def test_sample_prints_the_conditional_accuracy_of_what_it_drew(tmp_path):
    out = tmp_path / "run"
    run = CliRunner().invoke(cli, ["fit", "--conditional", "--dataset", "mnist-sample", "--n-obs", "60", "--n-test",
                                   "20", "--epochs", "2", "--batch-size", "30", "--hidden", "8", "--z-dim", "2",
                                   "--width", "4", "--no-progress", "--out", str(out)])
    assert run.exit_code == 0, run.output
    drawn = CliRunner().invoke(cli, ["sample", str(out), "--per-class", "3"])
    assert drawn.exit_code == 0, drawn.output
    line = drawn.output.splitlines()[-1]
    assert line.startswith("conditional accuracy ") and "of 3 draws per class" in line and "80 labelled images" in line
