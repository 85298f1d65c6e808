#!/usr/bin/env bash
# Both studies to their end with their exact presets, at N 8,000 / 2,000 (MNIST cut from the published test
# file, e.g. ../shared/data/mnist), one seed: the seed study (5,000 full-batch steps) and the original study
# (6,250 epochs = 50,000 steps of B = 1,000), A-VI k = 64, F-VI and constant-VI, each under the authors'
# objective (objective = reference, not an ELBO) and under the true ELBO (the -elbo presets). Each run in its
# own comparison folder runs/end-STUDY-OBJECTIVE-GUIDE, evaluated every 50 epochs, two at a time, one torch thread each, in this order
# (the seed study first: it is the shorter, and its claim is the one in question). Resumable: run the same
# command again, in any later session. Then the report (the folders, not the runs/end-*.log beside them), and where
# the runs stand:
#   python experiments/plateau_report.py runs/end-*/ --out figures/studies-end
#   python experiments/studies_end_status.py runs/end-*/ > figures/studies-end/status.md
# Use: experiments/studies-end.sh MNIST_IDX_FOLDER, or all through the driver: python experiments/study.py studies-end
# STUDIES=original runs one study only (default: seed original); JOBS=1 runs one job at a time (default 2), e.g.
# beside another heavy job on a 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."
data=$1
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
mkdir -p runs
jobs=()
for study in ${STUDIES:-seed original}; do
  case $study in seed|original) ;; *) echo "studies-end.sh: unknown study '$study' in STUDIES (seed, original)" >&2; exit 2;; esac
  for guide in amortized per-datapoint shared; do
    for objective in reference elbo; do jobs+=("$study $objective $guide"); done
  done
done
for job in "${jobs[@]}"; do
  set -- $job
  while [ "$(jobs -rp | wc -l)" -ge "${JOBS:-2}" ]; do sleep 5; done
  preset=experiments/$1-study.toml; [ "$2" = elbo ] && preset=experiments/$1-study-elbo.toml
  length=(); [ "$1" = original ] && length=(--epochs 6250)  # 50,000 steps of B = 1,000 at N = 8,000
  out="runs/end-$1-$2-$3"
  python -m amortized_pyro compare --config "$preset" --dataset "$data" --n-obs 8000 --n-test 2000 --guides "$3" \
    --widths 64 --seeds 0 "${length[@]}" --eval-every 50 --checkpoint-every 5m --no-progress \
    --study "$1 study ($2)" --out "$out" \
    > "$out.log" 2>&1 &
done
wait
