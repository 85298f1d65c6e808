#!/usr/bin/env bash
# SA-VI in the gap table (issue 17, item 5): the INFORMATIVE preset (shipped MNIST sample, 500 epochs), encoders
# of width 64: A-VI and SA-VI with 5 refinement steps, straight-through (seeds 0, 1, 2); the same unrolled
# (gradients through the steps, Kim et al.); SA-VI with 20 steps (seed 0 first, then seeds 1, 2: about half
# an hour on one core). Every run's gaps on its first 20 training and 20 test images (compare --gap-images),
# SA-VI's with its own refined factor. One torch thread, one comparison after another, in runs/sa-vi-*.
# Resumable: run the same command again. Report: python experiments/study.py sa-vi --report-only (each folder's
#   small files mirrored under figures/sa-vi/, the table drawn from them; both: python experiments/study.py sa-vi)
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
mkdir -p runs
common=(--config experiments/informative.toml --dataset mnist-sample --widths 64 --gap-images 20
        --checkpoint-every 5m --no-progress --study "informative, SA-VI")
python -m amortized_pyro compare "${common[@]}" --guides amortized,semi-amortized --refine-steps 5 --seeds 0,1,2 \
  --out runs/sa-vi-5 >> runs/sa-vi-5.log 2>&1
python -m amortized_pyro compare "${common[@]}" --guides semi-amortized --refine-steps 5 --refine-grad unrolled \
  --seeds 0 --out runs/sa-vi-5-unrolled >> runs/sa-vi-5-unrolled.log 2>&1
python -m amortized_pyro compare "${common[@]}" --guides semi-amortized --refine-steps 20 --seeds 0 \
  --out runs/sa-vi-20 >> runs/sa-vi-20.log 2>&1
# then the same with 3 seeds (the seeds already trained and measured are reused)
python -m amortized_pyro compare "${common[@]}" --guides semi-amortized --refine-steps 5 --refine-grad unrolled \
  --seeds 0,1,2 --out runs/sa-vi-5-unrolled >> runs/sa-vi-5-unrolled.log 2>&1
python -m amortized_pyro compare "${common[@]}" --guides semi-amortized --refine-steps 20 --seeds 0,1,2 \
  --out runs/sa-vi-20 >> runs/sa-vi-20.log 2>&1
