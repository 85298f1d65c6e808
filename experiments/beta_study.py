"""The β study (issue 50, item 5): the effect of β on a β-VAE's fit, its code and its amortization gap, on images
whose generative factors are known (the synthetic shapes, amortized_pyro.runs.shapes) and on MNIST.

Grid (experiments/beta-study.toml: Bernoulli likelihood, binary images, z 10, A-VI k = 64, 200 epochs of
N 4,000 / 1,000): β ∈ {0.25, 0.5, 1, 2, 4, 8} with the standard decoder (θ point-estimated) and β ∈ {1, 4} with the
Bayesian one, seeds 0, 1, 2, on each data set. Each run in runs/beta/DATASET-DECODER-bBETA-sSEED, then its gap on
20 test images (`gap --split test --n-images 20`). Resumable: the same command again.

    python experiments/make_shapes.py --out data/shapes.npz --n-train 4000 --n-test 1000 --seed 0
    python experiments/beta_study.py run --shapes data/shapes.npz --mnist ../shared/data/mnist
        [--datasets shapes,mnist] [--decoders standard,bayesian] [--betas 0.25,0.5]   (a part of the grid, e.g.
        one per core)
    python experiments/beta_study.py report runs/beta --shapes data/shapes.npz --out figures/beta
    python experiments/beta_study.py table figures/beta/beta.jsonl --out figures/beta   (beta.md and beta.png again
        from the report's measured rows, without the runs)

Per run, the report computes: the ELBO per image at β = 1 (the true bound: the run's last evaluation, which
estimates it separately when β ≠ 1), the KL of q(z | x) from p(z) in closed form, ½ Σ (μ² + σ² − 1 − log σ²),
averaged over the run's training images, the reconstruction term E_q[log p(x | z)] = ELBO + KL (standard decoder
only: with the Bayesian one the ELBO also holds KL(q(θ) ‖ p(θ)) / N), active units and, on the shapes, the Mutual
Information Gap against the four factors (amortized_pyro.inference.disentanglement, posterior means of the shapes
file's training images), and the amortization gap of its report. Mean ± s.e. over seeds. Each run's small files
(config, metrics, summary, gap report) are copied under OUT/runs/. Figures: each quantity
against β, and latent traversals (seed 0, β = 1 and 4: one test image's posterior mean, each dimension set to
−3 … 3, decoded at q(θ)'s mean; dimensions by decreasing KL).
"""
import argparse
import json
import math
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

from amortized_pyro.inference.disentanglement import active_units, mutual_information_gap
from amortized_pyro.inference.evaluation import factor
from amortized_pyro.runs.fit import load_run
from amortized_pyro.runs.images import prepare_data
from amortized_pyro.support.jsonio import read_jsonl

BETAS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
BAYESIAN_BETAS = (1.0, 4.0)
SEEDS = (0, 1, 2)
PRESET = "experiments/beta-study.toml"
SMALL_FILES = ("config.json", "metrics.jsonl", "summary.json", "gap-test.json")


def grid():
    """(dataset, decoder, β, seed) of every run."""
    for dataset in ("shapes", "mnist"):
        for decoder, betas in (("standard", BETAS), ("bayesian", BAYESIAN_BETAS)):
            for beta in betas:
                for seed in SEEDS:
                    yield dataset, decoder, beta, seed


def run_name(dataset, decoder, beta, seed):
    return "%s-%s-b%g-s%d" % (dataset, decoder, beta, seed)


def python(*args):
    done = subprocess.run([sys.executable, "-m", "amortized_pyro", *args])
    if done.returncode:
        sys.exit("beta_study.py: `%s` failed (exit %d)" % (" ".join(args), done.returncode))


def names(*known):
    """An argparse type: comma-separated names, each one of ``known`` (a typo is refused, not a part that runs
    nothing)."""
    def parse(value):
        chosen = value.split(",")
        unknown = [v for v in chosen if v not in known]
        if unknown:
            raise argparse.ArgumentTypeError("unknown %s (choose from %s)" % (", ".join(unknown), ", ".join(known)))
        return chosen
    return parse


def run(args):
    data = {"shapes": args.shapes, "mnist": args.mnist}
    for dataset, decoder, beta, seed in grid():
        if dataset not in args.datasets or decoder not in args.decoders or (args.betas and beta not in args.betas):
            continue
        out = args.runs / run_name(dataset, decoder, beta, seed)
        if not (out / "summary.json").exists():
            if out.exists():
                python("fit", "--resume", str(out), "--no-progress")
            else:
                python("fit", "--config", PRESET, "--guide", "amortized", "--width", "64", "--dataset", data[dataset],
                       "--kl-weight", str(beta), "--seed",
                       str(seed), "--decoder-prior", "none" if decoder == "standard" else "normal", "--no-progress",
                       "--out", str(out))
        if not (out / "gap-test.json").exists():
            python("gap", str(out), "--split", "test", "--n-images", "20", "--out", str(out / "gap-test.json"),
                   "--no-progress")


