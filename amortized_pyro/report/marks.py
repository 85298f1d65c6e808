"""What the tables and figures write beside a number: its ± (:func:`plus_minus`, and :func:`spread` for which
convention a table or figure follows), why a value is missing, the step-cap marks and their notes, and what
IWAE − AIS says. Nothing here computes a gap or reads a run."""
import math

from amortized_pyro.gap.pooling import gap_over_seeds
from amortized_pyro.models.guides import display_order


def plus_minus(value, fmt="%.1f"):
    """A {"mean", "stderr"} summary, or a (mean, s.e.) pair, as "mean ± s.e." in ``fmt``: n/a where missing
    (None, or a NaN mean), the mean alone where the standard error is NaN (one value); a sign flag in ``fmt``
    (``%+.2f``) signs the mean only."""
    if value is None:
        return "n/a"
    mean, stderr = (value["mean"], value["stderr"]) if isinstance(value, dict) else value
    if math.isnan(mean):
        return "n/a"
    return fmt % mean if math.isnan(stderr) else "%s ± %s" % (fmt % mean, fmt.replace("+", "") % stderr)


def capped_q_star(report):
    """Whether some image's q* stopped at its step cap rather than by the rule (``capped``: how many images): there
    L(q*) and the amortization gap are lower bounds and the coupling gap may read high; reports of earlier
    versions, with one rule for all images and no count, by their step count."""
    if "capped" in report:
        return report["capped"] > 0
    return report["optimizer_steps"] >= report["settings"]["max_steps"]


def capped_q_m(report):
    """Whether some (image, θ) pair's q*_m stopped at its step cap rather than by the rule (``capped_per_theta``:
    how many pairs): there the coupling gap may read low and the approximation gap high. Reports without the
    count had no q*_m of their own."""
    return report.get("capped_per_theta", 0) > 0


def hit_cap(report):
    """Whether some q* or q*_m stopped at its step cap (:func:`capped_q_star`, :func:`capped_q_m`)."""
    return capped_q_star(report) or capped_q_m(report)


def theta_count(report):
    """How many θ draws the report's quantities average over."""
    return report["theta_draws"] if "theta_draws" in report else (
        1 if report["settings"]["theta"] == "mean" else report["settings"]["theta_draws"])


def missing(name, report):
    """Why the report has no value for ``name``."""
    if name in ("coupling_gap", "elbo_per_theta") and not report.get("coupling", True):
        return "n/a (q(θ) is a point mass, or there is no global latent: no coupling term)"
    if name in ("log_px_ais", "iwae_minus_ais"):
        return "n/a (no AIS: --ais-steps 0)"
    return "n/a (no factor for these images)"


def estimators(d, settings):
    """What IWAE − AIS (``d``) says: both are lower bounds of log p(x), the larger the tighter, and the
    approximation gap is measured by IWAE; beyond 3 s.e. apart, which is tighter and what to raise."""
    text = "log p(x) estimators: IWAE − AIS = %.3f ± %.3f nats/image: " % (d["mean"], d["stderr"])
    if (abs(d["mean"]) <= 3 * d["stderr"]) if d["stderr"] == d["stderr"] else d["mean"] == 0:
        return text + "they agree within 3 s.e. (both are lower bounds of log p(x))"
    if d["mean"] < 0:
        return text + ("AIS is the tighter lower bound here, by %.3f nats/image: IWAE with K = %d reads log p(x) low, "
                       "and the approximation gap (measured by IWAE) with it; raise --importance-samples, or read "
                       "log_px_ais" % (-d["mean"], settings["importance_samples"]))
    return text + ("IWAE is the tighter lower bound here, by %.3f nats/image: AIS with %s steps has not converged "
                   "(log_px_ais reads low; the gaps, by IWAE, are not affected); raise --ais-steps"
                   % (d["mean"], settings.get("ais_steps", "its")))


def ordered(groups):
    """:func:`~amortized_pyro.gap.pooling.seed_groups`' items in display order, train before test."""
    return sorted(groups.items(), key=lambda item: (display_order(item[0][0]), item[0][1] != "train"))


# The two caps a row can carry: its mark, which optimization stopped at its step cap, the report's count of them,
# what the count counts (of how many, per report), and what that does to the row's gaps (amortized_pyro.local.gaps)
CAPS = (("†", capped_q_star, "q*", "capped", "images", lambda r: r["n_images"],
         "there L(q*) and the amortization gap are lower bounds, and the coupling gap, measured from q*, may read "
         "high"),
        ("‡", capped_q_m, "q*_m", "capped_per_theta", "(image, θ) pairs",
         lambda r: r["n_images"] * theta_count(r) if r.get("coupling", True) else 0,
         "there the coupling gap may read low and the approximation gap high"))


