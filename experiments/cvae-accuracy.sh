#!/usr/bin/env bash
# Why a CVAE's draws did not show their class, and a recipe whose draws do (issue 63): conditional runs on the
# shipped sample (the informative preset, experiments/informative.toml, + --conditional --decoder-prior none:
# Sohn et al.'s CVAE with a point-estimated decoder, A-VI k = 128), one setting changed at a time from that
# baseline, seeds 0, 1, 2, each trained alone (one torch thread), then each run's conditional accuracy: 200 draws
# of z per class from p(z | c), decoded at θ, classified by a 5-nearest-neighbour classifier on the run's 3,000
# labelled images (experiments/cvae_accuracy.py; amortized_pyro/report/class_accuracy.py).
#   base       z_dim 64 (the preset's)              z8         z_dim 8
#   long       1,500 epochs (3x the preset's 500)    noenc      q(z | x): the encoder reads the image alone
#   learned    p(z | c) learned, N(μ_c, σ_c²)        every      the label at every decoder layer's input
#   bernoulli  Bernoulli likelihood, binarized       obs3       obs_scale 0.3 (the preset's 0.1: a weaker likelihood)
#   recipe     experiments/cvae.toml: the preset as a CVAE with z_dim 2
# Runs in runs/cvae-accuracy/VARIANT-seedS, the log appended to runs/cvae-accuracy.log; resumable (a finished
# run is kept; an unfinished one is started again). Then the report:
#   python experiments/study.py cvae-accuracy --report-only
# Use: experiments/cvae-accuracy.sh [VARIANT ...] (named variants alone, e.g. one process per core)
set -euo pipefail
cd "$(dirname "$0")/.."
source experiments/lib/cells.sh
check_cells variant "base z8 noenc learned every bernoulli obs3 recipe long" "$@"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
mkdir -p runs/cvae-accuracy
variant() {  # NAME, then fit's options for it
  local name=$1 seed out
  shift
  if ! chosen "$name"; then return; fi
  for seed in 0 1 2; do
    out=runs/cvae-accuracy/$name-seed$seed
    if [ -f "$out/summary.json" ]; then continue; fi
    rm -rf "$out"
    python -m amortized_pyro fit --dataset mnist-sample --seed "$seed" --no-progress --out "$out" "$@" \
      >> runs/cvae-accuracy.log 2>&1
  done
}
preset=(--config experiments/informative.toml --conditional --decoder-prior none)
variant base "${preset[@]}"
variant z8 "${preset[@]}" --z-dim 8
variant noenc "${preset[@]}" --no-encoder-label
variant learned "${preset[@]}" --class-prior learned
variant every "${preset[@]}" --decoder-label every-layer
variant bernoulli "${preset[@]}" --likelihood bernoulli --binarize
variant obs3 "${preset[@]}" --obs-scale 0.3
variant recipe --config experiments/cvae.toml
variant long "${preset[@]}" --epochs 1500
