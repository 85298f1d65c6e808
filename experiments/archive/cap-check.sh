#!/usr/bin/env bash
# Does compare's cap on q* (COMPARE_GAP's max_steps: 3,000 Adam steps when this was run, 1,500 now) bias the gaps? The gap of three study runs
# measured again as compare measured it (same settings and seed) but with a cap of 20,000 steps and no AIS, into
# runs/cap-check. One torch thread, about 15 minutes a report on this CPU. Needs the test gap reports of
# runs/sa-vi-5's A-VI k = 64 seed 0 (experiments/sa-vi.sh), runs/gap-vs-n/n8000's A-VI k = 64 seed 0
# (experiments/gap-vs-n.sh) and runs/informative's F-VI seed 0 (experiments/informative.sh: F-VI, whose test q* hit
# the cap for 52 of 60 images). Reports already there are kept. Then prints the paired per-image differences against
# them (experiments/archive/cap_check.py) and writes them into figures/cap-check (python experiments/study.py cap-check
# --report-only). Through the driver, which first checks the three reports are there: python experiments/study.py cap-check
set -euo pipefail
cd "$(dirname "$0")/../.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
mkdir -p runs/cap-check
check() {  # run name of the report
  local run=$1 name=$2
  [ -f "$run/gap-test.json" ] || { echo "cap-check.sh: no $run/gap-test.json" >&2; exit 2; }
  [ -e "runs/cap-check/$name.json" ] || python -m amortized_pyro gap "$run" --split test --n-images 20 \
    --theta-draws 4 --importance-samples 1000 --samples 100 --max-steps 20000 --ais-steps 0 \
    --out "runs/cap-check/$name.json"
}
n8000=(runs/gap-vs-n/n8000/runs/*/A-VI_k_64-seed0)  # * is the MNIST folder's name: one expected
[ "${#n8000[@]}" -eq 1 ] || { echo "cap-check.sh: ${#n8000[@]} runs match ${n8000[*]}, one expected" >&2; exit 2; }
check runs/sa-vi-5/runs/mnist-sample/A-VI_k_64-seed0 A-VI_k_64-seed0-test-20000
check "${n8000[0]}" n8000-A-VI_k_64-seed0-test-20000
check runs/informative/runs/mnist-sample/F-VI-seed0 informative-F-VI-seed0-test-20000
python experiments/study.py cap-check --report-only
