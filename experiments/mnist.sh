#!/usr/bin/env bash
# The reference study on MNIST, at its scale (meant for a GPU): 10,000 training images and 1,000 held-out
# test images, minibatches of 1,000, 5,000 epochs, Adam lr 1e-3, A-VI with k in {1, 64, 128, 256}, F-VI and
# constant-VI, 5 seeds; MSE evaluated every 100 epochs (fit's default: an evaluation every epoch took most of a
# run's time, docs/cli.md). Needs MNIST in --data-dir (downloaded when online).
# Writes figures/mnist/{results.jsonl,summary.md,fig*.png}. Extra options pass through, e.g.
#   experiments/mnist.sh --seeds 0 --epochs 1000     (a shorter run)
# or through the driver: python experiments/study.py mnist [the same options]
set -euo pipefail
cd "$(dirname "$0")/.."
python -m amortized_pyro compare --study reference --dataset mnist \
  --guides amortized,per-datapoint,shared --widths 1,64,128,256 --seeds 0,1,2,3,4 \
  --n-obs 10000 --n-test 1000 --batch-size 1000 --epochs 5000 --eval-every 100 \
  --device auto --out figures/mnist "$@"
