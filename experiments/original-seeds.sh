#!/usr/bin/env bash
# The original study's decision at seeds 1 and 2 (issue 60, item 12): A-VI k = 64 and F-VI under the authors'
# objective to 50,000 steps, experiments/studies-end.sh's runs (one thread each, two at a time, resumable: run this
# again in a later session) kept apart in runs/seeds12. The report (each run's small files mirrored under
# figures/studies-end/seeds12/, and seeds 0-2 side by side in original.md and original.png there, seed 0 from its
# committed files): python experiments/study.py original-seeds --report-only
# Use: experiments/original-seeds.sh MNIST_IDX_FOLDER (e.g. ../shared/data/mnist)
set -euo pipefail
cd "$(dirname "$0")/.."
STUDIES=original GUIDES="amortized per-datapoint" OBJECTIVES=reference WIDTHS=64 SEEDS=1,2 RUNS=runs/seeds12 \
  bash experiments/studies-end.sh "$1"
