"""Results as tables: a gap report, gap reports gathered into a table, a capacity sweep, and a comparison's
summary, in plain lines or Markdown; what they write beside each number (±, marks, notes) is
:mod:`amortized_pyro.report.marks`. Nothing here computes or reads a run."""
import math

from amortized_pyro.autoguides.capacity import layers_of

from amortized_pyro.gap.pooling import gap_over_seeds, over_seeds, refinement_over_seeds, seed_groups
from amortized_pyro.inference.evaluation import MSE_KEYS
from amortized_pyro.report.marks import (CAPS, below_zero_notes, cap_notes, capped_q_star, estimators, hit_cap,
                                         missing, ordered, plus_minus, spread, theta_count)
from amortized_pyro.study.comparison import COMPARE_REFINE
from amortized_pyro.study.results import PLATEAU_FRACTION

REFINE_COLUMNS = COMPARE_REFINE[1:]  # refinement steps shown in gap tables: those compare measures
GAP_QUANTITIES = ("elbo_guide", "elbo_optimized", "elbo_per_theta", "log_px", "log_px_ais", "amortization_gap",
                  "coupling_gap", "approximation_gap", "iwae_minus_ais", "elbo_optimized_gaussian", "flow_gain")  # the last two: a flow guide's only


def format_gap(report):
    """One gap report as a small table, nats per image, mean ± standard error over the images."""
    settings = report["settings"]
    point = not report.get("coupling", True)
    lines = ["%s images of %s (%s split), K = %d, theta = %s%s, q* after %d steps" % (
        report["n_images"], report["run"], report["split"], settings["importance_samples"],
        "the point estimate" if point else settings["theta"],
        ", M = %d" % settings["theta_draws"] if settings["theta"] == "sample" and not point else "",
        report["optimizer_steps"]),
        "| quantity | mean (nats/image) | standard error |", "|---|---|---|"]
    for name in GAP_QUANTITIES:
        if name not in report:  # a report of an earlier version, or a flow's quantity in a Gaussian guide's
            continue
        value = report[name]
        lines.append("| %s | %s | %s |" % (name, missing(name, report) if value is None else
                                            "%.3f%s" % (value["mean"], unmeasured(name, report)),
                                            "" if value is None else "%.3f" % value["stderr"]))
    for row in report["refinement"]:
        lines.append("| gap left after %d refinement steps | %.3f | %.3f |" % (row["steps"], row["gap_left"]["mean"],
                                                                            row["gap_left"]["stderr"]))
    lines.append("plug-in MSE with q*: %.4f" % report["optimized_plugin_mse"])
    if report.get("q_family") == "flow":
        lines.append("q* and the q*_m are the best members of the guide's flow family per image (q*: the best of the "
                     "guide's flow, the optimum from it, the optimum from the best Gaussian and that Gaussian; Adam's "
                     "first rate %s for the flows, %s for the Gaussian); elbo_optimized_gaussian is the best Gaussian "
                     "factor's L, flow_gain = L(q*) − it: what the flow family adds at the optimum"
                     % (report["settings"].get("flow_lr", report["settings"]["lr"]), report["settings"]["lr"]))
    if report.get("q_star_from"):  # q* the best of its candidates: how many images each won
        lines.append("q* per image came from: %s" % "; ".join(
            "%s: %d" % item for item in report["q_star_from"].items()))
    if report.get("q_m_star_from"):
        lines.append("q*_m per (image, θ) pair came from: %s" % "; ".join(
            "%s: %d" % item for item in report["q_m_star_from"].items()))
    if "capped" in report:
        lines.append("standard errors over %s" % report["stderr_over"])
        n = report["n_images"]
        lines.append("stopped at the cap of %d steps, not by the rule: %d of %d images' q*, %d of %d (image, θ) "
                     "pairs' q*_m (a capped q* understates the amortization gap and overstates the coupling gap; a capped "
                     "q*_m understates the coupling gap and overstates the approximation gap)" % (
                         report["settings"]["max_steps"], report["capped"], n, report["capped_per_theta"],
                         n * theta_count(report)))
        if report.get("iwae_minus_ais"):
            lines.append(estimators(report["iwae_minus_ais"], settings))
    elif capped_q_star(report):
        lines.append("q* stopped at its cap of %d steps, not by the stopping rule: L(q*) and the amortization gap "
                     "are lower bounds" % report["settings"]["max_steps"])
    return "\n".join(lines)


