"""How wide q(θ) ended, per decoder layer: the mean standard deviation of q(θ) over each weight tensor, per
configuration (mean over its runs' seeds ± standard error over seeds), in a Markdown table.

    python experiments/theta_scales.py runs/informative/runs/mnist-sample/*

Where a layer's weights stay wide, each draw θ_m is a different function of z, and a q(z) that ignores θ
pays for it: the coupling gap (docs/results.md, "The gap where z carries information").
"""
import argparse
from collections import defaultdict

from amortized_pyro.models.guides import config_label, display_order
from amortized_pyro.report.marks import plus_minus
from amortized_pyro.runs.fit import load_run
from amortized_pyro.support.stats import mean_stderr


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="finished run directories")
    args = parser.parse_args()
    scales = defaultdict(list)  # label → [{site: mean sd}, one per run]
    for path in args.runs:
        result = load_run(path)
        scales[config_label(result.config)].append(
            {site: scale.mean().item() for site, (_, scale) in result.guide.q_theta.params().items()
             if ".w" in site})
    sites = list(next(iter(scales.values()))[0])
    print("| configuration | seeds | " + " | ".join("mean sd of q(θ), %s" % site for site in sites) + " |")
    print("|---" * (len(sites) + 2) + "|")
    for label in sorted(scales, key=display_order):
        runs = scales[label]
        cells = []
        for site in sites:
            values = [run[site] for run in runs]
            cells.append(plus_minus(mean_stderr(values), "%.4f"))
        print("| %s | %d | %s |" % (label, len(runs), " | ".join(cells)))


if __name__ == "__main__":
    main()
