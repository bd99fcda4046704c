#!/bin/bash
# The headline's teachers (issue 14): MPNet-base fine-tuned on SST-2, MRPC, STS-B, RTE and CoLA
# side by side on one GPU (device tool, one call), bf16, lr 2e-5, warm-up 6%, max length 128,
# seed 42; SST-2 2 epochs at batch 32, CoLA 3 epochs at batch 32, MRPC, STS-B and RTE 5 epochs
# at batch 16. Dev is scored once, at the end of each run (no choice made on dev). The models
# stay on the GPU machine (220 MB each in fp16); their metrics come back, with the GLUE-5 score
# (the mean of the five task scores, as the leaderboard averages) from
# bench.experiments.glue5_summary.
#   bash bench/experiments/mpnet_glue5_teachers.sh MPNET_FOLDER GLUE_DIR OUT_DIR
# LIMITS="--train-limit 64 --dev-limit 32" DEVICE=cpu make a dry run on a small model.
set -euo pipefail
SRC=$1; GLUE=$2; OUT=$3
export COMPRESSOR_PROGRESS=0 PYTHONUNBUFFERED=1 TRANSFORMERS_VERBOSITY=error
WORK=${WORK:-$HOME/glue5}; DEVICE=${DEVICE:-cuda}; LIMITS=${LIMITS:-}
PRECISION=${PRECISION:-bf16}; [ "$DEVICE" = cpu ] && PRECISION=fp32
ONCE=1000000
mkdir -p "$WORK" "$OUT/logs"
: > "$OUT/commands.txt"
python3 -m bench.experiments.widen "$SRC" "$WORK/mpnet"
source "$(dirname "$0")/glue5_tasks.sh"
for task in sst2 cola mrpc stsb rte; do
  set -- $task $(teacher_spec $task)   # task epochs batch
  CMD=(python3 -m compressor finetune "$WORK/mpnet" --task "$1" --data-dir "$GLUE" --out "$WORK/$1"
    --epochs "$2" --batch-size "$3" --lr 2e-5 --max-length 128 --warmup 0.06 --eval-every $ONCE --seed 42
    --precision $PRECISION --device "$DEVICE" --overwrite $LIMITS)
  echo "${CMD[*]}" | sed "s|$HOME/|~/|g" >> "$OUT/commands.txt"
  task=$1
  ( "${CMD[@]}" > "$OUT/logs/$task.log" 2>&1 && cp "$WORK/$task/metrics.json" "$OUT/$task-metrics.json" \
    || echo "FAILED $task" >> "$OUT/logs/failed.txt" ) &
done
wait
cat "$OUT/logs/failed.txt" 2>/dev/null || true
