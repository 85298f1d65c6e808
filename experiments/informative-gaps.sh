#!/usr/bin/env bash
# The amortization and approximation gaps of the INFORMATIVE study's runs (experiments/informative.sh first):
# seed 0 of every configuration, its first 100 training and 100 test images, theta drawn M = 4 times from q(theta),
# K = 1,000 importance samples, q* by Adam (stopping rule of amortized_pyro.gap, at most 3,000 steps), and the gap
# left after 0, 5, 20 and 100 refinement steps. One report per run and split in figures/informative/gaps/;
# reports already there are kept. About 2 minutes a report on one core.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p figures/informative/gaps
for run in figures/informative/runs/mnist-sample/*-seed0; do
  for split in train test; do
    report="figures/informative/gaps/$(basename "$run")-$split.json"
    [ -e "$report" ] && continue
    python -m amortized_pyro gap "$run" --split "$split" --n-images 100 --M 4 --K 1000 --samples 100 \
      --max-steps 3000 --refine-steps 0,5,20,100 --out "$report" "$@"
  done
done