@torch.no_grad()
def codes(result, x):
    """(μ, σ) of q(z | x) for images x, in chunks."""
    parts = [factor(result.guide, chunk) for chunk in x.split(1000)]
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


def measure(run_dir, shapes):
    """The report's quantities of one finished run (module docstring)."""
    result = load_run(run_dir)
    config = result.config
    data = prepare_data(config, log=lambda *a: None)
    mu, sigma = codes(result, data.train)
    kl_per_dim = 0.5 * (mu ** 2 + sigma ** 2 - 1 - 2 * sigma.log()).mean(0)
    elbo = result.final["elbo_per_obs"]
    row = {"elbo": elbo, "kl": float(kl_per_dim.sum()), "kl_per_dim": kl_per_dim.tolist(),
           "reconstruction": elbo + float(kl_per_dim.sum()) if config.decoder_prior == "none" else None,
           "active_units": active_units(mu.numpy())[0]}
    if Path(config.dataset).resolve() == Path(shapes).resolve():
        with np.load(shapes) as arrays:
            images, factors = arrays["train"], arrays["train_factors"]
        x = torch.from_numpy(images.reshape(len(images), -1).astype(np.float32) / 255.0)
        row["mig"] = mutual_information_gap(codes(result, x)[0].numpy(), factors)[0]
    gap = json.loads((run_dir / "gap-test.json").read_text()) if (run_dir / "gap-test.json").exists() else None
    row["amortization_gap"] = gap["amortization_gap"]["mean"] if gap else None
    return row, result, data


def mean_se(values):
    values = [v for v in values if v is not None and math.isfinite(v)]
    if not values:
        return None, None
    return statistics.fmean(values), (statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else None)


def cell(values, digits=1):
    m, se = mean_se(values)
    if m is None:
        return "n/a"
    return ("%.*f" % (digits, m)) + ("" if se is None else " ± %.*f" % (digits, se))


QUANTITIES = (("elbo", "ELBO / image (β = 1)", 1), ("reconstruction", "E_q log p(x∣z)", 1), ("kl", "KL(q(z∣x) ‖ p(z))", 1),
              ("active_units", "active units", 1), ("mig", "MIG", 3), ("amortization_gap", "amortization gap (test)", 1))


def table(rows):
    lines = ["| data | decoder | β | seeds | " + " | ".join(title for _, title, _ in QUANTITIES) + " |",
             "|---|---|---|---|" + "---|" * len(QUANTITIES)]
    keys = sorted({(r["dataset"], r["decoder"], r["beta"]) for r in rows}, key=lambda k: (k[0], k[1] != "standard", k[2]))
    for key in keys:
        group = [r for r in rows if (r["dataset"], r["decoder"], r["beta"]) == key]
        lines.append("| %s | %s | %g | %d | " % (*key, len(group)) + " | ".join(
            cell([r.get(name) for r in group], digits) for name, _, digits in QUANTITIES) + " |")
    return "\n".join(lines) + "\n"


