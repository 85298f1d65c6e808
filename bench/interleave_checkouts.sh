#!/usr/bin/env bash
# A bench of two checkouts of this repository, run alternately, each with its own package (PYTHONPATH), so
# that drift of the machine falls on both alike: the training step (bench_step.py) unless BENCH names another
# script of both checkouts (e.g. BENCH=bench/profile_gap.py, options RUN_DIR --n-images 20 --wall-only):
#     bash bench/interleave_checkouts.sh BEFORE_DIR AFTER_DIR [REPEATS] [the bench's options...]
# e.g. before = `git worktree add /tmp/before <commit>`. One thread (OMP_NUM_THREADS=1) unless set.
set -euo pipefail
before=$1 after=$2 repeats=${3:-3}
shift $(( $# < 3 ? $# : 3 ))
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
for i in $(seq "$repeats"); do
    for dir in "$before" "$after"; do
        echo "## $(git -C "$dir" rev-parse --short HEAD) ($dir), repeat $i"
        PYTHONPATH="$dir" python "$dir/${BENCH:-bench/bench_step.py}" "$@"
    done
done
