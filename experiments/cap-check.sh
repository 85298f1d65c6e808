#!/usr/bin/env bash
# Does compare's cap on q* (COMPARE_GAP's max_steps: 3,000 Adam steps when this was run, 1,500 now) bias the gaps? The gap of two study runs measured
# again as compare measured it (same settings and seed) but with a cap of 20,000 steps and no AIS, then the
# paired per-image differences against the committed reports (experiments/cap_check.py). One torch thread,
# about 15 minutes a report on this CPU. Needs runs/sa-vi-5 (experiments/sa-vi.sh), runs/gap-n-8000
# (experiments/gap-vs-n.sh) and runs/informative (experiments/informative.sh: F-VI, whose test q* hit the cap for
# 52 of 60 images). Reports already there are kept.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
mkdir -p runs/cap-check
check() {  # run name of the report
  local run=$1 name=$2
  [ -e "runs/cap-check/$name.json" ] || python -m amortized_pyro gap "$run" --split test --n-images 20 \
    --theta-draws 4 --importance-samples 1000 --samples 100 --max-steps 20000 --ais-steps 0 \
    --out "runs/cap-check/$name.json"
  python experiments/cap_check.py "$run/gap-test.json" "runs/cap-check/$name.json"
}
check runs/sa-vi-5/runs/mnist-sample/A-VI_k_64-seed0 A-VI_k_64-seed0-test-20000
check "runs/gap-n-8000/runs/.._shared_data_mnist/A-VI_k_64-seed0" n8000-A-VI_k_64-seed0-test-20000
check runs/informative/runs/mnist-sample/F-VI-seed0 informative-F-VI-seed0-test-20000
