#!/usr/bin/env bash
# The INFORMATIVE study: experiments/informative.toml's grid (A-VI k in {1, 64, 128, 256}, F-VI, constant-VI,
# 3 seeds) on the shipped MNIST sample, on the CPU, one torch thread; after each run its amortization, coupling
# and approximation gaps on 20 training and 20 test images drawn by the gap seed (0 + the run's seed; compare's
# gap settings: M = 4, S = 32, K = 1,000, AIS 200 steps, q* capped at 1,500 steps; refinement rows 5 / 20 / 100).
# Runs and reports in runs/informative (resumable: the same command goes on). About 45 minutes of training and,
# with the gap code of issue 28, 12.4 minutes of gap measurement on one core (2026-11-24, other work on the second
# core; 2.5 hours before it). Then the report (python experiments/study.py informative --report-only): the study's
# small files mirrored into figures/informative (results, each run's settings, metrics and gap reports), the gap
# table over the 3 seeds drawn from them into figures/informative/gaps (experiments/gap_tables.py), the summary and
# figures redrawn (plot), and q(θ)'s scales to figures/informative/theta_scales.md (experiments/theta_scales.py).
# The same through the driver: python experiments/study.py informative
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
mkdir -p runs
python -m amortized_pyro compare --config experiments/informative.toml --dataset mnist-sample --device cpu \
  --gap-images 20 --checkpoint-every 5m --no-progress --out runs/informative "$@" >> runs/informative.log 2>&1
python experiments/study.py informative --report-only
