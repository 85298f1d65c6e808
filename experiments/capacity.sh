#!/usr/bin/env bash
# Cremer et al.'s protocol on a trained informative run (issue 17, item 3): q(θ) of A-VI k = 64, seed 0, trained
# 30,000 steps on the shipped sample (experiments/gap-vs-n.sh first), frozen; fresh encoders of width 64, 256 and 1024,
# depth 1, 2 and 3, seeds 0, 1, 2, each trained to the capacity command's default convergence rule (Adam from lr
# 1e-3; windows of 20 epochs; converged when a window improves on the one before by less than 0.1 nats per image
# after the learning rate has been halved 4 times at such windows; at most 2,000 epochs: a looser rule, lr 3e-3,
# windows of 10, 3 halvings, stopped the first encoder 12 nats per image short of this one); amortization
# gap on the first 20 training and 20 test images (M 4 draws of θ; no AIS: only q* matters here, and IWAE with
# K 100 stands for log p(x)). One torch thread. Resumable: run the same command again.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
python -m amortized_pyro capacity runs/gap-n-2500/runs/mnist-sample/A-VI_k_64-seed0 --widths 64,256,1024 \
  --depths 1,2,3 --seeds 0,1,2 --n-images 20 --theta-draws 4 --ais-steps 0 --importance-samples 100 \
  --out runs/capacity "$@"
