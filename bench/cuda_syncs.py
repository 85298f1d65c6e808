"""Host syncs on CUDA, counted (issue 51): ``torch.cuda.set_sync_debug_mode("warn")`` makes torch warn at every
operation that waits for the GPU (a ``.item()``, a boolean index, a copy to the host...), and the warnings are
counted. Per guide, on the shipped sample (N 1,000, B 100: 10 steps an epoch):

  per epoch       the syncs of a training epoch without evaluation: (fit of 6 epochs − fit of 2 epochs) / 4, both
                  evaluated only at the end (the loop reads the loss back once an epoch by design)
  one evaluation  the syncs of one evaluation (plug-in and predictive MSEs, the true ELBO where the objective is
                  not one): fit of 2 epochs evaluated every epoch − the same evaluated at the end only
  one gap         ``measure_run`` on 5 test images (training images for F-VI) of the 2-epoch run

    python bench/cuda_syncs.py --device cuda

On the CPU every count is 0 (nothing to wait for): the script runs there to check itself.
"""
import argparse
import tempfile
import warnings
from pathlib import Path

import torch

from amortized_pyro import FitConfig, fit
from amortized_pyro.gap.measure import measure_run

SYNC = "synchronizing CUDA operation"


def syncs(work, device):
    """(what ``work()`` returns, the host syncs it made on ``device``)."""
    cuda = torch.device(device).type == "cuda"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if cuda:
            torch.cuda.set_sync_debug_mode("warn")
        try:
            out = work()
        finally:
            if cuda:
                torch.cuda.set_sync_debug_mode("default")
    return out, sum(SYNC in str(w.message) for w in caught)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--guides", nargs="+", default=["amortized", "per-datapoint", "shared", "semi-amortized"])
    args = parser.parse_args()
    base = FitConfig(dataset="mnist-sample", n_obs=1000, n_test=100, batch_size=100, hidden=64, z_dim=8, width=32,
                     predictive_draws=4, device=args.device, checkpoint_every="1h")
    print("| guide | syncs per epoch (10 steps) | syncs in one evaluation | syncs in one gap (5 images) |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for guide in args.guides:
            def run(epochs, eval_every, out=None):
                return lambda: fit(base, guide=guide, epochs=epochs, eval_every=eval_every, out=out,
                                   progress=False, log=lambda *a: None)
            _, long = syncs(run(6, 1000), args.device)
            _, short = syncs(run(2, 1000), args.device)
            _, evaluated = syncs(run(2, 1), args.device)
            out = Path(tmp) / guide
            syncs(run(2, 1000, out), args.device)
            split = "train" if guide == "per-datapoint" else "test"
            _, gap = syncs(lambda: measure_run(out, split=split, n_images=5, device=args.device, log=lambda *a: None),
                           args.device)
            print("| %s | %g | %d | %d |" % (guide, (long - short) / 4, evaluated - short, gap), flush=True)


if __name__ == "__main__":
    main()
