"""Where a capacity sweep stands: the table and figure of the encoders finished so far in a capacity.jsonl
(the capacity command writes them only once the whole sweep is done); with --own, the frozen run's own encoder
(trained with the decoder) beside every fresh encoder measured on the same images.

    python experiments/capacity_status.py runs/capacity/capacity.jsonl --out figures/capacity \
        [--own RUN/gap-train.json --own RUN/gap-test.json]

--own: a gap report of the run whose q(θ) the sweep froze (the gap seed picks the images: a fresh encoder whose
gap seed was the report's was measured on the report's images; the ± of both is over those images). Each is copied
into --out as frozen-run-gap-SPLIT.json beside the copy of capacity.jsonl, so that the table can be drawn again
from --out alone.
"""
import argparse
import json
import shutil
import sys
from pathlib import Path

from amortized_pyro.autoguides.capacity import layers_of
from amortized_pyro.report.gap_figures import capacity_figure
from amortized_pyro.report.marks import plus_minus
from amortized_pyro.report.tables import format_capacity


def on_the_same_images(rows, reports):
    """Per --own report (one per split): its amortization gap, then every fresh encoder's measured on the same
    images of that split (the sweep's row whose image list is the report's)."""
    lines = ["| split | images | encoder | encoder seed | amortization gap (± over the images) |", "|---" * 5 + "|"]
    for report in reports:
        same = sorted((r for r in rows if r["split"] == report["split"] and r.get("images") == report["images"]),
                      key=lambda r: (r["width"], layers_of(r), r["seed"]))
        lines.append("| %s | %d | the run's own (%s, trained with the decoder) | | %s |" % (
            report["split"], len(report["images"]), report["label"], plus_minus(report["amortization_gap"])))
        lines += ["| %s | %d | fresh, k = %d, %d hidden layer%s | %d | %s |" % (
            r["split"], len(r["images"]), r["width"], layers_of(r), "" if layers_of(r) == 1 else "s", r["seed"],
            plus_minus(r["amortization_gap"])) for r in same]
        if not same:
            lines.append("| %s | | no fresh encoder was measured on these images | | |" % report["split"])
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rows")
    parser.add_argument("--out", required=True)
    parser.add_argument("--own", action="append", default=[], help="a gap report of the frozen run (repeatable)")
    args = parser.parse_args()
    try:
        rows = [json.loads(line) for line in Path(args.rows).read_text().splitlines() if line.strip()]
        reports = [json.loads(Path(path).read_text()) for path in args.own]
    except (OSError, ValueError) as e:
        sys.exit("capacity_status.py: cannot read %s" % e)
    for path, report in zip(args.own, reports):
        if not isinstance(report, dict) or any(key not in report for key in ("split", "label", "images",
                                                                             "amortization_gap")):
            sys.exit("capacity_status.py: %s is not a gap report (split, label, images, amortization_gap)" % path)
    splits = [report["split"] for report in reports]
    if len(set(splits)) < len(splits):
        sys.exit("capacity_status.py: two --own reports of one split (%s): give one per split" % ", ".join(splits))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    copies = [(args.rows, out / "capacity.jsonl")] + [
        (path, out / ("frozen-run-gap-%s.json" % report["split"])) for path, report in zip(args.own, reports)]
    for source, copy in copies:
        if Path(source).resolve() != copy.resolve():  # made again in place: nothing to copy
            shutil.copy(source, copy)
    table = format_capacity(rows)
    seeds = sorted({(r["seed"], r["gap_seed"]) for r in rows if "gap_seed" in r})
    if seeds:
        table += ("\n\nImages: encoder seed → the gap seed that drew its images: %s (one image set per gap seed)."
                  % ", ".join("%d → %d" % pair for pair in seeds))
    if reports:
        table += ("\n\nOn the same images: the frozen run's own encoder (its gap reports) and each fresh encoder "
                  "whose gap seed drew those images, nats per image (not paired by image: capacity.jsonl keeps "
                  "no per-image values):\n\n" + on_the_same_images(rows, reports))
    # the command that draws this table again from --out's copies alone (what is committed)
    command = " ".join(["python experiments/capacity_status.py", str(copies[0][1]), "--out", args.out]
                       + ["--own %s" % copy for _, copy in copies[1:]])
    (out / "capacity.md").write_text("Command: %s (%d encoders)\n\n%s\n" % (command, len(rows) // 2, table))
    capacity_figure(rows, out / "capacity.png")
    print(table)


if __name__ == "__main__":
    main()
