#!/usr/bin/env bash
# The amortization gap across decoders (issue 30, item 4): {MLP, conv} decoder × {Bayesian (a prior on every
# weight, q(θ) mean-field), standard (θ point-estimated, no prior: --decoder-prior none)}, each with A-VI k = 64
# and F-VI, seeds 0, 1, 2, on the INFORMATIVE preset at N = 8,000 training and 2,000 test images cut from
# MNIST_IDX_FOLDER (e.g. ../shared/data/mnist), 157 epochs of B = 250 (5,024 steps: the informative study's 5,000
# steps, not a convergence criterion), then every run's gaps on 20 training and 20 test images (compare's gap
# settings: M 4, S 32, K 1,000, AIS 200 steps; a point-estimated decoder has no coupling term). The encoder is the
# MLP in every cell (the decoder is what varies). One comparison folder per cell, runs/architectures/CELL, one
# after the other (MLP first: the conv decoder's step costs about 3.6× the MLP's, BENCHMARKS.md), one torch thread.
# Resumable: run the same command again. Then the report: python experiments/study.py architectures --report-only
# Use: experiments/architectures.sh MNIST_IDX_FOLDER [CELL ...], or through the driver:
#      python experiments/study.py architectures --data ../shared/data/mnist
# Named cells alone (e.g. two processes on two cores): experiments/architectures.sh DATA conv-normal conv-none
set -euo pipefail
cd "$(dirname "$0")/.."
data=$1
shift
source experiments/lib/cells.sh
check_cells cell "mlp-normal mlp-none conv-normal conv-none" "$@"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
mkdir -p runs/architectures
for decoder in mlp conv; do
  for prior in normal none; do
    cell="$decoder-$prior"
    if ! chosen "$cell"; then continue; fi
    python -m amortized_pyro compare --config experiments/informative.toml --guides amortized,per-datapoint \
      --widths 64 --seeds 0,1,2 --dataset "$data" --n-obs 8000 --n-test 2000 --epochs 157 --eval-every 50 \
      --decoder "$decoder" --decoder-prior "$prior" --gap-images 20 --checkpoint-every 5m --no-progress \
      --study "architectures: $decoder decoder, prior $prior" --out "runs/architectures/$cell" \
      >> runs/architectures.log 2>&1
  done
done
