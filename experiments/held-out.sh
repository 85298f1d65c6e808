#!/usr/bin/env bash
# Where the held-out gap comes from (issue 29, items 1 and 2): on the frozen q(θ) of the informative study's
# A-VI k = 64 runs (seeds 0, 1, 2; N 2,500 / 500 of the shipped sample; experiments/informative.sh first), fresh
# encoders of width 64 and 1,024 trained (a) on the 2,500 training images, (b) on those and the 500 held-out images
# (transductive), (c) on 500 and 1,000 of the training images; and k = 64 encoders regularized by weight decay
# (0.01, 0.1) or early stopping on a validation tenth. Each trains until the capacity rule holds and it has reached
# its run's own encoder's training objective on the same images (or 2,000 epochs). Gaps on 20 training images, 20
# training images the subset encoders never saw, and 20 held-out images, against one q* per image and run
# (compare's gap settings: M 4, S 32, K 1,000, AIS 200 steps, q* capped at 1,500 steps), and after 5 and 20
# refinement steps. One torch thread. Resumable: run the same command again. Then the rows are copied into
# figures/held-out and the table and figures drawn from them there (experiments/held_out_report.py).
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
runs=runs/informative/runs/mnist-sample
python -m amortized_pyro held-out "$runs/A-VI_k_64-seed0" "$runs/A-VI_k_64-seed1" "$runs/A-VI_k_64-seed2" \
  --widths 64,1024 --subsets 500,1000 --regularized-widths 64 --weight-decays 0.01,0.1 --early-stopping 3 \
  --n-images 20 --theta-draws 4 --importance-samples 1000 --max-steps 1500 --ais-steps 200 --no-progress \
  --out runs/held-out "$@" >> runs/held-out.log 2>&1
mkdir -p figures/held-out
cp runs/held-out/held_out.jsonl runs/held-out/references.jsonl figures/held-out/
python experiments/held_out_report.py figures/held-out --out figures/held-out
