#!/usr/bin/env bash
# What the open issues still need from a GPU, in one device command (as root, from the repo
# root, with `carry: [".whl", ".gpu-carry"]` as README.md says for cache_epochs.py). The
# steps, in this order (STEPS picks some; the default runs all, ~10 min):
#   compute  issue #19 §1: the compute table (matmul, CUDA graph, launch-bound loop at
#            90/70/50/30/10 %, one process each; ~2 min); `compute compute` measures the
#            spread between two runs of the same code on one machine; `compute-noprobe`
#            the same without nvidia-smi reading the clock beside the measured loop;
#   small    the launch-bound loop once more with the interceptor's debug lines (the pace
#            that sets its cap);
#   cache    issue #16: cache_epochs.py with CACHE_ARGS (default: the 12,000-sample set,
#            six epochs a way);
#   mps      issue #19 §2: MPS pairs at 8192² and 4096², each with the unlimited MPS pair of
#            the same run.
# The device tool brings back at most 8 files, none deeper than two folders, so the steps
# write under a work directory and OUT/unmeasured.tgz is packed again after each step: a
# command cut off at its limit still returns what finished (`tar xzf unmeasured.tgz`).
#   bash scripts/gpu/unmeasured.sh "$OUT"
#   STEPS="compute compute cache" CACHE_ARGS="--samples 36000 --epochs 4" bash scripts/gpu/unmeasured.sh "$OUT"
set -u
dest=${1:?usage: unmeasured.sh OUT_DIR}
steps=${STEPS:-compute small cache mps}
cache_args=${CACHE_ARGS:---epochs 6}
out=$(mktemp -d /tmp/unmeasured.XXXXXX)
mkdir -p "$dest"
pack() { tar czf "$dest/unmeasured.tgz.part" -C "$out" . && mv "$dest/unmeasured.tgz.part" "$dest/unmeasured.tgz"; }
{ nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader; date -u
  git rev-parse --short HEAD 2>/dev/null; echo "steps: $steps; cache: $cache_args"; } > "$out/device.txt"
make -s -C native/cuda_intercept BUILD_DIR=/tmp/b lib tests > "$out/build.log" 2>&1
pack
n=0
for step in $steps; do
  n=$((n + 1))
  case $step in
  compute | compute-noprobe)
    timeout 240 python3 scripts/gpu/issue19_h200.py --lib /tmp/b/libalnair_cuda.so \
      --testlib /tmp/b/testlib/libalnair_cuda.so --trusted /tmp/b/trusted --out "$out/$step$n" \
      --only compute $([ "$step" = compute ] || echo --no-clock-probe) > "$out/$step$n.log" 2>&1 ;;
  small)
    LD_PRELOAD=/tmp/b/libalnair_cuda.so ALNAIR_WORKSPACE=$(mktemp -d) ALNAIR_CUDA_DEBUG=1 timeout 60 \
      python3 scripts/gpu/issue19_h200.py --compute small > "$out/small.json" 2> "$out/small.err" ;;
  cache)
    # shellcheck disable=SC2086 # CACHE_ARGS is a list of options
    ALNAIR_TESTBIN=$(bash scripts/gpu/testbin_carried.sh) timeout 300 bash scripts/gpu/repo_env.sh \
      python3 scripts/gpu/cache_epochs.py --out "$out/cache_epochs" --width 128 $cache_args \
      > "$out/cache_epochs.log" 2>&1
    echo "cache_epochs exit $?" >> "$out/cache_epochs.log" ;;
  mps)
    for size in 8192 4096; do
      timeout 130 python3 scripts/gpu/issue19_mps.py --lib /tmp/b/libalnair_cuda.so --out "$out/mps$size" \
        --size "$size" --phases mps_alone,mps_pair_none,single_30,pair_30_70,pair_10_90,quad_10_20_30_40 \
        > "$out/mps$size.log" 2>&1
      pack
    done ;;
  *) echo "unknown step $step (compute, compute-noprobe, small, cache, mps)" >> "$out/device.txt" ;;
  esac
  pack
done
