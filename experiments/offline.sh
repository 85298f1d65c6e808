#!/usr/bin/env bash
# The OFFLINE study: the reference study's comparison, shrunk to run on a 2-core CPU with no internet
# in about half an hour. Same model (z 64, H 256), same grid (A-VI with k in {1, 64, 128, 256}, F-VI,
# constant-VI), same optimizer (Adam, lr 1e-3) and 10 steps per epoch, but on the MNIST sample shipped
# with the package: 2,500 training and 500 held-out images (reference: 10,000), minibatches of 250
# (reference: 1,000), 400 epochs (reference: 5,000), 3 seeds (reference: 5), MSE every 5 epochs.
# Writes figures/offline/{results.jsonl,summary.md,fig*.png}; per-run directories go to
# figures/offline/runs/ (not committed). Re-running skips the runs already finished.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m amortized_pyro compare --study offline --dataset mnist-sample \
  --guides amortized,per-datapoint,shared --widths 1,64,128,256 --seeds 0,1,2 \
  --n-obs 2500 --n-test 500 --batch-size 250 --epochs 400 --eval-every 5 \
  --device cpu --out figures/offline "$@"
