#!/usr/bin/env bash
# Which setting of experiments/informative.toml makes z carry information? A-VI k = 64, one seed, the preset
# with one or two settings put back to the studies' values: obs_scale 1 (studies: 1/sqrt(2)), init_scale e^-2,
# lr 1e-3. Each cell is a one-run comparison in figures/informative-ablation/CELL/. About 15 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
cell() {
  local name=$1; shift
  python -m amortized_pyro compare --config experiments/informative.toml --dataset mnist-sample \
    --guides amortized --widths 64 --seeds 0 --study "ablation: $name" --device cpu \
    --out "figures/informative-ablation/$name" "$@"
}
cell preset
cell obs1 --obs-scale 1
cell init-e-2 --init-scale 0.1353352832366127
cell obs1-init-e-2 --obs-scale 1 --init-scale 0.1353352832366127
cell lr1e-3 --lr 1e-3
