"""Errors over training seeds and images together, for gap reports of several seeds of one configuration.

A gap report's standard error is over its images (θ draws, z draws and the trained run held fixed); a
table row of several training seeds pools them: the mean over seeds of their image means, with a standard
error from a random-effects reading of (seed, image) values (:func:`pooled`), and the median and 90th
percentile over every value, since held-out gaps are heavy-tailed. Reports without per-image values (the
capacity sweep's older rows) fall back to the standard error over the seeds' means.

Two configurations measured on the same (training seed, image) pairs are compared pair by pair
(:func:`paired_over_seeds`): the same rule applied to the per-image differences.
"""
import math
import statistics

import torch

from amortized_pyro.support.stats import mean_stderr


def seed_groups(reports):
    """Gap reports grouped by configuration and split: {(label, split): [reports, one per training seed]}."""
    groups = {}
    for r in reports:
        groups.setdefault((r["label"], r["split"]), []).append(r)
    return groups


def report_images(report):
    """The indices (into its split) of the images a report was measured on: recorded, or, in reports made
    before images were drawn by the gap seed, the split's first ``n_images``."""
    return report.get("images") or list(range(report["n_images"]))


def over_seeds(summaries, per_image=None, images=None):
    """Several seeds' {"mean", "stderr"} (``summaries``) pooled: with their per-image values (``per_image``:
    one list per seed; ``images``: their indices) by :func:`pooled`, else as the mean of the seeds' means ±
    the standard error over seeds; one seed's summary as it is where no per-image values are given; None
    where any is missing."""
    if any(s is None for s in summaries):
        return None
    if per_image is not None and all(v is not None for v in per_image):
        return pooled(per_image, images)
    if len(summaries) == 1:
        return summaries[0]
    mean, stderr = mean_stderr([s["mean"] for s in summaries])
    return {"mean": mean, "stderr": stderr}


def gap_over_seeds(group, name):
    """:func:`over_seeds` of the quantity ``name`` (e.g. ``amortization_gap``) of one report per seed."""
    return over_seeds([r.get(name) for r in group], [(r.get("per_image") or {}).get(name) for r in group],
                      [report_images(r) for r in group])


def unpaired_because(group, base, names):
    """Why two configurations' reports (``group`` and ``base``: one per training seed each) cannot be compared
    pair by pair over (training seed, image), or None where they can: both sides the same training seeds
    (``seed``), each seed's two reports on the same data (``data_id``, where the caller recorded it) and the same
    images (:func:`report_images`), with per-image values of every quantity in ``names`` that they summarize."""
    sides = (group, base)
    if any(r.get("seed") is None for side in sides for r in side) or any(
            len({r["seed"] for r in side}) < len(side) for side in sides):
        return "training seeds not recorded one per report"
    if {r["seed"] for r in group} != {r["seed"] for r in base}:
        return "different training seeds"
    theirs = {r["seed"]: r for r in base}
    if any(r.get("data_id") != theirs[r["seed"]].get("data_id") for r in group):
        return "different data"
    if any(sorted(report_images(r)) != sorted(report_images(theirs[r["seed"]])) for r in group):
        return "different images"
    if any(r.get(name) is not None and (r.get("per_image") or {}).get(name) is None
           for side in sides for r in side for name in names):
        return "no per-image values"
    return None


def paired_differences(group, base, name):
    """{training seed: [x_si − y_si per image i]} of the quantity ``name``, ``group``'s minus ``base``'s on the same
    images (a report's images in its own order), or None where either side lacks it."""
    theirs = {r["seed"]: r for r in base}
    if any(r["per_image"].get(name) is None or theirs[r["seed"]]["per_image"].get(name) is None for r in group):
        return None
    differences = {}
    for r in group:
        other = theirs[r["seed"]]
        by_image = dict(zip(report_images(other), other["per_image"][name]))
        differences[r["seed"]] = [x - by_image[i] for i, x in zip(report_images(r), r["per_image"][name])]
    return differences


def paired_over_seeds(group, base, name):
    """The quantity ``name`` of ``group`` minus that of ``base``, paired (:func:`unpaired_because` None):
    d_si = x_si − y_si for training seed s and image i (:func:`paired_differences`), pooled by :func:`pooled`
    (each seed its own images: nested; every seed the same: crossed). Its mean is the difference of the two
    pooled means; its standard error is that of the mean difference, which leaves out what the pairs share (the
    image's difficulty, the seed's data cut). None where either side lacks the quantity."""
    differences = paired_differences(group, base, name)
    if differences is None:
        return None
    return pooled([differences[r["seed"]] for r in group], [report_images(r) for r in group])


def refinement_over_seeds(group, steps):
    """:func:`over_seeds` of the gap left after ``steps`` refinement steps, None where a report lacks it."""
    rows = [next((row for row in r.get("refinement", ()) if row["steps"] == steps), None) if r.get("elbo_guide")
            else None for r in group]
    return over_seeds([row and row["gap_left"] for row in rows], [row and row.get("per_image") for row in rows],
                      [report_images(r) for r in group])


def pooled(values, images):
    """Mean over seeds and images of a per-image quantity with a standard error that covers both, and the
    median and 90th percentile over every (seed, image) value.

    ``values``: one list of per-image values per training seed; ``images``: the image indices each was
    measured on. Method of moments for a one-way (images nested in seeds: each seed its own images) or a
    two-way crossed (every seed the same images: paired) random-effects model, balanced:

        nested   Var(grand mean) = σ²_seed / S + σ²_image / (S n)
        crossed  Var(grand mean) = σ²_seed / S + σ²_image / n + σ²_residual / (S n)

    with each variance component estimated from its mean square and cut at zero. Unbalanced designs (seeds
    with different image counts or partly shared images) fall back to the nested formula with n the mean
    count: a conservative reading where images are shared."""
    S = len(values)
    x = [torch.tensor(v, dtype=torch.float64) for v in values]
    flat = torch.cat(x)
    grand = statistics.fmean(float(v.mean()) for v in x)
    result = {"mean": grand, "median": flat.median().item(), "q90": flat.quantile(0.9).item(), "seeds": S,
              "images": flat.numel()}
    n = flat.numel() / S
    if S == 1:
        within = x[0].var().item() if x[0].numel() > 1 else math.nan
        result.update(stderr=math.sqrt(within / n), over="images")
        return result
    crossed = all(list(i) == list(images[0]) for i in images) and len(set(len(v) for v in x)) == 1
    if crossed and n > 1:
        table = torch.stack(x)  # [S, n]
        seed_means, image_means = table.mean(1), table.mean(0)
        residual = table - seed_means[:, None] - image_means[None, :] + table.mean()
        ms_seed = n * seed_means.var().item()
        ms_image = S * image_means.var().item()
        ms_residual = residual.pow(2).sum().item() / ((S - 1) * (n - 1))
        var_seed = max(0.0, (ms_seed - ms_residual) / n)
        var_image = max(0.0, (ms_image - ms_residual) / S)
        variance = var_seed / S + var_image / n + ms_residual / (S * n)
        result.update(stderr=math.sqrt(variance), over="seeds and images (crossed: the same images in every seed)")
        return result
    seed_means = torch.tensor([v.mean().item() for v in x])
    within = statistics.fmean(v.var().item() for v in x if v.numel() > 1) if n > 1 else 0.0
    var_seed = max(0.0, seed_means.var().item() - within / n)
    variance = var_seed / S + within / (S * n)
    result.update(stderr=math.sqrt(variance), over="seeds and images (nested: each seed its own images)")
    return result
