#!/usr/bin/env bash
# `alnair up --mps` on the H200: the local agent starts the MPS control daemon, two workloads
# (30 % and 70 %) run at once through `alnair run` and report what their process saw (the
# interceptor's MPS variables) and their bf16 matmul throughput; the daemon's server list.
#   bash scripts/gpu/repo_env.sh bash scripts/gpu/mps_up_check.sh "$OUT"     (carry .whl; as root)
set -uo pipefail
out=${1:?usage: mps_up_check.sh OUT}
root=$(cd "$(dirname "$0")/../.." && pwd)
lib=/tmp/alnair-b/libalnair_cuda.so
[ -f "$lib" ] || make -s -C "$root/native/cuda_intercept" BUILD_DIR=/tmp/alnair-b lib
data=$(mktemp -d /tmp/alnair-mps-XXXX)
python3 -m alnair_cli up --mps --interceptor "$lib" --data-dir "$data" --port 4399 > "$out/up.log" 2>&1 &
up=$!
for _ in $(seq 90); do python3 -m alnair_cli status --data-dir "$data" >/dev/null 2>&1 && break; sleep 1; done
prog='
import os, time, torch
a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16); b = torch.randn_like(a)
for _ in range(20): a @ b
torch.cuda.synchronize(); n, t0 = 0, time.time()
while time.time() - t0 < 10: a @ b; n += 1
torch.cuda.synchronize(); dt = time.time() - t0
print({k: os.environ.get(k) for k in ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")})
print("TFLOPS", round(2 * 4096**3 * n / dt / 1e12, 1))'
for c in 100; do python3 -m alnair_cli run --data-dir "$data" --name alone --gpu-memory 8 --gpu-compute $c -- python3 -c "$prog" > "$out/alone.log" 2>&1; done
python3 -m alnair_cli run --data-dir "$data" --name low --gpu-memory 8 --gpu-compute 30 -- python3 -c "$prog" > "$out/low.log" 2>&1 &
python3 -m alnair_cli run --data-dir "$data" --name high --gpu-memory 8 --gpu-compute 70 -- python3 -c "$prog" > "$out/high.log" 2>&1 &
sleep 6
pipe=$(ls -d "$data"/mps/*/pipe | head -1)
echo get_server_list | CUDA_MPS_PIPE_DIRECTORY=$pipe nvidia-cuda-mps-control > "$out/servers.txt" 2>&1
nvidia-smi > "$out/nvidia-smi.txt" 2>&1
wait %2 %3 2>/dev/null; sleep 1
for f in alone low high; do echo "== $f"; tail -3 "$out/$f.log"; done
echo "== servers"; cat "$out/servers.txt"; grep -i "mps\|M+C\|python" "$out/nvidia-smi.txt" | head -5
kill -INT $up; wait $up
echo quit | CUDA_MPS_PIPE_DIRECTORY=$pipe nvidia-cuda-mps-control
grep -i "mps" "$out/up.log" | head -5
