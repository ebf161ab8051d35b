#!/usr/bin/env bash
# One H200 command for issue #19 §4 and issue #18's one-GPU elastic job (carry .whl):
#   bash scripts/gpu/elastic_footprint_h200.sh "$OUT"
# 1. the interceptor built; 2. PyTorch, CuPy and JAX filling a 4 GiB limit, NVML's figure for
# each process against the limit (issue19_footprint.py); 3. an elastic job of 4 workers on 25 %
# shares of the one GPU under `alnair up` with the interceptor (gloo all-reduce of CUDA
# tensors; NCCL refuses two ranks on one device), workers killed, recovery and goodput
# (services/elastic_job/bench/recovery_bench.py).
set -uo pipefail
out=${1:?usage: elastic_footprint_h200.sh OUT}
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$out/gpu.csv" 2>&1
make -s -C native/cuda_intercept BUILD_DIR=/tmp/alnair-b lib > "$out/build.log" 2>&1 || { cat "$out/build.log"; exit 1; }
timeout 200 python3 scripts/gpu/issue19_footprint.py --lib /tmp/alnair-b/libalnair_cuda.so --out "$out" \
  > "$out/footprint.log" 2>&1
echo "footprint rc=$?"; tail -5 "$out/footprint.log"
timeout 330 bash scripts/gpu/repo_env.sh python3 services/elastic_job/bench/recovery_bench.py \
  --gpus "" --interceptor /tmp/alnair-b/libalnair_cuda.so --device cuda --width 4096 --world 4 \
  --compute 25 --step-sleep 0.05 --kills 6 --goodput 45 --goodput-steps 1500 --out "$out/elastic.json" \
  > "$out/elastic.log" 2>&1
echo "elastic rc=$?"; tail -25 "$out/elastic.log"
