"""How costs grow: the package's training step against N (each guide), encoder width and particles; the gap's
wall time against images, θ draws and z draws per step; peak memory beside each; the step against this CPU's
arithmetic limit (FLOPs per step ÷ a measured matrix-product rate).

    python bench/archive/growth.py RUN_DIR --out figures/growth [--threads 1]

Every point runs in its own process (so that its peak RSS is its own: ``ru_maxrss`` minus that of a process
that only imported the package and loaded the data), one after another; step times are medians of 3 rounds of
20 steps after 3 warm-up steps at the reference size (B 1,000, z 64, H 256, k 128, the shipped sample tiled
up to N); gap times are one measurement each on RUN_DIR's test images with compare's settings except a cap of
300 steps and AIS of 50 steps (the growth with size, not a full measurement). Writes growth.json and
growth.png into --out (``--replot``: growth.png again from growth.json, FLOPs recomputed).
"""
import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REFERENCE = dict(n_obs=10000, batch=1000, z_dim=64, hidden=256, width=128, particles=1, guide="amortized")
SWEEPS = {
    "step vs N": [dict(REFERENCE, guide=g, n_obs=n) for g in ("amortized", "per-datapoint", "shared")
                  for n in (1000, 10000, 60000)],
    "step vs width": [dict(REFERENCE, width=k) for k in (32, 128, 512, 2048)],
    "step vs particles": [dict(REFERENCE, particles=p) for p in (1, 2, 4, 8)],
    "gap vs images": [dict(images=n, theta_draws=4, step_samples=8) for n in (5, 10, 20, 40)],
    "gap vs θ draws": [dict(images=10, theta_draws=m, step_samples=8) for m in (1, 2, 4, 8)],
    "gap vs z draws per step": [dict(images=10, theta_draws=4, step_samples=s) for s in (2, 4, 8, 16)],
}


