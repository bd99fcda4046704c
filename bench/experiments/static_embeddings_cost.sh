#!/bin/bash
# What storing the word-embedding table INT8 changes in a static INT8 graph (size, latency): on a
# chain's rebuilt shape (chain_latency_same_shape's work folder: WORK/TASK/chain-onnx, random
# weights), static INT8 with the table FP32 (--no-embeddings-int8, as static INT8 was built before)
# and INT8 (one scale per row, the default), timed with today's chain in one `compressor bench`
# (each graph in its own process, in rounds; batch 1 over the task's dev sentences; 1 thread).
#   GLUE_DIR=../shared/glue_data bash bench/experiments/static_embeddings_cost.sh [WORK] [TASK] [OUT_JSON]
# Defaults: runs/chain-latency-same-shape, mrpc, bench/results/chain-latency-h200x1/static-embeddings-mrpc-cpu.json
set -euo pipefail
WORK=${1:-runs/chain-latency-same-shape}; TASK=${2:-mrpc}
OUT=${3:-bench/results/chain-latency-h200x1/static-embeddings-$TASK-cpu.json}
SRC=$WORK/$TASK/chain-onnx; B=runs/static-embeddings/$TASK
PY=${PY:-.venv/bin/python}
[ -f "$SRC/model.onnx" ] || { echo "no $SRC/model.onnx: run bench.experiments.chain_latency_same_shape first"; exit 2; }
rm -rf "$B" && mkdir -p "$B"
q() { local out=$1; shift; flock -s /tmp/cpu.lock $PY -m compressor quantize "$SRC" --method static --preset auto \
        --task "$TASK" --threads 1 --dev-limit 16 --out "$B/$out" "$@" >> "$B/quantize.log" 2>&1; }
q table-fp32 --no-embeddings-int8
q table-int8
du -b "$B"/table-*/model.onnx "$WORK/$TASK/today-int8/model.onnx" | tee "$B/sizes.txt"
COMPRESSOR_PROGRESS=0 flock -x /tmp/cpu.lock $PY -m compressor bench "$B"/table-fp32 "$B"/table-int8 \
  "$WORK/$TASK/today-int8" --peers none --task "$TASK" --threads 1 --sentences 200 --batch-sizes none \
  --no-score --no-memory --out "$B/bench"
mkdir -p "$(dirname "$OUT")" && cp "$B/bench/bench.json" "$OUT.tmp" && mv "$OUT.tmp" "$OUT" && echo "wrote $OUT"