def cap_count(reports, capped, field, total, unit):
    """"k of n ``unit``": how many of the reports' images (or pairs) their ``field`` counts capped, of ``total``'s;
    with the reports of an earlier version that ``capped`` finds capped but that record no count."""
    uncounted = sum(capped(r) and field not in r for r in reports)
    return "%d of %d %s%s" % (sum(r.get(field, 0) for r in reports), sum(map(total, reports)), unit, "" if not uncounted
                              else ", and %d report%s of an earlier version that did not count them"
                              % (uncounted, "s" * (uncounted > 1)))


def cap_notes(groups):
    """The notes to :func:`format_reports`' marks, one per kind of cap (:data:`CAPS`: † a capped q*, on the
    amortization gap; ‡ a capped q*_m, on the coupling and approximation gaps), each with its counts over the
    table and per marked row (:func:`cap_count`)."""
    lines, reports = [], [r for group in groups.values() for r in group]
    for mark, capped, what, field, unit, total, effect in CAPS:
        rows = [(key, group) for key, group in ordered(groups) if any(capped(r) for r in group)]
        if rows:
            lines.append("\n%s %d of %d rows hold %s optimizations stopped at their step cap, not by the stopping "
                         "rule (%s capped for %s; per row: %s): %s." % (
                             mark, len(rows), len(groups), what, what, cap_count(reports, capped, field, total, unit),
                             "; ".join("%s %s %s" % (label, split, cap_count(group, capped, field, total, unit))
                                       for (label, split), group in rows), effect))
    return lines


# The gaps that are >= 0 in theory (amortized_pyro.local.gaps), whose per-image values can still read below zero
SIGNED_GAPS = (("amortization_gap", "amortization gap"), ("coupling_gap", "coupling gap"))


def with_stderrs(per_image, name):
    """(value, its scoring standard error or None) per image: the report's ``NAME_stderr`` where it kept one
    (:func:`~amortized_pyro.local.estimates.scoring_stderrs`; reports before it did not)."""
    values, stderrs = per_image.get(name) or (), per_image.get(name + "_stderr")
    return zip(values, stderrs or [None] * len(values))


def negatives(label, values, mean, detail=""):
    """"LABEL n of N (lowest v; row mean m DETAIL)" for the values below zero among ``values`` (a row's per-image
    gaps, each ≥ 0 in theory; ``mean``: the row's), or None where none is: the one form of every note that counts
    them (:func:`below_zero_notes`, the held-out table's)."""
    low = [v for v in values if v < 0]
    return "%s %d of %d (lowest %.2f; row mean %.1f%s)" % (label, len(low), len(values), min(low), mean, detail) \
        if low else None


def below_zero_notes(groups):
    """The note that counts the per-image amortization and coupling gaps below zero (each ≥ 0 in theory), over
    the table and per row, with the lowest value beside the row's mean: every L is estimated on fresh θ and z
    draws, so a gap near zero can read a little below it (scoring noise); an amortization gap far below zero
    means q* is not the optimum on that image; where the reports kept each value's scoring standard error, by how
    many of them the values lie below zero (a few: scoring noise). Empty where none is below zero."""
    parts, total, below = [], 0, 0
    for name, words in SIGNED_GAPS:
        rows = []
        for (label, split), group in ordered(groups):
            pairs = [pair for r in group for pair in with_stderrs(r.get("per_image") or {}, name)]
            total, low = total + len(pairs), [(v, se) for v, se in pairs if v < 0]
            below += len(low)
            if low:
                scaled = [-v / se for v, se in low if se]  # how many of its own scoring s.e. each lies below 0
                noise = "; %d of them with their scoring s.e., by at most %.1f s.e." % (len(scaled), max(scaled)) \
                    if scaled else ""
                rows.append(negatives("%s %s" % (label, split), [v for v, _ in pairs],
                                      gap_over_seeds(group, name)["mean"], noise))
        if rows:
            parts.append("%s: %s" % (words, "; ".join(rows)))
    if not below:
        return ["\nNo per-image amortization or coupling gap is below zero (%d values)." % total] if total else []
    return ["\n%d of %d per-image amortization and coupling gaps are below zero (each is ≥ 0 in theory; every L is "
            "estimated on fresh θ and z draws, so a gap near zero can read a little below it, while an amortization "
            "gap far below zero means q* is not the optimum there): %s." % (below, total, "; ".join(parts))]


def spread(counts, several, one):
    """A ± convention that follows the data (``counts``: the seeds each point, a table row or a marker,
    pools): ``several`` where every point pools several, "one seed: ``one``" where each has one, both where
    they are mixed."""
    if min(counts) > 1:
        return several
    return "one seed: %s" % one if max(counts) == 1 else "%s; one seed: %s" % (several, one)
