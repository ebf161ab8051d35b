#!/usr/bin/env bash
# What the open issues still need from a GPU, in one device command (~10 min; as root, from
# the repo root, with `carry: [".whl", ".gpu-carry"]` as README.md says for cache_epochs.py):
#   1. issue #19 §1: the compute table (matmul, CUDA graph, launch-bound loop at
#      90/70/50/30/10 %, one process each), then the launch-bound loop once more with the
#      interceptor's debug lines (the pace that sets its cap);
#   2. issue #16: cache_epochs.py (epoch 1 vs five warm epochs, batched and per-sample reads);
#   3. issue #19 §2: MPS pairs with an 8192² matmul beside the 4096² one, each with the
#      unlimited MPS pair of the same run (does the higher tenant's shortfall at 4096² come
#      from its 512 tiles quantised into waves on a partition's SMs?).
# Each step writes under OUT as it goes, so a command cut off at its limit still returns
# what finished.
#   bash scripts/gpu/unmeasured.sh "$OUT"
set -u
out=${1:?usage: unmeasured.sh OUT_DIR}
mkdir -p "$out"
{ nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader; date -u
  git rev-parse --short HEAD 2>/dev/null; } > "$out/device.txt"
make -s -C native/cuda_intercept BUILD_DIR=/tmp/b lib tests > "$out/build.log" 2>&1
timeout 240 python3 scripts/gpu/issue19_h200.py --lib /tmp/b/libalnair_cuda.so \
  --testlib /tmp/b/testlib/libalnair_cuda.so --trusted /tmp/b/trusted --out "$out/compute" \
  --only compute > "$out/compute.log" 2>&1
LD_PRELOAD=/tmp/b/libalnair_cuda.so ALNAIR_WORKSPACE=$(mktemp -d) ALNAIR_CUDA_DEBUG=1 timeout 60 \
  python3 scripts/gpu/issue19_h200.py --compute small > "$out/small.json" 2> "$out/small.err"
ALNAIR_TESTBIN=$(bash scripts/gpu/testbin_carried.sh) timeout 300 bash scripts/gpu/repo_env.sh \
  python3 scripts/gpu/cache_epochs.py --out "$out/cache_epochs" --width 128 --epochs 6 > "$out/cache_epochs.log" 2>&1
echo "cache_epochs exit $?" >> "$out/cache_epochs.log"
for size in 8192 4096; do
  timeout 130 python3 scripts/gpu/issue19_mps.py --lib /tmp/b/libalnair_cuda.so --out "$out/mps$size" \
    --size "$size" --phases mps_alone,mps_pair_none,single_30,pair_30_70,pair_10_90,quad_10_20_30_40 \
    > "$out/mps$size.log" 2>&1
done
