#!/usr/bin/env bash
# torch's threads on this machine: `fit` (ms per epoch, from the run's summary.json) and `gap` (wall seconds)
# with 1 and 2 threads, on an idle machine and on a busy one (a second copy of the same command running at
# the same time, as when a user starts two jobs), each setting alone, one after another:
#     bash bench/archive/threads.sh RUN_DIR [OUT_DIR]
# RUN_DIR: a finished run for `gap` (e.g. runs/profile-avi64: A-VI k = 64 on the shipped sample). The fit is
# the README's quick-start size (shipped sample, N 2,500, width 64) for a few epochs. Threads are set through
# the commands' own --threads.
set -euo pipefail
run=$1 out=${2:-$(mktemp -d)}
epochs=${EPOCHS:-20} images=${IMAGES:-5}
mkdir -p "$out"
fit() {  # $1 threads, $2 name
    python -m amortized_pyro fit --guide amortized --width 64 --dataset mnist-sample --n-obs 2500 --epochs "$epochs" \
        --threads "$1" --out "$out/$2" --overwrite >/dev/null 2>&1
    python -c "import json, sys; print('%.0f' % json.load(open(sys.argv[1]))['ms_per_epoch'])" "$out/$2/summary.json"
}
gap() {  # $1 threads, $2 name
    local began=$(date +%s.%N)
    python -m amortized_pyro gap "$run" --n-images "$images" --max-steps 1500 --threads "$1" --out "$out/$2.json" \
        --overwrite >/dev/null 2>&1
    python -c "import sys; print('%.1f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$began" "$(date +%s.%N)"
}
echo "| command | threads | idle | busy (two at once: each) |"
echo "|---|---|---|---|"
for threads in 1 2; do
    idle=$(fit "$threads" fit-idle-$threads)
    fit "$threads" fit-busy-a-$threads > "$out/busy-a" & fit "$threads" fit-busy-b-$threads > "$out/busy-b"; wait
    echo "| fit, ms per epoch ($epochs epochs) | $threads | $idle | $(cat "$out/busy-a") · $(cat "$out/busy-b") |"
done
for threads in 1 2; do
    idle=$(gap "$threads" gap-idle-$threads)
    gap "$threads" gap-busy-a-$threads > "$out/busy-a" & gap "$threads" gap-busy-b-$threads > "$out/busy-b"; wait
    echo "| gap, wall s ($images images) | $threads | $idle | $(cat "$out/busy-a") · $(cat "$out/busy-b") |"
done
