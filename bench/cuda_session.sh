#!/usr/bin/env bash
# Issue 51's GPU checks as one command on a lent GPU machine (the device tool's `run`, about 10 minutes):
#   bash bench/cuda_session.sh
# It expects, carried beside the checkout in the ignored folder .gpu/: whl/ (pyro-ppl, pyro-api and zuko wheels;
# the machine has PyTorch, pytest-xdist, click, tqdm, matplotlib and lightning, and no package registry) and
# mnist/ (the published MNIST IDX test files, ../shared/data/mnist). In this order, each part's output in $OUT:
#   env.txt       the GPU, driver, torch, CUDA, Pyro and Zuko versions
#   bench.txt     on a quiet GPU: bench/bench_step.py at the reference size (N 10,000, B 1,000, z 64, H 256);
#                 then, beside the studies: the killed-and-resumed CUDA runs' differences (tests/test_reliability.py
#                 -k cuda -s), host syncs counted (bench/cuda_syncs.py), the builders' step on CUDA
#                 (bench/builder_step.py --device cuda)
#   pytest.txt    the whole suite on the GPU machine (6 workers), beside the studies
#   runs-small.tar.gz, params.tar.gz
#                 the original study at its full length (experiments/studies-end.sh, STUDIES=original): its 7
#                 configurations at once, 5 seeds each as replicas, until they end or DEADLINE seconds (default 540) have passed, when they are stopped by SIGTERM at a checkpoint; every file but the .pt ones,
#                 and the A-VI k = 64 runs' params.pt (for their gaps)
# Switches: BENCH=0 skips the benches, SUITE=0 the whole suite, CUDA_TESTS=0 the CUDA tests, END=0 the studies;
# STUDIES (default original; seed, or "seed original"), SEEDS (0,1,2,3,4), REPLICAS (5), JOBS (7): the studies' settings
# (e.g. a resumed call: CUDA_TESTS=0 BENCH=0 SUITE=0 STUDIES=seed JOBS=6), GUIDES (experiments/studies-end.sh's); WORKERS, PYTEST_LIMIT: pytest's workers and time limit.
# Give the device tool's run a timeout_s of at least DEADLINE + 60: the studies' stop, the archives and the output
# come after DEADLINE, and a run killed at its limit brings nothing back (2026-11-26: 235 s against 270 s lost all).
set -u
OUT=${OUT:-/tmp/cuda-session}
mkdir -p "$OUT" /tmp/bin
# `python` (experiments/studies-end.sh) as the image's python3: a wrapper, since a link outside its venv loses the venv
printf '#!/bin/sh\nexec %s "$@"\n' "$(command -v python3)" > /tmp/bin/python && chmod +x /tmp/bin/python
export PATH=/tmp/bin:$PATH PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/whl/*.whl \
  || exit 1
export PYTHONPATH=/tmp/site:$PWD
{ date -u; nvidia-smi; python3 -c "import torch, pyro, zuko; print('torch', torch.__version__, 'cuda', torch.version.cuda,
torch.cuda.get_device_name(), 'pyro', pyro.__version__, 'zuko', zuko.__version__)"; nproc; } > "$OUT/env.txt" 2>&1
echo "[$SECONDS s] bench_step" | tee -a "$OUT/bench.txt"
[ "${BENCH:-1}" = 1 ] && timeout 70 python3 bench/bench_step.py --device cuda --dataset .gpu/mnist --configs reference --rounds 5 --steps 10 \
  >> "$OUT/bench.txt" 2>&1
echo "[$SECONDS s] graph_step" | tee -a "$OUT/bench.txt"  # issue 61: eager against captured, and fit --graph
[ "${BENCH:-1}" = 1 ] && timeout 150 python3 bench/graph_step.py --device cuda --dataset .gpu/mnist --fit-epochs 300 \
  >> "$OUT/bench.txt" 2>&1
studies=
if [ "${END:-1}" = 1 ]; then
echo "[$SECONDS s] studies start" | tee -a "$OUT/bench.txt"
DEVICE=cuda SEEDS=${SEEDS:-0,1,2,3,4} REPLICAS=${REPLICAS:-5} RUNS=runs/cuda CHECKPOINT=1m JOBS=${JOBS:-7} \
  STUDIES=${STUDIES:-original} \
  bash experiments/studies-end.sh .gpu/mnist &
studies=$!
fi
# the tests that need CUDA first (the machine lent on 2026-11-26 gave the process one CPU: nproc 1, so the whole
# suite did not fit one call), then the whole suite as far as PYTEST_LIMIT allows
[ "${CUDA_TESTS:-1}" = 1 ] && timeout 120 python3 -m pytest -q -rfE --tb=line -p no:cacheprovider -k "cuda" \
  tests/test_training.py tests/test_replicas.py tests/test_cli.py tests/test_static_step.py > "$OUT/pytest-cuda.txt" 2>&1
if [ "${SUITE:-1}" = 1 ]; then
  timeout "${PYTEST_LIMIT:-280}" python3 -m pytest -q -rfE --tb=line -n "${WORKERS:-6}" -p no:cacheprovider \
    > "$OUT/pytest.txt" 2>&1
  echo "[$SECONDS s] pytest exit $?" | tee -a "$OUT/bench.txt"
else
  echo "[$SECONDS s] the whole suite skipped (SUITE=0)" | tee -a "$OUT/bench.txt"
fi
[ "${BENCH:-1}" = 1 ] && timeout 90 python3 -m pytest -q -s -p no:cacheprovider tests/test_reliability.py -k cuda >> "$OUT/bench.txt" 2>&1
echo "[$SECONDS s] syncs" | tee -a "$OUT/bench.txt"
[ "${BENCH:-1}" = 1 ] && timeout 60 python3 bench/cuda_syncs.py --device cuda >> "$OUT/bench.txt" 2>&1
echo "[$SECONDS s] builder_step" | tee -a "$OUT/bench.txt"
[ "${BENCH:-1}" = 1 ] && timeout 45 python3 bench/builder_step.py --device cuda --blocks 6 --steps 10 --warmup 10 >> "$OUT/bench.txt" 2>&1
if [ -n "$studies" ]; then
  echo "[$SECONDS s] waiting for the studies" | tee -a "$OUT/bench.txt"
  while kill -0 $studies 2>/dev/null && [ $SECONDS -lt "${DEADLINE:-540}" ]; do sleep 5; done
  pkill -TERM -f "amortized_pyro compare"
  for _ in $(seq 20); do pgrep -f "amortized_pyro compare" > /dev/null || break; sleep 1; done
  echo "[$SECONDS s] studies stopped or done" | tee -a "$OUT/bench.txt"
  tar czf "$OUT/runs-small.tar.gz" --exclude='*.pt' runs/cuda
  tar czf "$OUT/params.tar.gz" runs/cuda/end-original-*-amortized/runs/*/*/params.pt 2>/dev/null
  for f in runs/cuda/end-*/runs/*/*seed0/metrics.jsonl; do echo "$f: $(tail -1 "$f" | cut -c1-150)"; done
fi
grep -E "^(FAILED|ERROR)|passed|failed|node down" "$OUT"/pytest*.txt; tail -60 "$OUT/bench.txt"
ls -la "$OUT"