def figure(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(2, 3, figsize=(13, 7))
    for ax, (name, title, _) in zip(axes.flat, QUANTITIES):
        for dataset, colour in (("shapes", "C0"), ("mnist", "C1")):
            for decoder, style in (("standard", "-o"), ("bayesian", "s")):
                betas = sorted({r["beta"] for r in rows if (r["dataset"], r["decoder"]) == (dataset, decoder)})
                stats = [mean_se([r.get(name) for r in rows if (r["dataset"], r["decoder"], r["beta"]) == (dataset, decoder, b)])
                         for b in betas]
                points = [(b, m, se or 0.0) for b, (m, se) in zip(betas, stats) if m is not None]
                if points:
                    b, m, se = zip(*points)
                    ax.errorbar(b, m, yerr=se, fmt=style, color=colour, capsize=3, mfc="none" if decoder == "bayesian" else colour,
                                label="%s, %s decoder" % (dataset, decoder))
        ax.set_xscale("log", base=2)
        ax.set_xlabel("β (KL weight in training)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=8)
    fig.suptitle("β-VAE, A-VI k = 64: mean ± s.e. over seeds (beta.md: how many); the ELBO is the true bound (β = 1) "
                 "at every β")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def traversal(runs, path, title):
    """Rows: latent dimensions by decreasing KL; columns: that dimension set to −3 … 3; one panel per run."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    values = torch.linspace(-3, 3, 9)
    fig, axes = plt.subplots(1, len(runs), figsize=(5 * len(runs), 6))
    for ax, (label, (result, data, kl)) in zip(np.atleast_1d(axes), runs.items()):
        mu = codes(result, data.test[:1])[0][0]
        order = np.argsort(kl)[::-1]
        theta = result.guide.global_mean()
        side = int(math.isqrt(data.test.shape[1]))
        rows = []
        for d in order:
            z = mu.repeat(len(values), 1)
            z[:, d] = values
            rows.append(torch.cat(list(result.model.mean_image(z, theta).reshape(-1, side, side)), dim=1))
        ax.imshow(torch.cat(rows).numpy(), cmap="gray", vmin=0, vmax=1)
        ax.set_yticks([side * (i + 0.5) for i in range(len(order))])
        ax.set_yticklabels(["z%d (KL %.2f)" % (d, kl[d]) for d in order], fontsize=7)
        ax.set_xticks([side * (i + 0.5) for i in range(len(values))])
        ax.set_xticklabels(["%.1f" % v for v in values], fontsize=7)
        ax.set_xlabel("value of the dimension (others at the image's posterior mean)")
        ax.set_title(label)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_table(rows, source, out):
    """beta.md (its command first: the table is made again from ``source``, the committed beta.jsonl) and beta.png."""
    (out / "beta.md").write_text("Command: python experiments/beta_study.py table %s --out %s\n\n" % (source, out)
                                 + table(rows))
    figure(rows, out / "beta.png")


def redraw(args):
    """The table and figure again from a beta.jsonl (the report's measured rows), without the runs."""
    if not args.rows.is_file():
        sys.exit("beta_study.py: no %s (the report writes it)" % args.rows)
    args.out.mkdir(parents=True, exist_ok=True)
    write_table(read_jsonl(args.rows), args.rows, args.out)
    print("wrote beta.md and beta.png into %s" % args.out)


def report(args):
    args.out.mkdir(parents=True, exist_ok=True)
    rows, kept = [], {}
    for dataset, decoder, beta, seed in grid():
        run_dir = args.runs / run_name(dataset, decoder, beta, seed)
        if not (run_dir / "summary.json").exists():
            continue
        row, result, data = measure(run_dir, args.shapes)
        kept_files = args.out / "runs" / run_dir.name  # the run's small files, so the table can be checked without runs/
        kept_files.mkdir(parents=True, exist_ok=True)
        for name in SMALL_FILES:
            if (run_dir / name).exists():
                shutil.copyfile(run_dir / name, kept_files / name)
        rows.append(dict(row, dataset=dataset, decoder=decoder, beta=beta, seed=seed, run=str(run_dir)))
        if seed == 0 and decoder == "standard" and beta in (1.0, 4.0):
            kept.setdefault(dataset, {})["β = %g" % beta] = (result, data, np.array(row["kl_per_dim"]))
    if not rows:
        sys.exit("beta_study.py: no finished run under %s" % args.runs)
    (args.out / "beta.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    write_table(rows, args.out / "beta.jsonl", args.out)
    for dataset, runs in kept.items():
        traversal(runs, args.out / ("traversal-%s.png" % dataset),
                  "%s: latent traversals of one test image, standard decoder, seed 0" % dataset)
    print("wrote beta.jsonl, beta.md, beta.png and %d traversal figures into %s" % (len(kept), args.out))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    go = sub.add_parser("run", help="train the grid and measure each run's gap (resumable)")
    go.add_argument("--shapes", required=True, help="the shapes' .npz (experiments/make_shapes.py)")
    go.add_argument("--mnist", required=True, help="MNIST: a folder of IDX files or a dataset name")
    go.add_argument("--runs", type=Path, default=Path("runs/beta"))
    go.add_argument("--datasets", type=names("shapes", "mnist"), default=["shapes", "mnist"],
                    help="comma-separated: which data sets' runs (default shapes,mnist; two processes on two cores "
                         "each take their own part of the grid)")
    go.add_argument("--decoders", type=names("standard", "bayesian"), default=["standard", "bayesian"],
                    help="comma-separated: which decoders' runs (default standard,bayesian)")
    go.add_argument("--betas", type=lambda v: [float(b) for b in v.split(",")], default=None,
                    help="comma-separated: which β's runs (default every β of the grid)")
    rep = sub.add_parser("report", help="the table and figures of the finished runs")
    rep.add_argument("runs", type=Path)
    rep.add_argument("--shapes", required=True)
    rep.add_argument("--out", type=Path, required=True)
    again = sub.add_parser("table", help="beta.md and beta.png again from the report's beta.jsonl")
    again.add_argument("rows", type=Path)
    again.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    {"run": run, "report": report, "table": redraw}[args.command](args)


if __name__ == "__main__":
    main()
