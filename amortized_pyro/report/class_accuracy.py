"""Whether a class-conditional model's draws show their class (issue 63): the conditional accuracy.

Each drawn image x (a row of a grid drawn for class c) is classified by its k nearest neighbours among labelled
real images (Euclidean distance on the pixels, a majority vote, ties to the nearest of the tied classes), and

    conditional accuracy = the share of draws classified as the class they were drawn for

(chance: 1/K for K classes; a decoder that ignores c scores near it). The reference images are the run's own
labelled images (its training and held-out images): the classifier's own accuracy on them (on 3,000 of them
at most), leave-one-out, says how far its verdict can be trusted (about 90 % on the shipped MNIST sample's 3,000 images at k = 5). What it
does not measure: whether the draws look like real images of their class, only which class's real images they
are nearest to; a blurry mean image nearest to the right class counts as right.
"""
from dataclasses import dataclass

import torch

NEIGHBOURS = 5
LEAVE_ONE_OUT = 3000  # the references whose leave-one-out verdicts give the classifier's own accuracy


def nearest_labels(images, reference, labels, k=NEIGHBOURS, exclude=None, chunk=512):
    """The k-nearest-neighbour class of each of ``images`` [M, D] among ``reference`` [R, D] with int64
    ``labels`` [R], distances in float64, equal distances in the reference's order (a stable sort);
    ``exclude`` [M]: each image's own row in the reference, left out of its vote (leave-one-out)."""
    images, reference = images.to(torch.float64), reference.to(torch.float64)
    squared = (reference * reference).sum(1)
    classes = int(labels.max()) + 1
    found = []
    for start in range(0, len(images), chunk):
        rows = images[start:start + chunk]
        distance = squared - 2 * rows @ reference.T  # |x − r|² up to |x|², which ranks nothing
        if exclude is not None:
            distance[torch.arange(len(rows)), exclude[start:start + chunk]] = float("inf")
        order = distance.sort(dim=1, stable=True).indices[:, :k]  # nearest first
        votes = torch.zeros(len(rows), classes, dtype=torch.float64).scatter_add_(
            1, labels[order], torch.ones(order.shape, dtype=torch.float64))
        # a tie goes to the tied class whose nearest member is nearest: a bonus below one vote by rank
        nearest_rank = torch.full((len(rows), classes), float(k), dtype=torch.float64).scatter_reduce_(
            1, labels[order], torch.arange(k, dtype=torch.float64).expand(len(rows), k), "amin")
        found.append((votes - nearest_rank / (k + 1)).argmax(1))
    return torch.cat(found) if found else labels.new_zeros(0)


@dataclass
class ConditionalAccuracy:
    """``overall``: the share of draws classified as their row's class; ``per_class`` the same per class drawn;
    ``draws``: how many per class; ``classes`` K; ``reference_accuracy``: the classifier's leave-one-out accuracy
    on (up to :data:`LEAVE_ONE_OUT` of) its ``references`` real images; ``k`` its neighbours."""

    overall: float
    per_class: list
    draws: int
    classes: int
    reference_accuracy: float
    references: int
    k: int

    def line(self):
        """One line: the accuracy with the classifier it used."""
        return ("conditional accuracy %.1f %% of %d draws per class (chance %.0f %%; per class %s), by a %d-nearest-"
                "neighbour classifier on the run's %d labelled images (itself %.1f %% right on them, leave-one-out)"
                % (100 * self.overall, self.draws, 100 / self.classes,
                   " ".join("%.0f" % (100 * a) for a in self.per_class), self.k, self.references,
                   100 * self.reference_accuracy))


def conditional_accuracy(grid, row_labels, reference, labels, k=NEIGHBOURS):
    """The :class:`ConditionalAccuracy` of draws ``grid`` [R, per_row, D] whose row r was drawn for class
    ``row_labels[r]``, classified among ``reference`` [N, D] with ``labels`` [N]."""
    grid, reference, labels, row_labels = (t.detach().cpu() for t in (grid, reference, labels, row_labels))
    predicted = nearest_labels(grid.reshape(-1, grid.shape[-1]), reference, labels, k).reshape(grid.shape[:2])
    right = (predicted == row_labels[:, None]).to(torch.float64)
    classes = int(labels.max()) + 1
    per_class = [right[row_labels == c].mean().item() for c in range(classes) if (row_labels == c).any()]
    # its own accuracy on a fixed subset of the references (each left out of its vote): N² distances cost minutes
    # for 70,000 images
    held = torch.randperm(len(reference), generator=torch.Generator().manual_seed(0))[:LEAVE_ONE_OUT].sort().values
    own = nearest_labels(reference[held], reference, labels, k, exclude=held)
    return ConditionalAccuracy(right.mean().item(), per_class, grid.shape[1], classes,
                               (own == labels[held]).to(torch.float64).mean().item(), len(reference), k)


def of_class_grid(grid, data, k=NEIGHBOURS):
    """The :class:`ConditionalAccuracy` of a conditional model's grid [K, per_row, D] (row c drawn for class c)
    against the labelled images of ``data`` (a :class:`~amortized_pyro.runs.data.Data`: training and held-out)."""
    reference = torch.cat([data.train, data.test]).flatten(1)
    labels = torch.cat([data.train_labels, data.test_labels])
    return conditional_accuracy(grid, torch.arange(grid.shape[0]), reference, labels, k)
