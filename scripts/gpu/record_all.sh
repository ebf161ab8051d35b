#!/usr/bin/env bash
# Records every NVML trace the CI tests replay (run on a GPU machine; ~4 minutes on an H200).
# Usage: scripts/gpu/record_all.sh OUT_DIR
set -u
out=${1:?usage: record_all.sh OUT_DIR}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
rec() { python3 "$here/nvml_record.py" run --out "$out" "$@" || echo "recording $2 failed" >&2; }
python3 "$here/nvml_record.py" inventory "$out/inventory.json"
nvidia-smi -q > "$out/nvidia-smi-q.txt" 2>&1
# Two jobs sharing the GPU: per-process attribution for the exporter.
rec --name share_cnn_transformer --seconds 15 'cnn_train --batch 128' 'transformer_train --batch 32'
# Labelled single workloads for the profiler's training detection (train set, seed 0).
rec --name train_cnn_b64 --seconds 10 'cnn_train --batch 64'
rec --name train_cnn_b512 --seconds 10 'cnn_train --batch 512'
rec --name train_transformer_small --seconds 10 'transformer_train --batch 16 --width 256 --layers 2'
rec --name train_mlp_fast --seconds 10 'mlp_train --batch 256'
rec --name train_dataload --seconds 10 'dataload_train --batch 64'
rec --name infer_poisson_r20 --seconds 10 'inference_poisson --rate 20 --seed 1'
rec --name irregular_s1 --seconds 10 'irregular --seed 1'
rec --name idle_notebook --seconds 10 'idle --hold-gib 4'
# Held-out runs: other sizes and seeds, never used to tune detection.
rec --name heldout_cnn_b256 --seconds 10 'cnn_train --batch 256'
rec --name heldout_transformer_big --seconds 10 'transformer_train --batch 64 --width 512 --layers 6'
rec --name heldout_dataload_b128 --seconds 10 'dataload_train --batch 128'
rec --name heldout_mlp_b32 --seconds 10 'mlp_train --batch 32'
rec --name heldout_infer_poisson_r5 --seconds 10 'inference_poisson --rate 5 --seed 7'
rec --name heldout_irregular_s9 --seconds 10 'irregular --seed 9'
rec --name heldout_idle --seconds 10 'idle --hold-gib 1'
ls -la "$out"
