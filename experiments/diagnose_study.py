"""Which per-image score ranks an encoder's amortization gaps, and how much of SA-VI's gain refining only the worst
images keeps (issue 62), from experiments/diagnose-study.sh's runs:

    python experiments/diagnose_study.py measure runs/diagnose-study/avi64-seed* --out figures/diagnose
    python experiments/diagnose_study.py table figures/diagnose/records.jsonl --out figures/diagnose

``measure`` reads each run's gap reports (gap-train.json, gap-test.json: the amortization gap per image and the gap
left after 5, 20 and 100 Adam steps) and its diagnose.json (the scores, on the same images), measures SA-VI's
``share`` option directly (the run's encoder refined by 20 Adam steps on the worst 10 / 25 / 50 % by the spread of
8 log weights, or on all of them: its local ELBO on those images and the gap's score draws, and the seconds its
factor takes on a training batch's 250 images), and writes OUT/records.jsonl, one record per run and split; ``table`` makes OUT/ranking.md,
OUT/partial.md and OUT/partial.png from the records alone.
"""
import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch
from scipy import stats

from amortized_pyro.autoguides.gap import guide_factor, theta_draws
from amortized_pyro.gap.measure import guide_elbos
from amortized_pyro.local.gaps import GapSettings
from amortized_pyro.models.guides import make_guide
from amortized_pyro.models.local_posterior import ModelPosterior
from amortized_pyro.runs.fit import finished_run

SCORES = {"khat": "Pareto k-hat (2,000 z × 4 θ draws)", "spread": "spread of log w (2,000 × 4)",
          "spread_8": "spread of log w (8 × 4)", "neg_elbo": "− local ELBO (2,000 × 4)"}
PASSES = {"khat": 8000, "spread": 8000, "spread_8": 32, "neg_elbo": 8000}  # decoder passes per image
SHARES = (0.1, 0.25, 0.5)
STEPS = (5, 20, 100)
OPTION_STEPS = 20
TIMED = 250  # images the option's time is measured on: the preset's batch
GAP_SETTINGS = dict(theta_draws=4, score_draws=32, importance_samples=1000, ais_steps=200, max_steps=1500)


def option(result, data, split, images, gap_seed):
    """SA-VI's share option on the images: {share: (mean L_n gain over the encoder's factor, seconds)}."""
    x = (data.train if split == "train" else data.test)[images]
    idx = images if split == "train" else None
    settings = GapSettings(seed=0, **GAP_SETTINGS)
    pool = data.train if split == "train" else data.test
    timed = torch.arange(min(TIMED, len(pool)))  # the cost on a training batch's size: 20 images time the overhead
    timed_x, timed_idx = pool[timed], (timed if split == "train" else None)
    base = guide_elbos(result.model, result.guide, x, idx, settings, gap_seed)[0]["guide"]
    found = {}
    for share in SHARES + (1.0,):
        guide = make_guide("semi-amortized", result.model, width=result.config.width, refine_steps=OPTION_STEPS,
                           refine_share=share, encoder_layers=result.config.encoder_layers)
        guide.load_state_dict(result.guide.state_dict())
        elbo = guide_elbos(result.model, guide, x, idx, settings, gap_seed)[0]["guide"]
        found[share] = ((elbo - base).mean().item(),
                        factor_seconds(result.model, guide, timed_x, timed_idx, settings, gap_seed))
    return found


def factor_seconds(model, guide, x, idx, settings, seed, repeats=3):
    """The fastest of ``repeats`` computations of the guide's factor on the images at the gap's θ draws (after one
    to warm up): the refinement's cost with its scores, without the local ELBO's scoring."""
    posterior = ModelPosterior(model, guide, x, idx)
    fit, _ = theta_draws(posterior, guide, settings, seed, selection=False)
    seconds = []
    for _ in range(repeats + 1):
        began = time.perf_counter()
        guide_factor(posterior, guide, fit.at("guide"))
        seconds.append(time.perf_counter() - began)
    return min(seconds[1:])


