#!/usr/bin/env bash
# The INFORMATIVE study: experiments/informative.toml's grid (A-VI k in {1, 64, 128, 256}, F-VI, constant-VI,
# 3 seeds) on the shipped MNIST sample, on the CPU. About an hour on 2 cores.
# Writes figures/informative/{results.jsonl,summary.md,fig*.png}. Extra options pass through.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m amortized_pyro compare --config experiments/informative.toml --dataset mnist-sample \
  --device cpu --out figures/informative "$@"
