#!/bin/bash
# 90% unstructured sparsity with recovery on this CPU: the demo's teacher (runs/demo-teacher,
# = runs/demo/00-teacher of `make demo`), its encoder's linear weights pruned by magnitude to
# 90% on a cubic schedule while it learns its own unpruned soft targets for one epoch of the
# packaged 16,000 SST-2 rows (the demo's budget); only checkpoints at full sparsity are kept.
#   bash bench/experiments/prune_magnitude_cpu.sh TEACHER WORK OUT_JSON
set -euo pipefail
TEACHER=$1; WORK=$2; OUT=$3
PY=${PY:-.venv/bin/python}
CMD="$PY -m compressor prune $TEACHER --out $WORK --method magnitude --data-dir embedded \
  --set sparsity=0.9 --set schedule=gradual --set scope=global --set max_length=64 \
  --recover mode=distill --recover losses.kd=1 --recover losses.kd.temperature=2 --recover epochs=1 \
  --recover lr=1e-4 --recover batch_size=32 --recover max_length=64 --recover warmup=0 \
  --recover eval_every=100 --recover device=cpu --overwrite"
COMPRESSOR_PROGRESS=0 $CMD
$PY -m bench.experiments.prune_record "$WORK" "$OUT" "bash bench/experiments/prune_magnitude_cpu.sh $TEACHER $WORK $OUT"
