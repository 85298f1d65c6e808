"""The mean and its standard error, the one summary every table and report gives ("mean ± s.e.")."""
import math
import statistics


def mean_stderr(values):
    """(mean, standard error of the mean: sd / √n, sd with n − 1) of the values that are not None or NaN; the
    standard error is NaN with one value (no spread to estimate), both are NaN with none."""
    values = [v for v in values if v is not None and not math.isnan(v)]
    if not values:
        return (math.nan, math.nan)
    if len(values) == 1:
        return (values[0], math.nan)
    return (statistics.fmean(values), statistics.stdev(values) / math.sqrt(len(values)))
