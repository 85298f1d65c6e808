#!/usr/bin/env bash
# Both studies' presets on MNIST at this project's CPU reference scale (8,000 training / 2,000 test images cut
# from the MNIST test set in IDX form, e.g. ../shared/data/mnist), one seed, the full grid (A-VI k in
# {1, 64, 128, 256}, F-VI, constant-VI), TRUNCATED to fit a 2-core CPU session: the original study for 625
# epochs (5,000 steps of 50,000), the seed study for 250 full-batch steps (of 5,000). The full-length runs
# are the same commands without --epochs, meant for a GPU. original-long and seed-long: A-VI k = 64, F-VI and
# constant-VI only, for 2,500 epochs (20,000 steps) and 1,000 full-batch steps.
#   experiments/archive/reference-cpu.sh original|seed|original-long|seed-long MNIST_IDX_FOLDER [extra options]
set -euo pipefail
cd "$(dirname "$0")/../.."
study=$1; data=$2; shift 2
grid=()
case $study in
  original) preset=original; epochs=625; every=25 ;;
  seed) preset=seed; epochs=250; every=25 ;;
  original-long) preset=original; epochs=2500; every=50; grid=(--widths 64) ;;
  seed-long) preset=seed; epochs=1000; every=50; grid=(--widths 64) ;;
  *) echo "usage: experiments/archive/reference-cpu.sh original|seed|original-long|seed-long MNIST_IDX_FOLDER [options]" >&2
     exit 2 ;;
esac
python -m amortized_pyro compare --config "experiments/$preset-study.toml" --dataset "$data" \
  --n-obs 8000 --n-test 2000 --seeds 0 --epochs $epochs --eval-every $every --device cpu "${grid[@]}" \
  --study "$study-study (CPU, truncated)" --out "figures/$study-study-cpu" "$@"
