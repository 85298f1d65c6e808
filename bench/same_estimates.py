"""Per-image estimates of one gap measurement (L(q*), the mean L(q*_m; θ_m), IWAE and AIS log p(x)) on a
run's first test images, to check that a change of the gap's code moves no number beyond float error (or,
for AIS, beyond its chains' noise): run it under each checkout and diff.

    PYTHONPATH=/tmp/old python bench/same_estimates.py RUN_DIR old.json
    python bench/same_estimates.py RUN_DIR new.json
    python bench/same_estimates.py --diff old.json new.json

Settings: M = 4, K = 100 importance samples, 20 z draws per estimate, q* capped at 300 steps, AIS 200 steps.
"""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from profile_gap import measure_first  # noqa: E402

KEYS = ("elbo_optimized", "elbo_per_theta", "log_px", "log_px_ais")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs=2, help="RUN_DIR OUT.json, or with --diff OLD.json NEW.json")
    parser.add_argument("--n-images", type=int, default=6)
    parser.add_argument("--diff", action="store_true")
    args = parser.parse_args()
    if args.diff:
        old, new = (json.loads(Path(p).read_text()) for p in args.paths)
        for key in KEYS:
            print("%s: new − old per image %s" % (key, ", ".join("%+.3f" % (b - a) for a, b in zip(old[key], new[key]))))
        return
    from amortized_pyro.local.gaps import GapSettings
    settings = GapSettings(theta_draws=4, importance_samples=100, samples=20, max_steps=300, ais_steps=200)
    report = measure_first(args.paths[0], "test", args.n_images, settings, (), lambda *a: None)
    Path(args.paths[1]).write_text(json.dumps({key: report["per_image"][key] for key in KEYS}) + "\n")


if __name__ == "__main__":
    main()
