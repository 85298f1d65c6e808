#!/usr/bin/env bash
# The plateau, measured (issue: the reference codes exactly): A-VI k = 64 and F-VI under the authors' exact
# preset (objective = reference, not an ELBO) and the same with the true ELBO, on MNIST 8,000 / 2,000 cut from
# the published test file (e.g. ../shared/data/mnist), 2,500 epochs = 20,000 steps of B = 1,000, plug-in MSE
# and q(theta)'s mean scale every 25 epochs (200 steps). Resumable: run the same command again.
#   experiments/plateau.sh MNIST_IDX_FOLDER SEEDS [extra options]      e.g. experiments/plateau.sh ../shared/data/mnist 0,1,2
set -euo pipefail
cd "$(dirname "$0")/.."
data=$1; seeds=$2; shift 2
for objective in reference elbo; do
  preset=experiments/original-study.toml
  [ $objective = elbo ] && preset=experiments/original-study-elbo.toml
  python -m amortized_pyro compare --config $preset --dataset "$data" --n-obs 8000 --n-test 2000 \
    --guides amortized,per-datapoint --widths 64 --seeds "$seeds" --epochs 2500 --eval-every 25 \
    --predictive-draws 0 --checkpoint-every 5m --no-progress --study "plateau ($objective)" \
    --out "runs/plateau-$objective" "$@" &
done
wait
