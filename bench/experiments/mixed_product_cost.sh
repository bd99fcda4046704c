#!/bin/bash
# What one matrix product kept FP32 costs in a chain's INT8 graph (issue 32: can a mixed graph that
# keeps single products FP32, not whole layers, stay within 1.10x today's chain?). On a chain's
# rebuilt shape (chain_latency_same_shape's work folder: WORK/TASK/chain-onnx, random weights),
# dynamic INT8 with nothing, one product, four products or two whole layers kept FP32 (as the mixed
# method writes them: dynamic INT8 with those nodes excluded), timed with today's chain and the run's
# own INT8 choice in one `compressor bench` (each graph in its own process, in rounds; batch 1 over
# the task's dev sentences; 1 thread).
#   GLUE_DIR=../shared/glue_data bash bench/experiments/mixed_product_cost.sh [WORK] [TASK] [OUT_JSON]
# Defaults: runs/chain-latency-same-shape, cola, bench/results/chain-latency-h200x1/mixed-product-cost-cola-cpu.json
set -euo pipefail
WORK=${1:-runs/chain-latency-same-shape}; TASK=${2:-cola}
OUT=${3:-bench/results/chain-latency-h200x1/mixed-product-cost-$TASK-cpu.json}
SRC=$WORK/$TASK/chain-onnx; B=runs/mixed-product-cost/$TASK; L=/mpnet/encoder
PY=${PY:-.venv/bin/python}
[ -f "$SRC/model.onnx" ] || { echo "no $SRC/model.onnx: run bench.experiments.chain_latency_same_shape first"; exit 2; }
rm -rf "$B" && mkdir -p "$B"
q() { local out=$1; shift; flock -s /tmp/cpu.lock $PY -m compressor quantize "$SRC" --method dynamic --threads 1 \
        --out "$B/$out" "$@" >> "$B/quantize.log" 2>&1; }
x() { for n in "$@"; do printf -- '--exclude %s ' "$L/$n/MatMul"; done; }
q all-int8
q l1-ffn-in $(x layer.1/intermediate/dense)
q l1-ffn-out $(x layer.1/output/dense)
q l1-attn $(x layer.1/attention/attn/q layer.1/attention/attn/k layer.1/attention/attn/v layer.1/attention/attn/o)
q l12-all $(for l in 1 2; do x layer.$l/attention/attn/q layer.$l/attention/attn/k layer.$l/attention/attn/v \
                                 layer.$l/attention/attn/o layer.$l/intermediate/dense layer.$l/output/dense; done)
COMPRESSOR_PROGRESS=0 flock -x /tmp/cpu.lock $PY -m compressor bench "$B"/all-int8 "$B"/l1-ffn-in "$B"/l1-ffn-out \
  "$B"/l1-attn "$B"/l12-all "$WORK/$TASK/chain-int8" "$WORK/$TASK/today-int8" --peers none --task "$TASK" \
  --threads 1 --sentences 200 --batch-sizes none --no-score --no-memory --out "$B/bench"
mkdir -p "$(dirname "$OUT")" && cp "$B/bench/bench.json" "$OUT.tmp" && mv "$OUT.tmp" "$OUT" && echo "wrote $OUT"
