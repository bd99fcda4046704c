#!/bin/bash
# BERT-of-Theseus on MPNet-base (12 layers) to 6 layers on one GPU (device tool): fine-tune the
# SST-2 teacher (one epoch, lr 2e-5, bf16: 93.46 dev in an earlier session), then compress it
# twice side by side on the same GPU: a constant replacement rate of 0.5 and the linear
# curriculum from b = 0.3, each with 2 epochs of replacing and 1 epoch of fine-tuning the six
# successors (each a copy of its group's last layer), task loss alone as in the paper.
# MPNet's layers share one relative-position bias, computed once per forward pass.
# Dev is scored once, at the end of each run (no checkpoint is chosen on dev).
#   bash bench/experiments/mpnet_theseus_gpu.sh MPNET_FOLDER GLUE_DIR OUT_DIR
# MPNET_FOLDER holds the base encoder (fp16 weights are widened to fp32 first);
# LIMITS="--train-limit 64 --dev-limit 32" DEVICE=cpu LAYERS=2 make a dry run on a small model.
set -euo pipefail
SRC=$1; GLUE=$2; OUT=$3
export COMPRESSOR_PROGRESS=0 PYTHONUNBUFFERED=1 TRANSFORMERS_VERBOSITY=error
WORK=${WORK:-$HOME/mpnet-theseus}; DEVICE=${DEVICE:-cuda}; LIMITS=${LIMITS:-}
PRECISION=${PRECISION:-bf16}; [ "$DEVICE" = cpu ] && PRECISION=fp32
ONCE=1000000
mkdir -p "$WORK" "$OUT/logs"
: > "$OUT/commands.txt"
log() { echo "$*" | sed "s|$HOME/|~/|g" >> "$OUT/commands.txt"; }
python3 -m bench.experiments.widen "$SRC" "$WORK/mpnet"
CMD=(python3 -m compressor finetune "$WORK/mpnet" --task sst2 --data-dir "$GLUE" --out "$WORK/teacher"
  --epochs 1 --lr 2e-5 --batch-size 32 --max-length 128 --warmup 0.06 --eval-every $ONCE --seed 42
  --precision $PRECISION --device "$DEVICE" --overwrite $LIMITS)
log "${CMD[@]}"; "${CMD[@]}" > "$OUT/logs/teacher.log" 2>&1
cp "$WORK/teacher/metrics.json" "$OUT/mpnet-teacher-metrics.json"
for sched in constant linear; do
  extra=(--set schedule=constant --set rate=0.5); [ $sched = linear ] && extra=(--set schedule=linear --set b=0.3)
  CMD=(python3 -m compressor theseus "$WORK/teacher" --out "$WORK/theseus-$sched" --data-dir "$GLUE"
    --set num_layers=${LAYERS:-6} --set init=last "${extra[@]}" --set replacing_epochs=2 --set finetune_epochs=1
    --set lr=5e-5 --set batch_size=32 --set max_length=128 --set eval_every=$ONCE --set device="$DEVICE"
    --set precision=$PRECISION --overwrite $LIMITS)
  log "${CMD[@]}"
  ( "${CMD[@]}" > "$OUT/logs/theseus-$sched.log" 2>&1 && \
    cp "$WORK/theseus-$sched/metrics.json" "$OUT/mpnet-theseus-$sched-metrics.json" ) &
done
wait
