#!/bin/bash
# Accuracy against the share of heads and FFN neurons removed, before and after recovery, at
# the demo's budget on this CPU: the demo's 3-layer distilled student (runs/demo-student =
# runs/demo/01-distill of `make demo`) loses 25%, 50% and 75% of both, each time recovered
# by half an epoch of the packaged rows distilling the unpruned student's soft targets
# (the demo's prune stage, at three shares).
#   bash bench/experiments/prune_recovery_curve.sh STUDENT WORK OUT_JSON
set -euo pipefail
STUDENT=$1; WORK=$2; OUT=$3
PY=${PY:-.venv/bin/python}
for share in 0.25 0.5 0.75; do
  COMPRESSOR_PROGRESS=0 $PY -m compressor prune "$STUDENT" --out "$WORK/$share" --data-dir embedded \
    --set heads=$share --set ffn=$share --set importance_rows=256 --set max_length=64 \
    --recover mode=distill --recover losses.kd=1 --recover losses.kd.temperature=2 \
    --recover epochs=0.5 --recover lr=1e-4 --recover batch_size=32 --recover max_length=64 \
    --recover warmup=0 --recover eval_every=125 --overwrite
done
$PY -m bench.experiments.prune_recovery_curve "$WORK" "$OUT" "bash bench/experiments/prune_recovery_curve.sh $STUDENT $WORK $OUT"
