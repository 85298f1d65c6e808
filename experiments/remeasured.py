"""Gap reports measured again, against the ones a commit held (issue 49, item 4): for each comparison folder under
figures/ (FOLDER/runs/DATASET/RUN/gap-{train,test}.json), every report beside the one at the same path in git
revision REV, on the same images, and what stays below zero.

    python experiments/remeasured.py figures/architectures/mlp-none figures/architectures/conv-none --before c77ffc3
    python experiments/remeasured.py figures/architectures/mlp-none=runs/architectures/mlp-none --before c77ffc3

Prints, per folder: each run's final ELBO then and now (the runs are trained again from their seeds, so a
difference means the training changed, not only the measurement); per quantity of the reports' ``per_image``
the largest |now − then| over every (run, split, image), and where it is; and, in the new reports, every per-image
amortization or coupling gap below zero with its run, split, image and value, beside the row's mean of that gap
(a value a few nats below a mean of tens is scoring noise on fresh draws; an amortization gap far below zero means
q* is not the optimum there). Reads committed files only (the new ones once copied under figures/ by the study's
report step, the old ones through ``git show REV:PATH``).
"""
import argparse
import json
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMPARED = ("elbo_guide", "elbo_optimized", "elbo_per_theta", "log_px", "log_px_ais", "amortization_gap",
            "coupling_gap", "approximation_gap")
SIGNED = ("amortization_gap", "coupling_gap")  # gaps that are >= 0 in theory


def at_revision(rev, path):
    """The text of ``path`` (relative to the repository) at git revision ``rev``, or None where it had none."""
    done = subprocess.run(["git", "show", "%s:%s" % (rev, path)], cwd=ROOT, capture_output=True, text=True)
    return done.stdout if done.returncode == 0 else None


def final_elbo(text):
    """The last ELBO per image a run's metrics.jsonl (as ``text``) records, or None."""
    rows = [json.loads(line) for line in (text or "").splitlines() if line.strip()]
    rows = [r for r in rows if r.get("elbo_per_obs") is not None]
    return rows[-1]["elbo_per_obs"] if rows else None


def compare(folder, now_dir, rev):
    """Prints the comparison for one committed comparison folder; ``now_dir``: read the new reports from there
    instead (a study's runs/ folder before its report step copies them under figures/)."""
    folder = Path(folder)
    now_dir = Path(now_dir or folder)
    print("## %s (%s against %s)" % (folder, now_dir, rev))
    largest = {name: (0.0, None) for name in COMPARED}
    below = []
    for run_dir in sorted(now_dir.glob("runs/*/*")):
        rel = folder.resolve().relative_to(ROOT) / run_dir.relative_to(now_dir)
        then = final_elbo(at_revision(rev, "%s/metrics.jsonl" % rel))
        now = final_elbo((run_dir / "metrics.jsonl").read_text())
        print("%s: final ELBO per image then %s, now %s" % (run_dir.name, then, now))
        for path in sorted(run_dir.glob("gap-*.json")):
            new = json.loads(path.read_text())
            text = at_revision(rev, "%s/%s" % (rel, path.name))
            if text is None:
                print("  %s: no report at %s" % (path.name, rev))
            else:
                old = json.loads(text)
                if old["images"] != new["images"]:
                    print("  %s: DIFFERENT IMAGES" % path.name)
                    continue
                for name in COMPARED:
                    a, b = old["per_image"].get(name), new["per_image"].get(name)
                    for image, x, y in zip(new["images"], a or (), b or ()):
                        if abs(y - x) > largest[name][0]:
                            largest[name] = (abs(y - x), "%s %s image %d: %.3f -> %.3f" % (
                                run_dir.name, new["split"], image, x, y))
            for name in SIGNED:
                values = new["per_image"].get(name) or ()
                mean = new[name]["mean"] if new.get(name) else float("nan")
                below += [(run_dir.name, new["split"], name, image, v, mean)
                          for image, v in zip(new["images"], values) if v < 0]
    for name, (size, where) in largest.items():
        print("largest |now - then| of %s: %.3f%s" % (name, size, " (%s)" % where if where else ""))
    print("per-image values below zero now: %d" % len(below))
    for run, split, name, image, value, mean in below:
        print("  %s %s %s image %d: %.2f (the report's mean %.1f)" % (run, split, name, image, value, mean))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", help="comparison folders under figures/; FOLDER=NEW to read the new "
                        "reports from NEW (e.g. runs/architectures/mlp-none) before the report step copies them")
    parser.add_argument("--before", required=True, help="the git revision that held the earlier reports")
    args = parser.parse_args()
    for folder in args.folders:
        folder, _, now = folder.partition("=")
        compare(folder, now or None, args.before)


if __name__ == "__main__":
    main()
