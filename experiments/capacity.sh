#!/usr/bin/env bash
# Cremer et al.'s protocol on a trained informative run (issue 17, item 3): q(θ) of A-VI k = 64, seed 0, trained at
# N = 2,500 to experiments/gap-vs-n.sh's convergence criterion (that study first: its run
# runs/gap-vs-n/n2500/runs/MNIST_FOLDER/A-VI_k_64-seed0, finished), frozen; fresh encoders of width 64, 256 and 1024,
# depth 1, 2 and 3, seeds 0, 1, 2, each trained to the capacity command's default convergence rule (Adam from lr
# 3e-3; windows of 20 epochs; converged when a window improves on the one before by less than 0.1 nats per image
# after the learning rate has been halved 4 times at such windows, and the encoder has reached its run's own
# encoder's objective; at most 2,000 epochs); amortization gap on 20 training and 20 test images drawn by the gap seed (M 4
# draws of θ; no AIS: only q* matters here, and IWAE with K 100 stands for log p(x)). One torch thread.
# Resumable: run the same command again. Through the driver, which checks the run is there and then writes
# figures/capacity (experiments/capacity_status.py): python experiments/study.py capacity
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
runs=(runs/gap-vs-n/n2500/runs/*/A-VI_k_64-seed0/summary.json)
if [ "${#runs[@]}" -ne 1 ] || [ ! -f "${runs[0]}" ]; then
  echo "capacity.sh needs one finished run runs/gap-vs-n/n2500/runs/*/A-VI_k_64-seed0 (experiments/gap-vs-n.sh); found: ${runs[*]}" >&2
  exit 2
fi
python -m amortized_pyro capacity "$(dirname "${runs[0]}")" --widths 64,256,1024 \
  --layers 1,2,3 --seeds 0,1,2 --n-images 20 --theta-draws 4 --ais-steps 0 --importance-samples 100 --no-progress \
  --out runs/capacity "$@"
