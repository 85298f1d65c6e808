"""Two gap reports of one run and split that differ in q*'s step cap: per image, the second minus the first,
mean ± standard error over the images (and the extremes), for L(guide) (untouched by the cap: its change
is the Monte Carlo noise of the estimates alone; absent for F-VI's test images), L(q*) and E_m L(q*_m).

    python experiments/archive/cap_check.py RUN/gap-test.json runs/cap-check/NAME.json
"""
import json
import sys

from amortized_pyro.report.marks import plus_minus
from amortized_pyro.support.stats import mean_stderr

KEYS = ("elbo_guide", "elbo_optimized", "elbo_per_theta")


def main(first, second):
    a, b = (json.load(open(path)) for path in (first, second))
    for report, path in ((a, first), (b, second)):
        print("%s: cap %d steps, capped q* %d of %d images, capped q*_m %d of %d pairs"
              % (path, report["settings"]["max_steps"], report["capped"], report["n_images"],
                 report["capped_per_theta"], report["n_images"] * report["settings"]["theta_draws"]))
    for key in KEYS:
        if a["per_image"][key] is None:
            continue
        d = [y - x for x, y in zip(a["per_image"][key], b["per_image"][key])]
        print("%-15s second − first: %s nats per image (min %+.2f, max %+.2f, %d images)"
              % (key, plus_minus(mean_stderr(d), "%+.2f"), min(d), max(d), len(d)))


if __name__ == "__main__":
    main(*sys.argv[1:3])