def baseline_rss():
    """Peak RSS (MiB) of a process that imported the package and loaded the shipped sample."""
    from amortized_pyro.runs.data import load_data
    load_data("mnist-sample", n_obs=2500, n_test=0, log=lambda line: None)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def time_step(point):
    import torch

    import pyro
    from amortized_pyro.runs.data import load_data
    from amortized_pyro.models.guides import make_guide
    from amortized_pyro.models.decoder import BayesianDecoderModel
    from amortized_pyro.inference.svi import make_elbo, make_optimizer, step

    images = load_data("mnist-sample", n_obs=2500, n_test=0, log=lambda line: None).train
    n = point["n_obs"]
    x_all = images.repeat(-(-n // len(images)), 1)[:n]
    pyro.set_rng_seed(0)
    model = BayesianDecoderModel(n, x_all.shape[1], point["z_dim"], point["hidden"])
    guide = make_guide(point["guide"], model, width=point["width"])
    elbo = make_elbo(point["particles"])(model, guide)
    optimizer = make_optimizer(guide, 1e-3)
    batches = []
    while len(batches) < 63:  # 3 warm-up steps and 3 rounds of 20, whatever N / B
        batches += list(torch.randperm(n).split(point["batch"]))
    with pyro.validation_enabled(False):
        for idx in batches[:3]:
            step(elbo, optimizer, x_all[idx], idx)
        times = []
        for r in range(3):
            began = time.perf_counter()
            for idx in batches[3 + 20 * r: 23 + 20 * r]:
                step(elbo, optimizer, x_all[idx], idx)
            times.append(1000 * (time.perf_counter() - began) / 20)
    return statistics.median(times)


def time_gap(point, run_dir):
    from dataclasses import replace

    from amortized_pyro.study.comparison import COMPARE_GAP
    from amortized_pyro.gap.measure import measure_run

    settings = replace(COMPARE_GAP, max_steps=300, ais_steps=50, theta_draws=point["theta_draws"],
                       step_samples=point["step_samples"])
    began = time.perf_counter()
    measure_run(run_dir, "test", point["images"], settings, (0, 5, 20), log=lambda *a: None)
    return time.perf_counter() - began


def matmul_rate():
    """GFLOP/s of torch.mm at the decoder's largest product ([1000, 256] × [256, 784]), median of 20."""
    import torch

    a, b = torch.randn(1000, 256), torch.randn(256, 784)
    for _ in range(5):
        a @ b
    times = []
    for _ in range(20):
        began = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - began)
    return 2 * 1000 * 256 * 784 / statistics.median(times) / 1e9


def step_flops(point, x_dim=784):
    """Multiply-adds ×2 of one step's matrix products: forward (encoder once, decoder per particle) and backward
    (about twice the forward: gradients with respect to activations and to weights)."""
    b, z, h, k = point["batch"], point["z_dim"], point["hidden"], point["width"]
    decoder = z * h + h * h + h * x_dim
    encoder = (x_dim * k + k * k + 2 * k * z) if point["guide"] == "amortized" else 0
    return 3 * 2 * b * (decoder * point["particles"] + encoder)


def child(kind, point, run_dir, threads):
    import torch
    torch.set_num_threads(threads)
    value = time_step(point) if kind == "step" else time_gap(point, run_dir)
    print(json.dumps({"value": value, "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("--out", required=True)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--replot", action="store_true", help="redraw growth.png from --out's growth.json")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child[0], json.loads(args.child[1]), args.run_dir, args.threads)
    out = Path(args.out)
    if args.replot:
        results = json.loads((out / "growth.json").read_text())
        for row in (r for rows in results["sweeps"].values() for r in rows if "flops_ms" in r):
            row["flops_ms"] = step_flops(row) / (results["matmul_gflops"] * 1e9) * 1000
        (out / "growth.json").write_text(json.dumps(results, indent=1) + "\n")
        return figure(results, out / "growth.png")
    out.mkdir(parents=True, exist_ok=True)
    import torch
    torch.set_num_threads(args.threads)
    base = baseline_rss()
    results = {"threads": args.threads, "baseline_rss_mib": base, "matmul_gflops": matmul_rate(), "sweeps": {}}
    for name, points in SWEEPS.items():
        kind = "step" if name.startswith("step") else "gap"
        rows = []
        for point in points:
            line = subprocess.run([sys.executable, __file__, args.run_dir, "--out", args.out, "--threads",
                                   str(args.threads), "--child", kind, json.dumps(point)],
                                  check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
            measured = json.loads(line)
            row = dict(point, value=measured["value"], peak_mib=measured["rss"] - base)
            if kind == "step":
                row["flops_ms"] = step_flops(point) / (results["matmul_gflops"] * 1e9) * 1000
            rows.append(row)
            print(name, json.dumps(row), flush=True)
        results["sweeps"][name] = rows
    (out / "growth.json").write_text(json.dumps(results, indent=1) + "\n")
    figure(results, out / "growth.png")


def figure(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    axes_of = {"step vs N": "n_obs", "step vs width": "width", "step vs particles": "particles",
               "gap vs images": "images", "gap vs θ draws": "theta_draws", "gap vs z draws per step": "step_samples"}
    fig, axes = plt.subplots(2, 3, figsize=(15, 8))
    for ax, (name, rows) in zip(axes.flat, results["sweeps"].items()):
        key = axes_of[name]
        groups = {}
        for r in rows:
            groups.setdefault(r.get("guide", "gap"), []).append(r)
        for label, group in groups.items():
            xs = [r[key] for r in group]
            ax.plot(xs, [r["value"] for r in group], marker="o", label=label if name == "step vs N" else None)
            for r in group:
                ax.annotate("%.0f MiB" % r["peak_mib"], (r[key], r["value"]), fontsize=7, textcoords="offset points",
                            xytext=(3, 4))
            if "flops_ms" in group[0]:
                ax.plot(xs, [r["flops_ms"] for r in group], ls=":", color=ax.lines[-1].get_color(),
                        label="matmul FLOPs ÷ measured rate (dotted)" if label == "amortized" else None)
        ax.set(xscale="log", xlabel=key.replace("_", " "), title=name,
               ylabel="ms per step" if name.startswith("step") else "wall s (cap 300 steps, AIS 50)")
        ax.minorticks_off()
        ax.set_xticks(sorted({r[key] for r in rows}), [str(v) for v in sorted({r[key] for r in rows})])
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.suptitle("How costs grow on this CPU (%d thread%s; labels: peak memory above an idle process; "
                 "matmul %.0f GFLOP/s)" % (results["threads"], "" if results["threads"] == 1 else "s",
                                            results["matmul_gflops"]))
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
