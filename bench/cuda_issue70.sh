#!/usr/bin/env bash
# Issue 70, item 4, as one command on a lent GPU machine (the device tool's `run`, timeout_s 480, carry [".gpu"]):
#   bash bench/cuda_issue70.sh
# It expects .gpu/ as bench/cuda_session.sh does (whl/: pyro-ppl, pyro-api, zuko; mnist/: the MNIST IDX test files).
# In $OUT: env.txt; graph.txt (bench/graph_step.py: the eager step against the captured one, three guides);
# run.txt (bench/gpu_run_length.py: the 50,000-step reference run with --graph, 3,000 steps eager, five seeds as
# replicas against one, torch.compile(mode="reduce-overhead") against the captured step); pytest-cuda.txt (the
# CUDA tests of the captured step, the runs and the packs). Each part under its own timeout, the runs' first.
set -u
OUT=${OUT:-/tmp/cuda-issue70}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/whl/*.whl \
  || exit 1
export PYTHONPATH=/tmp/site:$PWD
{ date -u; nvidia-smi; python3 -c "import torch, pyro, zuko; print('torch', torch.__version__, 'cuda', torch.version.cuda,
torch.cuda.get_device_name(), 'pyro', pyro.__version__, 'zuko', zuko.__version__)"; nproc; } > "$OUT/env.txt" 2>&1
part() {  # part SECONDS FILE COMMAND...: one measurement under its own limit, its exit status logged beside it
  local limit=$1 file=$2; shift 2
  echo "[$SECONDS s] $*" >> "$OUT/$file"
  timeout "$limit" "$@" >> "$OUT/$file" 2>&1
  echo "[$SECONDS s] exit $?" >> "$OUT/$file"
}
R="python3 bench/gpu_run_length.py"
part 120 run.txt $R fit --dataset .gpu/mnist --epochs 5000 --graph
part 60 run.txt $R fit --dataset .gpu/mnist --epochs 300
part 75 run.txt $R replicas --dataset .gpu/mnist --epochs 300 --replicas 5
part 80 run.txt $R compile --dataset .gpu/mnist --rounds 5 --steps 10
part 60 graph.txt python3 bench/graph_step.py --device cuda --dataset .gpu/mnist --rounds 4 --steps 10
part 70 pytest-cuda.txt python3 -m pytest -q -rfE --tb=short -p no:cacheprovider -k cuda tests/test_static_step.py \
  tests/test_training.py tests/test_replicas.py tests/test_cli.py
cat "$OUT/run.txt" "$OUT/graph.txt"; tail -5 "$OUT/pytest-cuda.txt"
