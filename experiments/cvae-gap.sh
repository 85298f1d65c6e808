#!/usr/bin/env bash
# The CVAE's gap (issue 50, item 4): the three gaps of a conditional VAE (--conditional: the decoder reads
# [z, one-hot(c)], the encoder [x, one-hot(c)], p(z | c) = N(0, I), Sohn et al.'s baseline) against the VAE at
# equal settings: A-VI k = 64 and F-VI, seeds 0, 1, 2, on the INFORMATIVE preset at N = 8,000 training and 2,000
# test images cut from MNIST_IDX_FOLDER (e.g. ../shared/data/mnist) with its labels, 157 epochs of B = 250 (5,024
# steps: the architectures' and remedies' budget, not a convergence criterion), then every run's gaps on 20
# training and 20 test images (compare's gap settings: M 4, S 32, K 1,000, AIS 200 steps). Both designs cut the
# same images (--data-seed 0) and a run's gap images are drawn by its gap seed (0 + the run's seed) from a split
# of the same size, so each seed's gap images, and the draws, are the same images in both designs: the report
# pairs the CVAE's gaps with the VAE's by (seed, image). One comparison folder per design, runs/cvae-gap/vae and
# runs/cvae-gap/cvae, the VAE first, one torch thread; the log appended to runs/cvae-gap.log.
# Resumable: run the same command again. Then the report: python experiments/study.py cvae-gap --report-only
# (figures/cvae-gap/gaps.md: the gaps, then each configuration's gaps minus A-VI k=64's and minus F-VI's, paired).
# Use: experiments/cvae-gap.sh MNIST_IDX_FOLDER [DESIGN ...], or through the driver:
#      python experiments/study.py cvae-gap --data ../shared/data/mnist
# Named designs alone (e.g. two processes on two cores): experiments/cvae-gap.sh DATA cvae
# Smaller, for a test (environment; the defaults are the issue's settings): CVAE_GAP_N_OBS (8000),
# CVAE_GAP_N_TEST (2000), CVAE_GAP_EPOCHS (157), CVAE_GAP_SEEDS (0,1,2), CVAE_GAP_IMAGES (20), and
# CVAE_GAP_OPTIONS (none): more compare options for both designs, e.g. "--hidden 16 --gap-max-steps 10"
# (tests/test_cvae_gap.py runs the whole pipeline so on the shipped sample, DATA = mnist-sample).
set -euo pipefail
cd "$(dirname "$0")/.."
data=$1
shift
source experiments/lib/cells.sh
check_cells design "vae cvae" "$@"
n_obs=${CVAE_GAP_N_OBS:-8000}
n_test=${CVAE_GAP_N_TEST:-2000}
epochs=${CVAE_GAP_EPOCHS:-157}
seeds=${CVAE_GAP_SEEDS:-0,1,2}
images=${CVAE_GAP_IMAGES:-20}
read -r -a options <<< "${CVAE_GAP_OPTIONS:-}"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
mkdir -p runs/cvae-gap
design() {  # NAME, then compare's options for it
  local name=$1
  shift
  if ! chosen "$name"; then return; fi
  python -m amortized_pyro compare --config experiments/informative.toml --guides amortized,per-datapoint \
    --widths 64 --seeds "$seeds" --dataset "$data" --data-seed 0 --n-obs "$n_obs" --n-test "$n_test" \
    --epochs "$epochs" --eval-every 50 --gap-images "$images" --checkpoint-every 5m --no-progress \
    --study "cvae-gap: $name" --out "runs/cvae-gap/$name" "$@" ${options[@]+"${options[@]}"} \
    >> runs/cvae-gap.log 2>&1
}
design vae
design cvae --conditional --class-prior standard
