"""Two configurations' gaps compared: each other configuration's gaps minus one's, paired by (training seed, image)
where both were measured on the same images of the same seeds and data (the per-image differences pooled as a gap
is, amortized_pyro.gap.pooling), unpaired where not, as experiments/gap_tables.py --against writes them."""
import math

from amortized_pyro.errors import AmortizedPyroError
from amortized_pyro.gap.pooling import gap_over_seeds, paired_differences, paired_over_seeds, seed_groups, unpaired_because
from amortized_pyro.models.guides import display_order
from amortized_pyro.report.marks import ordered

GAPS = ("amortization_gap", "coupling_gap", "approximation_gap")


def difference(group, base, name, why):
    """{"mean", "stderr"} of ``group``'s quantity ``name`` minus ``base``'s, or None where either lacks it:
    paired where ``why`` (:func:`~amortized_pyro.gap.pooling.unpaired_because`) is None, by
    :func:`~amortized_pyro.gap.pooling.paired_over_seeds`; else the difference of the pooled means with
    s.e. = √(s.e.₁² + s.e.₂²), the two taken as independent."""
    if why is None:
        return paired_over_seeds(group, base, name)
    mine, theirs = gap_over_seeds(group, name), gap_over_seeds(base, name)
    if mine is None or theirs is None:
        return None
    return {"mean": mine["mean"] - theirs["mean"], "stderr": math.hypot(mine["stderr"], theirs["stderr"])}


def per_seed(group, base, name):
    """The paired difference of ``name`` seed by seed (each training seed's mean over its images of ``group``
    minus ``base`` on the same images), as "0: +a, 1: -b, 2: +c" (seed: difference); n/a where either lacks it."""
    differences = paired_differences(group, base, name)
    if differences is None:
        return "n/a"
    return ", ".join("%d: %+.1f" % (seed, sum(d) / len(d)) for seed, d in sorted(differences.items()))


def in_errors(value):
    """A difference in nats ± its standard error and, in brackets, in standard errors; n/a where missing."""
    if value is None or math.isnan(value["mean"]):
        return "n/a"
    if not value["stderr"] > 0:  # one value, or identical differences: no ratio
        return "%+.1f (s.e. %s)" % (value["mean"], "n/a" if math.isnan(value["stderr"]) else "0")
    return "%+.1f ± %.1f (%+.1f s.e.)" % (value["mean"], value["stderr"], value["mean"] / value["stderr"])


def against_table(reports, base):
    """Every other configuration's three gaps minus ``base``'s, split by split, in nats ± the standard error and
    in standard errors (:func:`difference`, :func:`in_errors`), and where paired each training seed's amortization
    gap difference (:func:`per_seed`): paired by (training seed, image) where the two were measured on the same images of the
    same seeds and data, unpaired where not; the rows under a heading per way, which says it (and why unpaired)."""
    groups = seed_groups(reports)
    if not any(label == base for label, _ in groups):
        raise AmortizedPyroError("--against %s: no such configuration (there are: %s)" % (
            base, ", ".join(sorted({label for label, _ in groups}, key=display_order))))
    tables = {}  # {heading: rows}, in the order of their first row
    for (label, split), group in ordered(groups):
        if label == base or (base, split) not in groups:
            continue
        why = unpaired_because(group, groups[(base, split)], GAPS)
        values = [difference(group, groups[(base, split)], name, why) for name in GAPS]
        if why is None:
            over = next((v["over"] for v in values if v), "nothing (no gap on both sides)")
            heading = ("Paired by (training seed, image): the mean of the per-image differences and its standard "
                       "error over %s, by the pooling rule (amortized_pyro.gap.pooling.paired_over_seeds):" % over)
        else:
            heading = "Unpaired (%s), the two standard errors taken as independent:" % why
        seeds = " | %s" % per_seed(group, groups[(base, split)], GAPS[0]) if why is None else ""
        tables.setdefault(heading, []).append("| %s | %s | %s%s |" % (label, split, " | ".join(map(in_errors, values)),
                                                                       seeds))
    lines = ["Each configuration's gaps minus %s's (nats per image ± the standard error; in brackets, the difference "
             "over its standard error), paired where both were measured on the same images of the same training seeds:" % base]
    for heading, rows in tables.items():
        paired = heading.startswith("Paired")
        lines += ["", heading, "", "| configuration | split | " + " | ".join(g.replace("_", " ") for g in GAPS)
                  + (" | amortization gap per training seed |" if paired else " |"), "|---" * (5 + paired) + "|"] + rows
    return "\n".join(lines)
