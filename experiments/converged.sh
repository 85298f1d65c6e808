#!/usr/bin/env bash
# A-VI against F-VI at convergence (issue 29, item 3): the informative study's F-VI and A-VI k = 64 runs (seeds 0,
# 1, 2; experiments/informative.sh first) copied into runs/converged/runs/mnist-sample and extended from their 500 epochs until the
# ELBO per image, averaged over windows of 100 epochs, rises by less than 1 nat on the window before (fit
# --stop-window 100 --stop-gain 1; at most 20,000 epochs): the criterion of experiments/gap-vs-n.sh. Then their gaps
# on the same 20 training (and, for A-VI, 20 test) images as the informative study's reports (the gap seed is the
# run's seed), with compare's gap settings. One torch thread. Resumable: run the same command again.
# Then the report: python experiments/study.py converged --report-only (the runs' small files mirrored under
# figures/converged, the table drawn from them)
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
mkdir -p runs/converged/runs/mnist-sample
gap=(--n-images 20 --theta-draws 4 --importance-samples 1000 --max-steps 1500 --ais-steps 200
     --refine-steps 0,5,20,100 --no-progress)
for seed in 0 1 2; do
  for label in F-VI A-VI_k_64; do
    run="runs/converged/runs/mnist-sample/$label-seed$seed"
    if [ ! -d "$run" ]; then  # a copy, without the 500-epoch run's gap reports
      cp -r "runs/informative/runs/mnist-sample/$label-seed$seed" "$run"
      rm -f "$run"/gap*.json
    fi
    python -m amortized_pyro fit --resume "$run" --epochs 20000 --stop-window 100 --stop-gain 1 --eval-every 100 \
      --checkpoint-every 5m --no-progress >> runs/converged.log 2>&1
    for split in train test; do
      if [ "$split" = test ] && [ "$label" = F-VI ]; then continue; fi
      [ -f "$run/gap-$split.json" ] || python -m amortized_pyro gap "$run" --split "$split" "${gap[@]}" \
        --out "$run/gap-$split.json" >> runs/converged.log 2>&1
    done
  done
done