def measure(runs, out):
    records = []
    for run in runs:
        diagnosis = json.loads((Path(run) / "diagnose.json").read_text())
        result, data = finished_run(run, log=lambda line: None)
        for split in ("train", "test"):
            gap = json.loads((Path(run) / ("gap-%s.json" % split)).read_text())
            found = diagnosis["splits"][split]
            if found["images"] != gap["images"]:
                sys.exit("%s %s: diagnose.json and gap-%s.json hold other images" % (run, split, split))
            images = torch.tensor(gap["images"])
            rows = {0: gap["per_image"]["amortization_gap"],
                    **{row["steps"]: row["per_image"] for row in gap["refinement"]}}
            records.append({
                "run": str(run), "seed": gap["seed"], "split": split, "images": gap["images"],
                "gap": {str(k): rows[k] for k in (0,) + STEPS},
                "scores": {"khat": found["guide"]["khat"], "spread": found["guide"]["spread"],
                           "spread_8": found["guide"]["spread_8"], "neg_elbo": [-v for v in found["guide"]["elbo"]]},
                "khat_refined": {**{str(k): found["refined-%d" % k]["khat"] for k in STEPS},
                                 "q*": found["q*"]["khat"]},
                "calibration_p": diagnosis["calibration"]["p_value"],
                "calibration_outside": float(np.isin(np.asarray(diagnosis["calibration"]["ranks"]),
                                                     (0, diagnosis["calibration"]["draws"])).mean()),
                "option": {str(s): v for s, v in option(result, data, split, images, gap["gap_seed"]).items()}})
    out.mkdir(parents=True, exist_ok=True)
    (out / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    table(records, out)


def mean_se(values):
    values = np.asarray(values, dtype=float)
    return values.mean(), values.std(ddof=1) / math.sqrt(len(values)) if len(values) > 1 else float("nan")


def kept(record, score, share, steps):
    """The share of the gap closed by refining all images that refining the worst ``share`` by ``score`` keeps."""
    g0, gk = np.asarray(record["gap"]["0"]), np.asarray(record["gap"][str(steps)])
    gain = g0 - gk
    key = gain if score == "oracle" else np.asarray(record["scores"][score])
    chosen = np.argsort(-key, kind="stable")[:math.ceil(share * len(gain))]
    return gain[chosen].sum() / gain.sum()


def fewer(record, few, many):
    """The share of ``many`` steps' gain on every image that ``few`` steps on every image keep."""
    g0 = np.asarray(record["gap"]["0"])
    return (g0 - np.asarray(record["gap"][str(few)])).sum() / (g0 - np.asarray(record["gap"][str(many)])).sum()


def table(records, out):
    splits = ("train", "test")
    by = {s: [r for r in records if r["split"] == s] for s in splits}
    seeds = sorted({r["seed"] for r in records})
    command = "Command: `python experiments/diagnose_study.py table figures/diagnose/records.jsonl --out figures/diagnose`"
    lines = [command, "",
             "Spearman rank correlation of each score with the amortization gap per image (20 images per split and "
             "seed; ± the standard error over seeds %s), and what the score costs (decoder passes per image)."
             % ", ".join(map(str, seeds)), "",
             "| score | passes | train | held out |", "|---|---|---|---|"]
    for score, name in SCORES.items():
        cells = ["%.2f ± %.2f" % mean_se([stats.spearmanr(r["scores"][score], r["gap"]["0"])[0] for r in by[s]])
                 for s in splits]
        lines.append("| %s | %d | %s |" % (name, PASSES[score], " | ".join(cells)))
    lines += ["", "k̂ of the encoder's factor and of the factor after K Adam steps from it (the median over each run's "
              "20 images, then the mean ± s.e. over seeds), and the share of images with k̂ below 0.7.", "",
              "| factor | train: median k̂ | train: below 0.7 | held out: median k̂ | held out: below 0.7 |",
              "|---|---|---|---|---|"]
    for k in (0,) + STEPS + ("q*",):
        values = {s: [np.asarray(r["scores"]["khat"] if k == 0 else r["khat_refined"][str(k)]) for r in by[s]]
                  for s in splits}
        cells = ["%.2f ± %.2f | %.0f %%" % (*mean_se([np.median(v) for v in values[s]]),
                                            100 * np.mean(np.concatenate(values[s]) < 0.7)) for s in splits]
        name = "encoder" if k == 0 else "q* (the gap's optimum from it)" if k == "q*" else "%d steps" % k
        lines.append("| %s | %s |" % (name, " | ".join(cells)))
    lines += ["", "Calibration through the encoder (500 images simulated from each fitted model, 10 θ draws): p = %s "
              "(seeds %s); the true coordinate below or above all 99 draws of q in %s of the ranks (2 %% if "
              "calibrated)." % (", ".join("%.2g" % r["calibration_p"] if r["calibration_p"] > 0 else "< 1e-300"
                                          for r in by["train"]), ", ".join(map(str, seeds)),
                                ", ".join("%.0f %%" % (100 * r["calibration_outside"]) for r in by["train"]))]
    (out / "ranking.md").write_text("\n".join(lines) + "\n")
    lines = [command, "",
             "Share of the gap closed by refining every image (K Adam steps from the encoder's factor, the gap's "
             "refinement rows) kept by refining only the worst share by each score (± s.e. over seeds %s; oracle: "
             "the images of largest gain themselves; a random choice keeps the share itself on average)."
             % ", ".join(map(str, seeds)), "",
             "| K | score | split | " + " | ".join("worst %d %%" % (100 * p) for p in SHARES) + " |",
             "|---|---|---|" + "---|" * len(SHARES)]
    for steps in STEPS:
        for score in list(SCORES) + ["oracle"]:
            for s in splits:
                cells = ["%.2f ± %.2f" % mean_se([kept(r, score, p, steps) for r in by[s]]) for p in SHARES]
                lines.append("| %d | %s | %s | %s |" % (steps, score, s, " | ".join(cells)))
    lines += ["", "Against refining every image with fewer steps: the share of K steps' gain that K' steps on every "
              "image keep, at K'/K of the steps (± s.e. over seeds).", "", "| K' of K | steps' cost | train | held out |",
              "|---|---|---|---|"]
    for few, many in ((5, 20), (20, 100)):
        cells = ["%.2f ± %.2f" % mean_se([fewer(r, few, many) for r in by[s]]) for s in splits]
        lines.append("| %d of %d | %.2f | %s |" % (few, many, few / many, " | ".join(cells)))
    lines += ["", "SA-VI's share option itself (K = %d, one z draw a step, worst by the spread of 8 log weights at "
              "each of 4 θ draws): its local ELBO's mean gain over the encoder's factor as a share of refining every "
              "image's, and the seconds its factor took on the split's first %d images (a training batch; scores "
              "included; the fastest of 3) as a share of refining every image's (one torch thread)."
              % (OPTION_STEPS, TIMED), "", "| split | share | gain kept | time |", "|---|---|---|---|"]
    for s in splits:
        for p in SHARES:
            gains = [r["option"][str(p)][0] / r["option"]["1.0"][0] for r in by[s]]
            times = [r["option"][str(p)][1] / r["option"]["1.0"][1] for r in by[s]]
            lines.append("| %s | %d %% | %.2f ± %.2f | %.2f ± %.2f |" % (s, 100 * p, *mean_se(gains), *mean_se(times)))
    (out / "partial.md").write_text("\n".join(lines) + "\n")
    figure(by, out / "partial.png")


def figure(by, path):
    from amortized_pyro.report.style import save_figure, subplots
    fig, axes = subplots(1, 2, figsize=(10, 3.6), sharey=True)
    for ax, split in zip(axes, by):
        for score in list(SCORES) + ["oracle"]:
            shares = (0.0,) + SHARES + (1.0,)
            values = [[0.0 if p == 0 else kept(r, score, p, 20) for r in by[split]] for p in shares]
            means = [np.mean(v) for v in values]
            ax.errorbar(shares, means, yerr=[mean_se(v)[1] if p not in (0, 1) else 0 for v, p in zip(values, shares)],
                        marker="o", capsize=2, label=SCORES.get(score, "oracle (largest gain)"))
        ax.plot([0, 1], [0, 1], color="grey", linestyle=":", label="random (expected)")
        few = [fewer(r, 5, 20) for r in by[split]]
        ax.errorbar([0.25], [np.mean(few)], yerr=[mean_se(few)[1]], marker="*", markersize=12, color="black",
                    linestyle="none", label="every image, 5 steps (x: its share of the steps)")
        ax.set_title("%s images: K = 20 steps" % ("held-out" if split == "test" else "training"))
        ax.set_xlabel("share of images refined (the worst by each score)")
    axes[0].set_ylabel("share of 20 steps' gain on every image")
    axes[1].legend(fontsize=7, loc="lower right")
    save_figure(fig, path)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    m = commands.add_parser("measure", help="records from finished runs, then the tables")
    m.add_argument("runs", nargs="+")
    m.add_argument("--out", type=Path, required=True)
    t = commands.add_parser("table", help="the tables and figure from the records alone")
    t.add_argument("records", type=Path)
    t.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.command == "measure":
        measure(args.runs, args.out)
    else:
        table([json.loads(line) for line in args.records.read_text().splitlines() if line], args.out)


if __name__ == "__main__":
    main()
