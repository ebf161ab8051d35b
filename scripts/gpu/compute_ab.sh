#!/usr/bin/env bash
# Issue #19 §1 on the GPU: two interceptor builds' compute tables in one run, so that their
# factors (share ÷ limit) are compared on the same card in the same minutes (run to run they
# move ~2 %). A is the working tree; B is the same with the files of BEFORE_DIR put over its
# src/ (e.g. the last commit's versions of the files a change touches, carried in
# .gpu-carry/). Runs A B B A (RUNS="A A" picks others), each with the interceptor's debug
# lines (OUT/<run>/KIND.err),
# and packs OUT/ab.tgz after each run (the device tool returns at most 8 files):
#   KINDS=matmul,graph bash scripts/gpu/compute_ab.sh .gpu-carry/ab-before "$OUT"
# .gpu-carry/ is not in git; the flat-out-mark A/B of e16f7f9 made its B from the parent:
#   mkdir -p .gpu-carry/ab-before && for f in ci_flatout.c ci_monitor.c ci_compute_metering.h; do
#     git show e16f7f9~1:native/cuda_intercept/src/$f > .gpu-carry/ab-before/$f; done
set -u
before=${1:?usage: compute_ab.sh BEFORE_DIR OUT_DIR}
dest=${2:?usage: compute_ab.sh BEFORE_DIR OUT_DIR}
kinds=${KINDS:-matmul,graph}
work=$(mktemp -d /tmp/compute_ab.XXXXXX)
mkdir -p "$dest" "$work/b-tree"
cp -r native/cuda_intercept "$work/b-tree/"
cp "$before"/* "$work/b-tree/cuda_intercept/src/"
make -s -C native/cuda_intercept BUILD_DIR="$work/A" lib tests > "$work/build.log" 2>&1 &&
  make -s -C "$work/b-tree/cuda_intercept" BUILD_DIR="$work/B" lib tests >> "$work/build.log" 2>&1 ||
  { cat "$work/build.log"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader > "$work/device.txt"
n=0
for v in ${RUNS:-A B B A}; do
  n=$((n + 1))
  timeout 200 python3 scripts/gpu/issue19_h200.py --lib "$work/$v/libalnair_cuda.so" \
    --testlib "$work/$v/testlib/libalnair_cuda.so" --trusted "$work/$v/trusted" \
    --out "$work/run$n-$v" --only compute --kinds "$kinds" --no-clock-probe --debug \
    > "$work/run$n-$v.log" 2>&1
  tar czf "$dest/ab.tgz" -C "$work" --exclude A --exclude B --exclude b-tree .
done
