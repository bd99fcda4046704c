#!/bin/bash
# BERT-of-Theseus on this CPU at the demo's budget: the demo's teacher (runs/demo-teacher =
# runs/demo/00-teacher of `make demo`, 6 layers) compressed to 3 layers with one epoch of the
# packaged 16,000 SST-2 rows in all (half an epoch replacing, half fine-tuning the successors;
# the demo's 3-layer distilled student had one epoch too), task loss alone as in the paper;
# a constant replacement rate of 0.5 and the linear curriculum from 0.3 to 1, side by side.
#   bash bench/experiments/theseus_cpu.sh TEACHER WORK OUT_JSON
set -euo pipefail
TEACHER=$1; WORK=$2; OUT=$3
PY=${PY:-.venv/bin/python}
COMMON="--model $TEACHER --data-dir embedded --overwrite --set num_layers=3 --set init=last \
  --set replacing_epochs=0.5 --set finetune_epochs=0.5 --set lr=1e-4 --set batch_size=32 \
  --set max_length=64 --set warmup=0 --set eval_every=100 --set device=cpu"
COMPRESSOR_PROGRESS=0 $PY -m compressor theseus $COMMON --out "$WORK/constant" \
  --set schedule=constant --set rate=0.5 &
COMPRESSOR_PROGRESS=0 $PY -m compressor theseus $COMMON --out "$WORK/linear" \
  --set schedule=linear --set b=0.3 &
wait
$PY -m bench.experiments.theseus_summary "$WORK" "$OUT" "bash bench/experiments/theseus_cpu.sh $TEACHER $WORK $OUT"
