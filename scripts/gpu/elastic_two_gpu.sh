#!/usr/bin/env bash
# Issue #21 on the lent machine (carry .whl):  bash scripts/gpu/elastic_two_gpu.sh "$OUT" [whole|share|all]
# With two or more GPUs: services/elastic_job/bench/two_gpu_bench.py as issue #21 asks (whole
# cards, NCCL, a ~300M GPT; then two fractional jobs). With one GPU, the dry run: the same
# phases on shares of the one card, two ranks per job on gloo, a smaller model. First, the
# job's script alone on one card (NCCL, world 1): the step time and memory a worker needs.
set -uo pipefail
out=${1:?usage: elastic_two_gpu.sh OUT [whole|share|all]}
phases=${2:-all}
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0  # NVLink multicast stays off on the lent machines
gpus=$(nvidia-smi -L | grep -c '^GPU')
{ nvidia-smi -L; nvidia-smi topo -m; python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version())'; } \
  > "$out/machine.txt" 2>&1
make -s -C native/cuda_intercept BUILD_DIR=/tmp/alnair-b lib > "$out/build.log" 2>&1 || { cat "$out/build.log"; exit 1; }
ck=$(mktemp -d)
if [ -z "${SKIP_ALONE:-}" ]; then  # SKIP_ALONE=1: straight to the bench
CKPT_DIR=$ck SAMPLES=1600 CKPT_EVERY=100 timeout 150 torchrun --standalone --nproc-per-node=1 \
  services/elastic_job/bench/train_transformer.py > "$out/alone.log" 2>&1
echo "alone rc=$? (300m GPT, NCCL, world 1)"
python3 - "$ck/steps.log" <<'EOF' | tee -a "$out/machine.txt"
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
gaps = [float(b[2]) - float(a[2]) for a, b in zip(rows[10:], rows[11:])]
print(f"alone: {len(rows)} steps, median step {statistics.median(gaps):.4f} s, "
      f"{8 / statistics.median(gaps):.1f} samples/s, slowest {max(gaps):.3f} s (a checkpoint)")
EOF
fi
bench=(bash scripts/gpu/repo_env.sh python3 services/elastic_job/bench/two_gpu_bench.py --gpus ""
       --interceptor /tmp/alnair-b/libalnair_cuda.so --keep /tmp/alnair-2gpu-work)
[ "$phases" = all ] && phases="whole share"
if [ "$gpus" -ge 2 ]; then
  args=(--share-samples 60000)
else
  args=(--whole-share 45 --backend gloo --model 40m --share 25 --share-max 4 --share-samples 20000)
fi
rm -rf /tmp/alnair-2gpu-work
timeout 470 "${bench[@]}" "${args[@]}" --phases $phases --out "$out/bench.json" > "$out/bench.log" 2>&1
echo "bench rc=$? ($gpus GPU(s), phases: $phases)"
grep -E '^(scale|kill|take back|allocator|static|whole failed|share failed)' "$out/bench.log" | cut -c1-900
tail -5 "$out/bench.log"
tar -C /tmp/alnair-2gpu-work -czf "$out/logs.tgz" alnair/logs 2>/dev/null
