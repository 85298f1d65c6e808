#!/usr/bin/env bash
# The chapter's remedies side by side (issue 31): A-VI k = 64; SA-VI r = 5 and 20 (Adam, straight-through) and
# r = 5 with Kim et al.'s inner loop (SGD with momentum on clipped gradients, η = 0.03 from bench/archive/refine_sweep.py);
# iterative amortized inference T = 5; A-VI with a flow of K = 2 and 4 transforms; F-VI and F-VI with a flow (K = 2);
# seeds 0, 1, 2, on the INFORMATIVE preset at N = 8,000 training and 2,000 test images cut from MNIST_IDX_FOLDER
# (e.g. ../shared/data/mnist), 157 epochs of B = 250 (5,024 steps: the informative study's budget, not a
# convergence criterion), then every run's gaps on 20 training and 20 test images (compare's gap settings: M 4,
# S 32, K 1,000, AIS 200 steps; for a flow guide q* and the q*_m in its own flow family at Adam's 0.01, up to
# 3,000 steps, the best Gaussian beside).
# One comparison folder per cell, runs/remedies/CELL, one after the other, cheapest first, one torch thread.
# Resumable: run the same command again. Then the report: python experiments/study.py remedies --report-only
# (after the cells, the cost of inference on one new image: experiments/inference_costs.py measure, below)
# Use: experiments/remedies.sh MNIST_IDX_FOLDER [CELL ...], or through the driver:
#      python experiments/study.py remedies --data ../shared/data/mnist
# Named cells alone (e.g. two processes on two cores, each with its own cells): experiments/remedies.sh DATA a-vi f-vi
set -euo pipefail
cd "$(dirname "$0")/.."
data=$1
shift
source experiments/lib/cells.sh
cells="a-vi f-vi flow-2 flow-4 f-vi-flow-2 ia-vi-5 sa-vi-5 sa-vi-5-momentum sa-vi-20"
check_cells cell "$cells" "$@"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
mkdir -p runs/remedies
cell() {  # NAME, then compare's options for it
  local name=$1
  shift
  if ! chosen "$name"; then return; fi
  python -m amortized_pyro compare --config experiments/informative.toml --widths 64 --seeds 0,1,2 \
    --dataset "$data" --n-obs 8000 --n-test 2000 --epochs 157 --eval-every 50 --gap-images 20 \
    --checkpoint-every 5m --no-progress --study "remedies: $name" --out "runs/remedies/$name" "$@" \
    >> runs/remedies.log 2>&1
}
cell a-vi --guides amortized
cell f-vi --guides per-datapoint
cell flow-2 --guides amortized --flow 2
cell flow-4 --guides amortized --flow 4
cell f-vi-flow-2 --guides per-datapoint --flow 2
cell ia-vi-5 --guides iterative --iterations 5
cell sa-vi-5 --guides semi-amortized --refine-steps 5
cell sa-vi-5-momentum --guides semi-amortized --refine-steps 5 --refine-optimizer sgd-momentum --refine-lr 0.03
cell sa-vi-20 --guides semi-amortized --refine-steps 20
# The cost of inference on one new image, each cell's seed-0 run side by side in one process: measured once, after
# a run of every cell (not with named cells: then measure by hand, the command below, once every cell is done);
# the report copies the file into figures/remedies and draws inference.md from it
if [ "$named_cells" = "  " ] && [ ! -e runs/remedies/inference.jsonl ]; then
  # shellcheck disable=SC2046
  python experiments/inference_costs.py measure $(printf 'runs/remedies/%s ' $cells) \
    --out runs/remedies/inference.jsonl >> runs/remedies.log 2>&1
fi
