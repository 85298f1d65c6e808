#!/usr/bin/env bash
# The OFFLINE-LONG study: does the offline study's picture change with a longer budget? Same data and
# settings as experiments/offline.sh, but 1,500 epochs (15,000 iterations), one seed, and only A-VI k=64,
# F-VI and constant-VI (the control whose q(z) carries no information about x). About 20 minutes on a
# 2-core CPU. Writes figures/offline-long/{results.jsonl,summary.md,fig*.png}.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m amortized_pyro compare --study offline-long --dataset mnist-sample \
  --guides amortized,per-datapoint,shared --widths 64 --seeds 0 \
  --n-obs 2500 --n-test 500 --batch-size 250 --epochs 1500 --eval-every 10 \
  --device cpu --out figures/offline-long "$@"
