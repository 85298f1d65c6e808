"""What inference on one new image costs, per configuration of comparison folders (the remedies study): the
time to have q(z_n) for one held-out image and one draw of z from it, at E_q[θ]. For an encoder family that is
its forward pass (SA-VI: with its refinement steps; iterative: with its iterations; a flow: with the flow's pass
for the draw); for F-VI, which has no factor for a new image, the per-image optimization a new image needs: the
gap's q* optimizer (Adam, the gap's default stopping rule, 8 z draws per step; with a flow, q* in its family) at
E_q[θ], from the prior. Seed 0's run of each folder, on one torch thread. Absolute times on a shared CPU drift:
read the ratios, measured side by side in one process.

Two steps, so that the table is drawn again from a committed file (times are measured once, never re-measured by
a report):

    OMP_NUM_THREADS=1 python experiments/inference_costs.py measure runs/remedies/a-vi runs/remedies/f-vi ... \
        --out runs/remedies/inference.jsonl [--rounds 21]
        every round's time per configuration (F-VI: 3 rounds), with the machine and the date; refuses a file that
        is there (move it away to measure again) and a folder without a finished seed-0 run
    python experiments/inference_costs.py table figures/remedies/inference.jsonl --out figures/remedies
        OUT/inference.md: per configuration the median time and its ratio to A-VI's (the configuration without a
        comma whose label begins with "A-VI")
"""
import argparse
import datetime
import glob
import json
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path

import torch

from amortized_pyro.errors import AmortizedPyroError
from amortized_pyro.inference.evaluation import factor, pushed
from amortized_pyro.local.draws import Draws
from amortized_pyro.local.gaps import GapSettings
from amortized_pyro.local.optimize import converge
from amortized_pyro.models.guides import config_label
from amortized_pyro.runs.fit import finished_run
from amortized_pyro.support.jsonio import read_jsonl

F_VI_ROUNDS = 3  # a q* optimization takes seconds: three rounds, not --rounds


def encoder_task(guide, x):
    def infer():
        with torch.no_grad():
            loc, scale = factor(guide, x)
            return pushed(guide, loc + scale * torch.randn_like(loc), x, None)
    return infer


def optimization_task(model, guide, x, settings):
    theta = Draws.of([guide.global_mean()], torch.Generator().manual_seed(0)).at("fit")
    idx = torch.arange(x.shape[0])
    size = model.z_dim

    def infer():
        flow = guide.row_flow(idx, (x, idx), {})
        best = converge(model.local_log_joint, x, torch.zeros(1, size), torch.zeros(1, size), theta, settings.lr,
                        settings.rule(), settings.step_samples, flow=flow)
        infer.steps = int(best.steps[0])
        return best
    return infer


def seed0_run(folder):
    runs = sorted(glob.glob("%s/runs/*/*-seed0" % folder))
    if not runs or not Path(runs[0], "params.pt").exists():
        raise AmortizedPyroError("%s has no finished seed-0 run (runs/DATASET/*-seed0 with params.pt)" % folder)
    return runs[0]


def machine():
    """The CPU's model name (Linux's /proc/cpuinfo; elsewhere what platform knows) and the system."""
    try:
        name = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name"))
    except (OSError, StopIteration):
        name = platform.processor() or platform.machine()
    return "%s, %s" % (name, platform.system())


def measure(folders, out, rounds):
    """One record per folder: its seed-0 run's label, what inference is for it, and every round's seconds."""
    if Path(out).exists():
        raise AmortizedPyroError("%s is there: move it away to measure again" % out)
    runs = [seed0_run(folder) for folder in folders]  # every folder checked before the first timing
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    records, settings = [], GapSettings()
    for folder, run in zip(folders, runs):
        result, data = finished_run(run, "cpu", lambda *a: None)
        x, guide = data.test[:1], result.guide
        task = (encoder_task(guide, x) if guide.can_infer_unseen else
                optimization_task(result.model, guide, x, settings))
        task()  # warm-up
        seconds = []
        for _ in range(rounds if guide.can_infer_unseen else F_VI_ROUNDS):
            began = time.perf_counter()
            task()
            seconds.append(time.perf_counter() - began)
        records.append({"folder": folder, "run": run, "label": config_label(result.config),
                        "how": "its own factor and a draw" if guide.can_infer_unseen else
                        "q* optimization, %d steps" % task.steps, "seconds": seconds, "date": when,
                        "machine": machine(),
                        "torch_threads": torch.get_num_threads()})
        print("%s: median %.2f ms" % (records[-1]["label"], 1000 * statistics.median(seconds)), flush=True)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    with open(out, "x") as f:  # exclusive create: a file made meanwhile is not overwritten
        f.write("".join(json.dumps(r) + "\n" for r in records))


RECORD_KEYS = ("label", "how", "seconds", "date", "machine", "torch_threads")


def table(path):
    """The Markdown table of a measure step's records: median ms per configuration and × A-VI's."""
    if Path(path).is_dir():
        raise AmortizedPyroError("%s is a folder: give measure's JSON-lines file" % path)
    records = read_jsonl(path)
    if not records:
        raise AmortizedPyroError("%s holds no records" % path)
    for number, r in enumerate(records, 1):
        if not isinstance(r, dict) or any(key not in r for key in RECORD_KEYS) or not r["seconds"]:
            raise AmortizedPyroError("%s: record %d is not one of measure's (it needs %s, and some seconds)"
                                     % (path, number, ", ".join(RECORD_KEYS)))
    medians = [statistics.median(r["seconds"]) for r in records]
    base = next((m for r, m in zip(records, medians) if r["label"].startswith("A-VI") and "," not in r["label"]),
                None)
    lines = ["| configuration | inference on one new image | rounds | median ms | × A-VI's |", "|---|---|---|---|---|"]
    lines += ["| %s | %s | %d | %.2f | %s |" % (r["label"], r["how"], len(r["seconds"]), 1000 * m,
                                                "%.0f" % (m / base) if base else "n/a")
              for r, m in zip(records, medians)]
    machines = sorted({"%s on %s, %d torch thread(s)" % (r["date"], r["machine"], r["torch_threads"])
                       for r in records})
    lines.append("\nMeasured %s, each configuration's seed-0 run, one process (`measure`'s records in %s)."
                 % ("; ".join(machines), Path(path).name))
    return "\n".join(lines) + "\n"


def positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("%d: at least 1" % value)
    return value


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    steps = parser.add_subparsers(dest="step", required=True)
    timed = steps.add_parser("measure", help="time inference per folder's seed-0 run into a JSON-lines file")
    timed.add_argument("folders", nargs="+")
    timed.add_argument("--out", required=True)
    timed.add_argument("--rounds", type=positive, default=21)
    drawn = steps.add_parser("table", help="draw OUT/inference.md from measure's file")
    drawn.add_argument("records")
    drawn.add_argument("--out", required=True)
    args = parser.parse_args()
    try:
        if args.step == "measure":
            measure(args.folders, args.out, args.rounds)
        else:
            text = "Command: python experiments/inference_costs.py table %s --out %s\n\n%s" % (
                shlex.quote(args.records), shlex.quote(args.out), table(args.records))
            Path(args.out).mkdir(parents=True, exist_ok=True)
            (Path(args.out) / "inference.md").write_text(text)
            print(text, end="")
    except (AmortizedPyroError, FileNotFoundError) as e:
        sys.exit("inference_costs.py: %s" % e)


if __name__ == "__main__":
    main()
