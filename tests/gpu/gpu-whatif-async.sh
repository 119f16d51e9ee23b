#!/bin/bash
# tests/gpu/gpu-whatif-async.sh [OUTDIR] - the driver's stream-ordered pool
# (PyTorch's backend:cudaMallocAsync) on the GPU, for whatif's model of it
# (`gpumemreport whatif --policy cuda-async`):
#  1. tests/gpu/mempool_probe.cu: how the pool reserves memory, request
#     by request, on pools of its own (OUTDIR/probe.txt);
#  2. the corpus' models (tests/corpus/real.json; ASYNC_MODELS, default
#     four of them), 3 steps each, untraced, under
#     PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync: PyTorch's
#     max_memory_reserved(), the pool's reserved high
#     (OUTDIR/async.jsonl, one line per model).
# The corpus traces hold the same models' requests: whatif replays them.
set -u
cd "$(dirname "$0")/../.."
O=${1:-gpu-async-out}
mkdir -p "$O"
nvcc -O2 -cudart shared -o "$O/mempool_probe" tests/gpu/mempool_probe.cu && "$O/mempool_probe" > "$O/probe.txt" 2>&1
IFS=';' read -r -a MODELS <<< "${ASYNC_MODELS:-timm-infer;gpt2-infer --bf16;timm;gpt2 --bf16}"
: > "$O/async.jsonl"
for m in "${MODELS[@]}"; do
    name=${m%% *}
    case "$m" in *--batch\ 4*) name=gpt2-b4 ;; *--batch\ 64*) name=timm-bf16-b64 ;; esac
    line=$(PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync timeout 120 python3 tests/gpu/torch_models.py $m --steps 3 2> "$O/$name.err" | tail -n 1)
    echo "{\"model\": \"$name\", \"run\": ${line:-null}}" >> "$O/async.jsonl"
done
cat "$O/probe.txt" "$O/async.jsonl"
