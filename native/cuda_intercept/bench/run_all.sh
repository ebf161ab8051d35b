#!/usr/bin/env bash
# Runs the interceptor's five GPU benchmarks and writes $OUT/results.md (+ raw JSON).
#   OUT=/some/dir native/cuda_intercept/bench/run_all.sh     or     run_all.sh /some/dir
# BENCH_QUICK=1 shortens every step (smoke test). Each step runs on its own: a failing
# step is recorded in results.md and the others still run. Needs: gcc, make, python3 with
# torch (CUDA); pynvml (nvidia-ml-py) optional, for per-process utilisation.
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-${OUT:-}}
[[ -n "$out" ]] || { echo "usage: OUT=dir $0  (or $0 dir)" >&2; exit 2; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
log="$out/run_all.log"
: > "$log"
py=${PYTHON:-python3}

{
    echo "# libalnair_cuda GPU benchmarks"
    echo
    echo "Run: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname); commit $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)${BENCH_QUICK:+ (BENCH_QUICK)}"
    echo
} > "$out/results.md"

if ! make -C "$here/.." >>"$log" 2>&1; then
    echo "**Build failed** (see run_all.log)" >> "$out/results.md"
    tail -30 "$log"
    exit 1
fi

{
    echo '## Environment'
    echo
    echo '```'
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,compute_mode --format=csv 2>&1 || true
    nvidia-smi 2>&1 | grep -m1 "CUDA Version" || true
    "$py" - <<'PY' 2>&1 || true
import sys
print("python", sys.version.split()[0])
try:
    import torch
    print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())
    p = torch.cuda.get_device_properties(0)
    print("device", p.name, "SMs", p.multi_processor_count, "mem GiB", round(p.total_memory / 2**30, 1))
except Exception as e:
    print("torch unavailable:", e)
try:
    import pynvml
    print("pynvml available")
except Exception:
    print("pynvml not installed: utilisation from nvidia-smi (device level)")
PY
    echo "library: $(ls -l "$here/../build/libalnair_cuda.so")"
    echo '```'
    echo
} >> "$out/results.md"

for step in overhead compute_limit memory_limit startup region_counters; do
    echo "== $step" | tee -a "$log"
    start=$(date +%s)
    if (cd "$here" && timeout "${BENCH_STEP_TIMEOUT:-1800}" "$py" "$step.py" "$out") >>"$log" 2>&1; then
        echo "   done in $(( $(date +%s) - start )) s"
    else
        echo "   FAILED (exit $?) after $(( $(date +%s) - start )) s; see run_all.log"
        printf '## %s\n\n**Failed** — see run_all.log:\n\n```\n%s\n```\n' "$step" "$(tail -15 "$log")" \
            > "$out/${step}_failed.md"
    fi
done

for f in "$out"/1_*.md "$out"/2_*.md "$out"/3_*.md "$out"/4_*.md "$out"/5_*.md "$out"/*_failed.md; do
    [[ -f "$f" ]] && { cat "$f"; echo; } >> "$out/results.md"
done
echo "results: $out/results.md"