def unmeasured(name, report):
    """The amortization gap's note where q* kept the guide's factor at its step cap for some images (their gap
    reads 0: unmeasured, issue 71), else nothing."""
    kept = report.get("kept_at_cap")
    if name != "amortization_gap" or not kept:
        return ""
    return " (a lower bound: q* never beat the guide's factor in %d steps for %d of %d images; raise --max-steps)" % (
        report["settings"]["max_steps"], kept, report["n_images"])


def format_reports(reports):
    """Gap reports as one Markdown table, a row per configuration and split, nats per image: with one
    training seed, mean ± standard error over its images; with several, the mean over seeds of the image
    means ± the standard error over seeds and images together (:func:`~amortized_pyro.gap.pooling.pooled`);
    the amortization gap's median and 90th percentile beside it; † on the amortization gap where some q*
    stopped at its step cap, ‡ on the coupling and approximation gaps where some q*_m did (:func:`cap_notes`);
    AIS − IWAE in the last column, pooled from the reports' per-image values; the notes below count the capped
    optimizations and the per-image amortization and coupling gaps below zero (:func:`below_zero_notes`)."""
    lines = ["| configuration | split | seeds | images | L(guide) | L(q*) | log p(x) IWAE | log p(x) AIS "
             "| amortization gap | its median / 90th percentile | coupling gap | approximation gap "
             "| gap left after %s refinement steps | plug-in MSE with q* | AIS − IWAE |"
             % " / ".join(map(str, REFINE_COLUMNS)), "|---" * 15 + "|"]
    groups = seed_groups(reports)
    for (label, split), group in ordered(groups):
        q_star, q_m = (" " + mark if any(capped(r) for r in group) else "" for mark, capped, *_ in CAPS)
        row = {name: gap_over_seeds(group, name) for name in GAP_QUANTITIES}
        refined = {k: refinement_over_seeds(group, k) for k in REFINE_COLUMNS}
        amortization = row["amortization_gap"]
        tail = "%.1f / %.1f" % (amortization["median"], amortization["q90"]) if amortization and "median" in amortization \
            else "n/a"
        ais_over_iwae = row["iwae_minus_ais"] and dict(row["iwae_minus_ais"], mean=-row["iwae_minus_ais"]["mean"])
        lines.append("| %s | %s | %d | %s | %s | %s | %s | %s | %s%s | %s | %s%s | %s%s | %s | %.4f | %s |" % (
            label, split, len(group), "/".join(sorted({str(r["n_images"]) for r in group})), plus_minus(row["elbo_guide"]),
            plus_minus(row["elbo_optimized"]), plus_minus(row["log_px"]), plus_minus(row["log_px_ais"]),
            plus_minus(amortization), q_star, tail, plus_minus(row["coupling_gap"]), q_m,
            plus_minus(row["approximation_gap"]), q_m, " / ".join(plus_minus(refined[k]) for k in REFINE_COLUMNS),
            sum(r["optimized_plugin_mse"] for r in group) / len(group), plus_minus(ais_over_iwae, "%.2f")))
    flows = [(label, split, gap_over_seeds(group, "elbo_optimized_gaussian"), gap_over_seeds(group, "flow_gain"))
             for (label, split), group in ordered(groups) if any(r.get("q_family") == "flow" for r in group)]
    if flows:
        lines.append("\nA flow guide's q* and q*_m are the best members of its flow family per image; beside them the "
                     "best Gaussian factor (L(q*_Gaussian)) and the flow family's rise above it (flow gain = L(q*) − "
                     "L(q*_Gaussian)):\n\n| configuration | split | L(q*_Gaussian) | flow gain |\n|---|---|---|---|")
        lines += ["| %s | %s | %s | %s |" % (label, split, plus_minus(best), plus_minus(gain))
                  for label, split, best, gain in flows]
    lines += cap_notes(groups) + below_zero_notes(groups)
    pooled = "± is the standard error over seeds and images together (a random-effects reading: images nested in " \
             "seeds where each seed had its own images, crossed where all had the same; amortized_pyro.gap.pooling)"
    if any(not r.get("per_image") for r in reports):  # e.g. the rows of a results.jsonl
        pooled = "± is the standard error over the seeds' image means where a report's per-image values are not at " \
                 "hand (a results.jsonl keeps none: the gap tables drawn from the reports pool seeds and images, " \
                 "and give the median and 90th percentile)"
    text = spread([len(group) for group in groups.values()], pooled, "± is the standard error over the images (θ "
                  "draws, z draws and the trained run held fixed)")
    lines.append("\nnats per image; %s. Median and 90th percentile: over every (seed, image) value. A guide without "
                 "a factor for held-out images (F-VI) has no L(guide) on test images (n/a)." % text)
    old = sum("score_draws" not in r for r in reports)
    if old:
        lines.append("%d of %d reports were measured by the old estimator, which scored L(guide) and L(q*) on the "
                     "θ draws q* was fitted on: their amortization gaps read too high and their coupling gaps too "
                     "low, by about the coupling gap / M; measure them again for fresh score draws."
                     % (old, len(reports)))
    before = sum("select_draws" not in r for r in reports)
    if before:
        lines.append("%d of %d reports were measured before q* was the best of its candidates (the guide's factor "
                     "among them): there q* could end below the guide's factor, and their amortization gaps and "
                     "gaps left after refinement may read below 0; measure them again." % (before, len(reports)))
    if any("coupling_gap" not in r for r in reports):
        lines.append("Reports without a coupling gap or AIS (n/a) were measured by an earlier version, whose "
                     "approximation gap holds both the coupling and the approximation gap.")
    return "\n".join(lines)


