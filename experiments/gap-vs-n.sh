#!/usr/bin/env bash
# The amortization gap against N (issue 17, item 4): the INFORMATIVE preset, A-VI k = 64, seeds 0, 1, 2, at
#   N = 2,500 / 500 test images (the shipped MNIST sample), and
#   N = 8,000 / 2,000 test images (MNIST cut from the published test file, MNIST_IDX_FOLDER),
# both for 30,000 SVI steps of B = 250 (3,000 and 938 epochs), then the gaps of every seed on its first 20
# training and 20 test images (compare --gap-images: M 4, K 1,000, AIS 200 steps). The two N run side by
# side, one torch thread each, about 40 minutes of training on 2 cores. Resumable: run the same command again.
# Report: python experiments/gap_vs_n_report.py runs/gap-n-2500 runs/gap-n-8000 --out figures/gap-vs-n
# Use: experiments/gap-vs-n.sh MNIST_IDX_FOLDER
set -euo pipefail
cd "$(dirname "$0")/.."
data=$1
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
mkdir -p runs
common=(--config experiments/informative.toml --guides amortized --widths 64 --seeds 0,1,2 --gap-images 20
        --checkpoint-every 5m --no-progress)
python -m amortized_pyro compare "${common[@]}" --dataset mnist-sample --n-obs 2500 --n-test 500 \
  --epochs 3000 --study "informative, N 2,500" --out runs/gap-n-2500 > runs/gap-n-2500.log 2>&1 &
python -m amortized_pyro compare "${common[@]}" --dataset "$data" --n-obs 8000 --n-test 2000 \
  --epochs 938 --study "informative, N 8,000" --out runs/gap-n-8000 > runs/gap-n-8000.log 2>&1 &
wait
