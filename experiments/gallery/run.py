"""The gallery's runner: each of Pyro's amortized examples (one module per model in this folder) trained under its
hand-written guide and the package's builders, seeds given, one JSON line per (model, guide, seed) in ``--out``
(common.py's docstring says what each line measures). Resumable: a finished (model, guide, seed) line is kept,
never redone; a line is read under its guide's name as common.label gives it (the names recorded before they said
their scale link, with ``+exp``), and a line of the default A-VI guide (common.DEFAULT) counts as finished only
where it holds what run_one now measures of it (the training-split gap and diagnose, and M2's gap through its
AutoGuideList, refused before: ``LIST_REFUSED``; a stopped run has nothing more): an older one is kept, and the run is
added beside it.

    OMP_NUM_THREADS=1 python experiments/gallery/run.py vae --seeds 0 1 2 --out figures/gallery/runs.jsonl
    OMP_NUM_THREADS=1 python experiments/gallery/run.py all --out figures/gallery/runs.jsonl
"""
import argparse
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import DEFAULT, label, run_one  # noqa: E402

from amortized_pyro.support.jsonio import append_jsonl, read_jsonl  # noqa: E402

MODELS = ("vae", "sparse_gamma", "scanvi", "lda", "prodlda", "dmm", "cevae", "ss_vae_m2", "cvae")
"""The gallery's model modules, in the order ``all`` runs them."""


LIST_REFUSED = "the gap of a part of an AutoGuideList would need the other parts' sites held at their draws"
"""What measure_gap said of an AutoGuideList before it measured the list's builder part with the other parts' sites
held at their draws (M2's guides): a default-guide line whose gap holds it is run again, added beside it."""


def complete(record):
    """Whether a line holds everything run_one now measures of its guide: all but the default A-VI guide's; the
    default's where it stopped (nothing more to measure) or holds the training-split gap's and diagnose's fields
    and no gap refused as :data:`LIST_REFUSED` (measured now)."""
    return (label(record) != DEFAULT or record["stopped"] is not None
            or ("khat" in record or "khat_refused" in record)
            and LIST_REFUSED not in (record.get("gap_refused") or ""))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", choices=MODELS + ("all",))
    parser.add_argument("--out", required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--guides", nargs="+", help="a subset of each model's guides (default: all it lists)")
    parser.add_argument("--steps", type=int, help="override each model's budget (a timing run)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    here = Path(__file__).resolve().parent
    commit = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=here, capture_output=True,
                            text=True).stdout.strip() or None  # the code each line was measured with
    done = {(r["model"], label(r), r["seed"], r["optimizer"], r["budget"])
            for r in (read_jsonl(args.out) if os.path.exists(args.out) else []) if complete(r)}
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    for name in MODELS if args.model == "all" else (args.model,):
        spec = importlib.import_module(name)
        data = spec.data()
        for seed in args.seeds:
            for optimizer in spec.OPTIMIZERS:
                for guide in args.guides or spec.GUIDES:
                    key = (spec.NAME, guide, seed, optimizer, args.steps or spec.STEPS)
                    if guide in spec.GUIDES and key not in done:
                        record = dict(run_one(spec, guide, seed, data, optimizer, args.steps), commit=commit)
                        append_jsonl(args.out, record)  # resumable: a finished line is kept, never redone
                        print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
