#!/bin/bash
# The GPU part of the benchmark (device tool, one call): the SST-2 teacher on CUDA in
# FP32/FP16/BF16, eager and torch.compile (reduce-overhead: CUDA graphs), batch 1 over
# 300 real dev sentences plus throughput at batch 32 and 128 (8 batches each); every
# variant first runs each timed input once (kernel selection and CUDA graphs are per shape).
#   bash bench/experiments/gpu_teacher.sh TEACHER_FP16_FOLDER GLUE_DIR OUT_DIR
# The teacher travels as FP16 weights (a call carries 64 MiB) and is widened back to FP32 here.
set -euo pipefail
SRC=$1; GLUE=$2; OUT=$3
python3 -m bench.experiments.widen "$SRC" /tmp/teacher
export COMPRESSOR_PROGRESS=0 GLUE_DIR=$GLUE
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/gpu.txt" || true
python3 -m compressor bench --teacher /tmp/teacher --peers none --device cuda --precisions fp32,fp16,bf16 \
  --sentences 300 --batch-sizes 32,128 --throughput-batches 8 --out "$OUT/gpu-teacher-eager.json" 2>&1 | tail -n 20
timeout 240 python3 -m compressor bench --teacher /tmp/teacher --peers none --device cuda \
  --engines pytorch,pytorch-compile --precisions fp32,fp16,bf16 --sentences 300 --batch-sizes 32,128 \
  --throughput-batches 8 --no-memory --out "$OUT/gpu-teacher-compile.json" 2>&1 | tail -n 20
