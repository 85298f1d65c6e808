#!/usr/bin/env bash
# The plateau, measured: A-VI k = 64 (2,500 epochs = 20,000 steps of B = 1,000) and F-VI (1,250 epochs = 10,000
# steps) under the authors' exact preset (objective = reference, not an ELBO) and the same with the true ELBO
# (original-study-elbo.toml), on MNIST 8,000 / 2,000 cut from the published test file (e.g.
# ../shared/data/mnist), plug-in MSE and q(theta)'s mean scale every 25 epochs (200 steps). A-VI for every seed
# given, F-VI for every seed too; two runs at a time, one torch thread each; each run in its own comparison folder
# runs/plateau-OBJECTIVE-GUIDE-seedS. Resumable: run the same command again. Then the report (the folders, not the
# runs/plateau-*.log beside them):
#   python experiments/plateau_report.py runs/plateau-*/ --out figures/plateau
# Use: experiments/plateau.sh MNIST_IDX_FOLDER "0 1 2", or both through the driver: python experiments/study.py plateau
set -euo pipefail
cd "$(dirname "$0")/.."
data=$1; seeds=($2)
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
mkdir -p runs
jobs=()
for seed in "${seeds[@]}"; do jobs+=("reference amortized $seed 2500" "elbo amortized $seed 2500"); done
for seed in "${seeds[@]}"; do jobs+=("reference per-datapoint $seed 1250" "elbo per-datapoint $seed 1250"); done
for job in "${jobs[@]}"; do
  set -- $job
  while [ "$(jobs -rp | wc -l)" -ge 2 ]; do sleep 5; done
  preset=experiments/original-study.toml; [ "$1" = elbo ] && preset=experiments/original-study-elbo.toml
  python -m amortized_pyro compare --config $preset --dataset "$data" --n-obs 8000 --n-test 2000 --guides "$2" \
    --widths 64 --seeds "$3" --epochs "$4" --eval-every 25 --predictive-draws 0 --checkpoint-every 5m \
    --no-progress --study "plateau ($1)" --out "runs/plateau-$1-$2-seed$3" > "runs/plateau-$1-$2-seed$3.log" 2>&1 &
done
wait
