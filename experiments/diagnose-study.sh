#!/usr/bin/env bash
# Which cheap score finds the datapoints an encoder serves worst, and how much of SA-VI's gain refining only those
# keeps (issue 62): A-VI k = 64 on the informative preset (experiments/informative.toml, the shipped MNIST
# sample), seeds 0, 1, 2, each trained alone (one torch thread); then on 20 training and 20 held-out images of
# each (drawn by the gap seed: 0 + the run's seed)
#   gap        the amortization gap per image and the gap left after 5, 20 and 100 Adam steps from the encoder's
#              factor (the informative study's gap settings: M = 4, S = 32, K = 1,000, AIS 200 steps, q* capped
#              at 1,500 steps)
#   diagnose   per image k̂ of the encoder's factor, of the refined ones and of q* (2,000 z draws at each of 4 θ draws),
#              the log weights' spread (of all draws and of the first 8), the local ELBO; 500 simulated images'
#              ranks for calibration
# Runs and reports in runs/diagnose-study/avi64-seedS (resumable: finished steps are kept), the log appended to
# runs/diagnose-study.log. Then the report (python experiments/study.py diagnose --report-only): every run's
# per-image records and SA-VI's share option measured directly (experiments/diagnose_study.py measure), the tables
# and figure drawn from the records (experiments/diagnose_study.py table) into figures/diagnose.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
mkdir -p runs/diagnose-study
log=runs/diagnose-study.log
for seed in 0 1 2; do
  run=runs/diagnose-study/avi64-seed$seed
  if [ ! -f "$run/summary.json" ]; then
    rm -rf "$run"
    python -m amortized_pyro fit --config experiments/informative.toml --dataset mnist-sample --guide amortized \
      --width 64 --seed "$seed" --device cpu --no-progress --out "$run" >> "$log" 2>&1
  fi
  for split in train test; do
    if [ ! -f "$run/gap-$split.json" ]; then
      python -m amortized_pyro gap "$run" --split "$split" --n-images 20 --theta-draws 4 --score-draws 32 \
        --importance-samples 1000 --ais-steps 200 --max-steps 1500 --refine-steps 5,20,100 --device cpu \
        --no-progress --out "$run/gap-$split.json" >> "$log" 2>&1
    fi
  done
  if [ ! -f "$run/diagnose.json" ]; then
    python -m amortized_pyro diagnose "$run" --n-images 20 --samples 2000 --theta-draws 4 --refine-steps 5,20,100 --q-star \
      --simulations 500 --device cpu --out "$run" >> "$log" 2>&1
  fi
done