def format_summary(table, fraction=PLATEAU_FRACTION, failures=()):
    """The summary as a Markdown table (mean ± standard error over seeds; one seed: no ±), with the mean
    image's MSE and the runs that failed under it."""
    def num(value, fmt):
        return "n/a" if math.isnan(value) else fmt % value

    gaps = [(head, key) for head, key in (("gap to F-VI (nats/obs)", "gap_to_fvi"), ("gap (%)", "gap_to_fvi_percent"))
            if any(not math.isnan(r[key]) for r in table)]  # a column n/a in every row is left out, said below
    heads = ["dataset", "configuration", "seeds", "epochs", "steps", "final ELBO / obs (nats)"] + [h for h, _ in gaps] + [
        "train MSE plug-in", "train MSE predictive", "test MSE plug-in", "test MSE predictive", "plug-in ÷ mean image",
        "z informative", "ms / epoch", "iterations to train MSE < %g × mean image's" % fraction]
    lines = ["| %s |" % " | ".join(heads), "|---" * len(heads) + "|"]
    for r in table:
        reached = ("%s (%d/%d seeds)" % (plus_minus(r["iterations_to_leave"], "%.0f"), r["seeds_leaving"],
                                         r["seeds"]) if r["seeds_leaving"] else "not reached")
        lines.append("| %s |" % " | ".join([
            r["dataset"], r["label"], str(r["seeds"]), r["epochs"], r["steps"], plus_minus(r["elbo_per_obs"], "%.2f")]
            + [num(r[key], "%.2f") for _, key in gaps]
            + [plus_minus(r[key], "%.4f") for key in MSE_KEYS[0::2] + MSE_KEYS[1::2]]
            + [num(r["mse_ratio"], "%.2f"), r["uses_z"], plus_minus(r["ms_per_epoch"], "%.0f"), reached]))
    for dataset in sorted({r["dataset"] for r in table}):
        rows = [r for r in table if r["dataset"] == dataset]
        b = rows[0]["mean_image_mse"]
        lines.append("\n%s: N %s training images%s." % (
            dataset, ", ".join(map(str, sorted({n for r in rows for n in r["n_obs"]}))), "; the mean training image, "
            "which ignores z, has train MSE %.4f and test MSE %.4f" % (b["train_mse"], b["test_mse"]) if b else ""))
    if table:
        text = spread([r["seeds"] for r in table], "± is the standard error over seeds of their mean (their "
                      "standard deviation / √seeds; for the iterations, over the seeds that got there)", "no ±")
        lines.append("\nIn this table, %s." % text)
        lines += filter(None, [gap_note(table, [key for _, key in gaps])])
    for f in failures:
        lines.append("\nFAILED, not in the table: %s %s seed %d: %s" % (f["dataset"], f["label"], f["seed"], f["error"]))
    return "\n".join(lines)


