"""A finished run's few lines of text (``fit``'s output, :meth:`FitResult.summary
<amortized_pyro.runs.fit.FitResult.summary>`): what was trained, the final ELBO, the MSEs beside the mean image's."""
import math

from amortized_pyro.models.guides import FAMILIES
from amortized_pyro.runs.store import ms_per_epoch


def _fmt(value):
    return "n/a" if value is None or math.isnan(value) else "%.4f" % value


def format_fit(result):
    """A few lines of a :class:`~amortized_pyro.runs.fit.FitResult`: what was trained, the final ELBO, the MSEs."""
    final, c = result.final, result.config
    width = " (width %d)" % c.width if FAMILIES[c.guide].encoder else ""
    lines = ["guide %s%s on %s, %d epochs on %s in %.1f s (%.1f ms/epoch)"
             % (c.guide, width, result.data_source, final["epoch"], result.device, result.train_seconds,
                ms_per_epoch(result.train_seconds, final["epoch"])),
             final_elbo_line(final)]
    if final["epoch"] < c.epochs:
        lines.insert(1, "stopped at epoch %d of at most %d: the objective per image rose by less than %g nats over "
                        "the last %d epochs" % (final["epoch"], c.epochs, c.stop_gain, c.stop_window))
    for split in ("train", "test"):
        lines.append("%-5s MSE       plug-in %s, predictive %s, mean image %s" % (
            split, _fmt(final["%s_plugin_mse" % split]), _fmt(final["%s_predictive_mse" % split]),
            _fmt(result.mean_image_mse["%s_mse" % split])))
    train_mse, mean_mse = final["train_plugin_mse"], result.mean_image_mse["train_mse"]
    if train_mse is not None and mean_mse is not None and train_mse > mean_mse:  # NaN compares False: no line
        lines.append("                (the reconstructions are further from the images than their mean image is: "
                     "expected early, as every guide first sits near the mean image in the studies' regime "
                     "(docs/results.md); train longer)")
    if result.out:
        lines.append("results in      %s" % result.out)
    return "\n".join(lines)


def final_elbo_line(final):
    """The summary's ELBO line; a run that ended inside its KL warm-up has no ELBO, and says so."""
    if math.isnan(final["elbo"]) and final.get("kl_scale", 1.0) < 1:
        return ("final ELBO      none: the run ended inside its KL warm-up (scale %.2f < 1), where the objective "
                "(%.1f nats) is not the ELBO; train for more epochs than the warm-up" % (final["kl_scale"],
                                                                                         final["objective"]))
    return "final ELBO      %.1f nats in total, %.2f nats per observation" % (final["elbo"], final["elbo_per_obs"])
