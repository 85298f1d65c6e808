"""Gap reports measured again, against the ones a commit held (issue 49, item 4): for each comparison folder under
figures/ (FOLDER/runs/DATASET/RUN/gap-{train,test}.json), every report beside the one at the same path in git
revision REV, on the same images, and what stays below zero.

    python experiments/remeasured.py figures/architectures/mlp-none figures/architectures/conv-none --before c77ffc3
    python experiments/remeasured.py figures/architectures/mlp-none=runs/architectures/mlp-none --before c77ffc3
    python experiments/remeasured.py figures/informative --before c77ffc3 --flat figures/informative/gaps/reports

Prints, per folder: each run's final ELBO then and now (the runs are trained again from their seeds, so a
difference means the training changed, not only the measurement); per quantity of the reports' ``per_image``
the largest |now − then| over every (run, split, image), where it is and how many values were compared; and, in the new reports, every per-image
amortization or coupling gap below zero with its run, split, image and value, beside its report's mean of that gap
(a value a few nats below a mean of tens is scoring noise on fresh draws; an amortization gap far below zero means
q* is not the optimum there). Reads committed files only (the new ones once copied under figures/ by the study's
report step, the old ones through ``git show REV:PATH``).
"""
import argparse
import json
import subprocess
from pathlib import Path

from amortized_pyro.report.marks import SIGNED_GAPS

ROOT = Path(__file__).resolve().parents[1]
COMPARED = ("elbo_guide", "elbo_optimized", "elbo_per_theta", "log_px", "log_px_ais", "amortization_gap",
            "coupling_gap", "approximation_gap")


def at_revision(rev, path):
    """The text of ``path`` (relative to the repository) at git revision ``rev``, or None where it had none."""
    done = subprocess.run(["git", "show", "%s:%s" % (rev, path)], cwd=ROOT, capture_output=True, text=True)
    return done.stdout if done.returncode == 0 else None


def final_elbo(text):
    """The last ELBO per image a run's metrics.jsonl (as ``text``) records, or None."""
    rows = [json.loads(line) for line in (text or "").splitlines() if line.strip()]
    rows = [r for r in rows if r.get("elbo_per_obs") is not None]
    return rows[-1]["elbo_per_obs"] if rows else None


def differences(old, new, largest, counts, where):
    """Per quantity of COMPARED, the number of per-image values compared (``counts``) and the largest |now − then|
    (``largest``: (size, what)); a quantity one report has and the other lacks, or of another length, is said."""
    for name in COMPARED:
        a, b = old["per_image"].get(name), new["per_image"].get(name)
        if (a is None) != (b is None) or (a is not None and len(a) != len(b)):
            print("  %s: %s then %s values, now %s" % (where, name, "no" if a is None else len(a),
                                                      "none" if b is None else len(b)))
            continue
        for image, x, y in zip(new["images"], a or (), b or ()):
            counts[name] += 1
            if abs(y - x) > largest[name][0]:
                largest[name] = (abs(y - x), "%s image %d: %.3f -> %.3f" % (where, image, x, y))


def compare(folder, now_dir, rev, flat=None):
    """Prints the comparison for one committed comparison folder (relative to the repository root); ``now_dir``:
    read the new reports from there instead (a study's runs/ folder before its report step copies them);
    ``flat``: the folder where ``rev`` kept the reports flat, as RUN-gap-SPLIT.json (an earlier report layout, no
    metrics)."""
    now_dir = Path(now_dir or folder)
    runs = sorted(now_dir.glob("runs/*/*"))
    if not runs:
        raise SystemExit("remeasured.py: no run directories under %s/runs/" % now_dir)
    print("## %s (%s against %s)" % (folder, now_dir, rev))
    largest, counts = {name: (0.0, None) for name in COMPARED}, {name: 0 for name in COMPARED}
    below = []
    for run_dir in runs:
        rel = Path(folder) / run_dir.relative_to(now_dir)
        then = None if flat else final_elbo(at_revision(rev, "%s/metrics.jsonl" % rel))
        metrics = run_dir / "metrics.jsonl"
        now = final_elbo(metrics.read_text() if metrics.is_file() else None)
        print("%s: final ELBO per image then %s, now %s" % (run_dir.name, then, now))
        for path in sorted(run_dir.glob("gap-*.json")):
            new = json.loads(path.read_text())
            then_path = "%s/%s-%s" % (flat, run_dir.name, path.name) if flat else "%s/%s" % (rel, path.name)
            text = at_revision(rev, then_path)
            if text is None:
                print("  %s: no report at %s" % (path.name, rev))
            elif json.loads(text)["images"] != new["images"]:
                print("  %s: other images than at %s: not compared" % (path.name, rev))
            else:
                differences(json.loads(text), new, largest, counts, "%s %s" % (run_dir.name, new["split"]))
            for name, _ in SIGNED_GAPS:
                values = new["per_image"].get(name) or ()
                mean = new[name]["mean"] if new.get(name) else float("nan")
                below += [(run_dir.name, new["split"], name, image, v, mean)
                          for image, v in zip(new["images"], values) if v < 0]
    for name, (size, where) in largest.items():
        print("largest |now - then| of %s over %d per-image values: %s" % (
            name, counts[name], ("%.3f (%s)" % (size, where) if where else "0.000") if counts[name] else "none compared"))
    print("per-image amortization and coupling gaps below zero now: %d" % len(below))
    for run, split, name, image, value, mean in below:
        print("  %s %s %s image %d: %.2f (that report's mean %.1f)" % (run, split, name, image, value, mean))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", help="comparison folders under figures/; FOLDER=NEW to read the new "
                        "reports from NEW (e.g. runs/architectures/mlp-none) before the report step copies them")
    parser.add_argument("--before", required=True, help="the git revision that held the earlier reports")
    parser.add_argument("--flat", metavar="FOLDER", help="where --before kept the reports flat as RUN-gap-SPLIT.json "
                        "(e.g. figures/informative/gaps/reports), instead of in each FOLDER's run directories")
    args = parser.parse_args()
    found = subprocess.run(["git", "rev-parse", "--verify", "--quiet", args.before + "^{commit}"], cwd=ROOT,
                           capture_output=True)
    if found.returncode != 0:
        raise SystemExit("remeasured.py: --before %s is no commit of this repository" % args.before)
    for folder in args.folders:
        folder, _, now = folder.partition("=")
        compare(folder, now or None, args.before, args.flat)


if __name__ == "__main__":
    main()