def gap_note(table, shown):
    """Why :func:`format_summary`'s gap to F-VI reads n/a: in every row (its column left out), or in some."""
    why = "F-VI's final ELBO is positive (a sharp normal likelihood), where a percentage of |ELBO| means nothing"
    return ("\nNo gap to F-VI: no F-VI run in this comparison." if "gap_to_fvi" not in shown else
            "\nThe gap to F-VI in %% is left out, n/a in every row: %s; it is in nats per observation." % why
            if "gap_to_fvi_percent" not in shown else "\ngap (%%): n/a where %s, or with no F-VI run." % why
            if any(math.isnan(r["gap_to_fvi_percent"]) for r in table) else None)


def capacity_seeds(rows):
    """A capacity sweep's rows by point: {(width, hidden layers, split): [rows, one per encoder seed]}."""
    groups = {}
    for r in rows:
        groups.setdefault((r["width"], layers_of(r), r["split"]), []).append(r)
    return groups


def summary_text(results, fraction=PLATEAU_FRACTION):
    """A comparison's summary.md: the per-configuration table, the failures, and the gap table where gaps
    were measured."""
    text = format_summary(results.summary(fraction), fraction, results.failures)
    if results.gaps:
        text += ("\n\nAmortization and approximation gaps (nats per image, mean ± standard error, over images or "
                 "seeds and images as said below):\n\n" + format_reports(results.gaps))
    return text


def format_capacity(rows):
    """The capacity sweep as a Markdown table: a row per encoder width, hidden layers and split, the amortization
    gap as the mean over seeds of their image means ± the standard error over seeds (one seed: its mean ±
    the standard error over its images)."""
    groups = capacity_seeds(rows)
    lines = ["| width k | hidden layers | split | seeds | images | encoder epochs | encoders at the epoch cap "
             "| amortization gap | coupling gap | approximation gap |", "|---" * 10 + "|"]
    for (width, layers, split), group in sorted(groups.items(), key=lambda item: (item[0][2] != "train", item[0][:2])):
        lines.append("| %d | %d | %s | %d | %d | %.0f | %d | %s | %s | %s |" % (
            width, layers, split, len(group), group[0]["n_images"], sum(r["epochs"] for r in group) / len(group),
            sum(r["encoder_capped"] for r in group), plus_minus(over_seeds([r["amortization_gap"] for r in group])),
            plus_minus(over_seeds([r["coupling_gap"] for r in group])), plus_minus(over_seeds([r["approximation_gap"] for r in group]))))
    capped = sum(hit_cap(r) for r in rows)
    if capped:
        lines.append("\n%d of %d gap measurements had a q* or q*_m stopped at its step cap: there the gaps are lower "
                     "bounds." % (capped, len(rows)))
    lines.append("\nnats per image; %s. The decoder's q(θ) is the trained run's, frozen; only the encoders are "
                 "fresh." % spread([len(g) for g in groups.values()], "± is the standard error over the encoders' "
                                   "seeds of their image means", "± is the standard error over its images"))
    return "\n".join(lines)
