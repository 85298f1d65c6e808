#!/usr/bin/env bash
# Both studies' presets on MNIST at this project's CPU reference scale (8,000 training / 2,000 test images cut
# from the MNIST test set in IDX form, e.g. ../shared/data/mnist), one seed, the full grid (A-VI k in
# {1, 64, 128, 256}, F-VI, constant-VI), TRUNCATED to fit a 2-core CPU session: the original study for 625
# epochs (5,000 steps of 50,000), the seed study for 400 full-batch steps (of 5,000). The full-length runs
# are the same commands without --epochs, meant for a GPU.
#   experiments/reference-cpu.sh original|seed MNIST_IDX_FOLDER [extra options]
set -euo pipefail
cd "$(dirname "$0")/.."
study=$1; data=$2; shift 2
case $study in
  original) epochs=625; every=25 ;;
  seed) epochs=400; every=20 ;;
  *) echo "usage: experiments/reference-cpu.sh original|seed MNIST_IDX_FOLDER [options]" >&2; exit 2 ;;
esac
python -m amortized_pyro compare --config "experiments/$study-study.toml" --dataset "$data" \
  --n-obs 8000 --n-test 2000 --seeds 0 --epochs $epochs --eval-every $every --device cpu \
  --study "$study-study (CPU, truncated)" --out "figures/$study-study-cpu" "$@"
