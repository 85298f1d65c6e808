#!/usr/bin/env bash
# Both studies to their end with their exact presets, at N 8,000 / 2,000 (MNIST cut from the published test
# file, e.g. ../shared/data/mnist), seed 0: the seed study (5,000 full-batch steps) and the original study
# (6,250 epochs = 50,000 steps of B = 1,000), A-VI k = 64, F-VI and constant-VI, each under the authors'
# objective (objective = reference, not an ELBO) and under the true ELBO (the -elbo presets); the original study
# also A-VI k = 1 under the authors' objective (issue 48). Each run in its own comparison folder
# runs/end-STUDY-OBJECTIVE-GUIDE (A-VI k = 1: ...-amortized-k1), evaluated every 50 epochs, one torch thread each, its log runs/end-...log appended to,
# JOBS at a time (default 2), in this order: the seed study first (the shorter), then the original study's runs
# that decide its claim (F-VI and A-VI k = 64 under the authors' objective first). Resumable: run the same
# command again, in any later session; a finished run is left as it is. Then the report (the folders, not the
# runs/end-*.log beside them), and where the runs stand:
#   python experiments/plateau_report.py runs/end-*/ --out figures/studies-end
#   python experiments/studies_end_status.py runs/end-*/ > figures/studies-end/status.md
# Use: experiments/studies-end.sh MNIST_IDX_FOLDER, or all through the driver: python experiments/study.py studies-end
# STUDIES=original runs one study only (default: seed original), GUIDES=per-datapoint one guide's runs only
# (default: amortized per-datapoint shared), OBJECTIVES=reference one objective's (default: reference elbo), WIDTHS=64
# one encoder width's (default: 64 1); e.g. the original study's decision at seeds 1 and 2 (issue 60, item 12):
#   STUDIES=original GUIDES="amortized per-datapoint" OBJECTIVES=reference WIDTHS=64 SEEDS=1,2 RUNS=runs/seeds12
# (a RUNS other than runs/ keeps them beside, not over, the committed seed-0 runs); JOBS=1 runs one job at a time, e.g. beside
# another heavy job on a 2-core machine. On a GPU (issue 51): DEVICE=cuda SEEDS=0,1,2,3,4 REPLICAS=5 trains the
# seeds of each configuration as replicas of one batched model, RUNS=runs/cuda keeps them apart from the CPU's
# seed-0 runs, CHECKPOINT=1m checkpoints more often, JOBS=7 runs every configuration at once (the GPU is far from
# full with one; each job is one CPU thread driving it). Defaults: cpu, seed 0, 1 replica, runs, 5m.
set -euo pipefail
cd "$(dirname "$0")/.."
data=$1
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
mkdir -p "${RUNS:-runs}"
for guide in ${GUIDES:-}; do
  case $guide in amortized|per-datapoint|shared) ;;
    *) echo "studies-end.sh: unknown guide '$guide' in GUIDES (amortized, per-datapoint, shared; space-separated)" >&2
       exit 2;;
  esac
done
for objective in ${OBJECTIVES:-}; do
  case $objective in reference|elbo) ;;
    *) echo "studies-end.sh: unknown objective '$objective' in OBJECTIVES (reference, elbo; space-separated)" >&2
       exit 2;;
  esac
done
jobs=()
for study in ${STUDIES:-seed original}; do
  case $study in
    seed) jobs+=("seed reference amortized 64" "seed elbo amortized 64" "seed reference per-datapoint 64"
                 "seed elbo per-datapoint 64" "seed reference shared 64" "seed elbo shared 64");;
    original) jobs+=("original reference per-datapoint 64" "original reference amortized 64"
                     "original reference amortized 1" "original reference shared 64" "original elbo amortized 64"
                     "original elbo per-datapoint 64" "original elbo shared 64");;
    *) echo "studies-end.sh: unknown study '$study' in STUDIES (seed, original)" >&2; exit 2;;
  esac
done
for job in "${jobs[@]}"; do
  set -- $job
  case " ${GUIDES:-amortized per-datapoint shared} " in *" $3 "*) ;; *) continue;; esac
  case " ${OBJECTIVES:-reference elbo} " in *" $2 "*) ;; *) continue;; esac
  case " ${WIDTHS:-64 1} " in *" $4 "*) ;; *) continue;; esac
  while [ "$(jobs -rp | wc -l)" -ge "${JOBS:-2}" ]; do sleep 5; done
  preset=experiments/$1-study.toml; [ "$2" = elbo ] && preset=experiments/$1-study-elbo.toml
  length=(); [ "$1" = original ] && length=(--epochs 6250)  # 50,000 steps of B = 1,000 at N = 8,000
  out="${RUNS:-runs}/end-$1-$2-$3"; [ "$4" = 64 ] || out="$out-k$4"
  mirror=figures/studies-end/$(basename "$out")  # a finished seed-0 CPU run's small files, committed
  if [ "${RUNS:-runs}" = runs ] && [ -f "$mirror/results.jsonl" ] && [ ! -d "$out" ]; then
    echo "studies-end.sh: $out finished earlier (its files are in $mirror): not run again"; continue
  fi
  python -m amortized_pyro compare --config "$preset" --dataset "$data" --n-obs 8000 --n-test 2000 --guides "$3" \
    --widths "$4" --seeds "${SEEDS:-0}" --replicas "${REPLICAS:-1}" --device "${DEVICE:-cpu}" "${length[@]}" \
    --eval-every 50 --checkpoint-every "${CHECKPOINT:-5m}" --no-progress \
    --study "$1 study ($2)" --out "$out" \
    >> "$out.log" 2>&1 &  # appended: a resumed run keeps the log of its earlier sessions
done
wait
