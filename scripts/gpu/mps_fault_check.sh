#!/usr/bin/env bash
# A client's fatal GPU fault under `alnair up --mps` on the H200 (issue #19 §2: what MPS cannot
# do, detected and reported, never a silent hang). A "victim" workload (50 %) runs a bf16
# matmul loop for 25 s and reports its progress; 5 s in, a "faulter" (30 %) writes through a
# bad device pointer (CuPy raw kernel: an illegal address, a fatal fault). Then an "after"
# workload runs a short matmul: does the card serve new work once the faulted clients are
# gone? Each `alnair run` under `timeout 90`, so a hang shows as exit 124. Collected: exit
# codes, the workloads' output, `alnair ps --json`, `alnair events`, the MPS control daemon's
# log and server list, the agent's log.
#   bash scripts/gpu/repo_env.sh bash scripts/gpu/mps_fault_check.sh "$OUT"     (carry .whl; as root)
set -uo pipefail
out=${1:?usage: mps_fault_check.sh OUT}
root=$(cd "$(dirname "$0")/../.." && pwd)
lib=/tmp/alnair-b/libalnair_cuda.so
[ -f "$lib" ] || make -s -C "$root/native/cuda_intercept" BUILD_DIR=/tmp/alnair-b lib
data=$(mktemp -d /tmp/alnair-mpsfault-XXXX)
python3 -m alnair_cli up --mps --interceptor "$lib" --data-dir "$data" --port 4398 > "$out/up.log" 2>&1 &
up=$!
for _ in $(seq 90); do python3 -m alnair_cli status --data-dir "$data" >/dev/null 2>&1 && break; sleep 1; done
victim='
import time, torch
a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16); b = torch.randn_like(a)
t0, n = time.time(), 0
try:
    while time.time() - t0 < 25:
        a @ b; n += 1
        if n % 200 == 0: torch.cuda.synchronize(); print("progress", n, round(time.time() - t0, 1), flush=True)
    torch.cuda.synchronize(); print("victim finished", n)
except Exception as e:
    print("victim error after", round(time.time() - t0, 1), "s:", type(e).__name__, str(e)[:300], flush=True)
    raise SystemExit(3)'
faulter='
import cupy
k = cupy.RawKernel(r"""extern "C" __global__ void k(unsigned long long p) { *(volatile int*)p = 1; }""", "k")
x = cupy.ones(1 << 20); x.sum()  # a context and some work first
print("faulting", flush=True)
k((1,), (1,), (cupy.uint64(0x10),))
cupy.cuda.Device().synchronize()
print("no fault?")'
after='
import torch
a = torch.randn(2048, 2048, device="cuda"); print("after ok", float((a @ a).sum()) != 0.0)'
run() { local name=$1 compute=$2 prog=$3; shift 3
  timeout 90 python3 -m alnair_cli run --data-dir "$data" --name "$name" --gpu-memory 8 --gpu-compute "$compute" \
    -- python3 -c "$prog" > "$out/$name.log" 2>&1; echo "$name exit $?" >> "$out/exits.txt"; }
run victim 50 "$victim" &
victim_job=$!
sleep 8
pipe=$(ls -d "$data"/mps/*/pipe | head -1)
echo get_server_list | CUDA_MPS_PIPE_DIRECTORY=$pipe nvidia-cuda-mps-control > "$out/servers_before.txt" 2>&1
t_fault=$(date +%s.%N)
run faulter 30 "$faulter"
echo "fault at $t_fault, faulter back at $(date +%s.%N)" >> "$out/exits.txt"
wait $victim_job 2>/dev/null
echo "victim back at $(date +%s.%N)" >> "$out/exits.txt"
echo get_server_list | CUDA_MPS_PIPE_DIRECTORY=$pipe nvidia-cuda-mps-control > "$out/servers_between.txt" 2>&1
run after 30 "$after"
echo get_server_list | CUDA_MPS_PIPE_DIRECTORY=$pipe nvidia-cuda-mps-control > "$out/servers_after.txt" 2>&1
python3 -m alnair_cli ps --json --data-dir "$data" > "$out/ps.json" 2>&1
timeout 10 python3 -m alnair_cli events --data-dir "$data" > "$out/events.txt" 2>&1
cp -r "$(dirname "$pipe")/log" "$out/mps-log" 2>/dev/null
kill -INT $up; wait $up
echo quit | CUDA_MPS_PIPE_DIRECTORY=$pipe nvidia-cuda-mps-control
cat "$out/exits.txt"; for f in victim faulter after; do echo "== $f"; tail -4 "$out/$f.log"; done
echo "== servers"; cat "$out"/servers_*.txt; echo "== agent"; grep -i "mps\|fault" "$out/up.log" | tail -8
echo "== mps control log"; tail -15 "$out/mps-log/control.log" 2>/dev/null
