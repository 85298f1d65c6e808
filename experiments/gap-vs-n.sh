#!/usr/bin/env bash
# The amortization gap against N, from one pool, each run trained to one convergence criterion (issue 29, item 3):
# the INFORMATIVE preset, A-VI k = 64, seeds 0, 1, 2, N = 1,000, 2,500 and 8,000 training images and 2,000 test
# images, all cut by the run's seed from the same 10,000 images (the published MNIST test file, MNIST_IDX_FOLDER);
# every run stops when its ELBO per image, averaged over windows of 100 epochs, rises by less than 1 nat on the
# window before (at most 6,000 epochs): the same criterion for every N, not the same epochs or steps. Then the
# gaps of every run on 20 training and 20 test images (compare --gap-images: M 4, S 32, K 1,000, AIS 200 steps).
# One torch thread, one N after the other (N 1,000 first). Resumable: run the same command again.
# Then the report: python experiments/study.py gap-vs-n --report-only (each N's small files mirrored under
# figures/gap-vs-n/nN, the table drawn from them)
# Use: experiments/gap-vs-n.sh MNIST_IDX_FOLDER
set -euo pipefail
cd "$(dirname "$0")/.."
data=$1
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
mkdir -p runs/gap-vs-n
for n in 1000 2500 8000; do
  python -m amortized_pyro compare --config experiments/informative.toml --guides amortized --widths 64 \
    --seeds 0,1,2 --dataset "$data" --n-obs "$n" --n-test 2000 --epochs 6000 --stop-window 100 --stop-gain 1 \
    --eval-every 100 --gap-images 20 --checkpoint-every 5m --no-progress --study "informative, N $n, converged" \
    --out "runs/gap-vs-n/n$n" >> runs/gap-vs-n.log 2>&1
done
