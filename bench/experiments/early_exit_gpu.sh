#!/usr/bin/env bash
# Early exit trained jointly (the model and its exits on a weighted sum of every exit's loss,
# exit i weighing i) on all of SST-2: full forward and backward passes every step, too slow for
# this project's 2-core CPU (there it ran on 6,000 rows only; not run yet: a job for the GPU
# machine). Self-distillation and two-stage training cache the fixed model's outputs and run
# on the CPU. Copy OUT back and time it here with bench.experiments.early_exit_bench.
#
#   bash bench/experiments/early_exit_gpu.sh runs/teachers/minilm-l6-sst2 $GLUE_DIR OUT
#   # then, on the CPU machine:
#   flock -x /tmp/cpu.lock python -m bench.experiments.early_exit_bench --model OUT/joint \
#       --data-dir $GLUE_DIR --out bench/results/early-exit-joint-minilm-l6-sst2.json
set -euo pipefail
TEACHER=${1:?teacher checkpoint}
GLUE=${2:?GLUE data folder}
OUT=${3:?output folder}
PY=${PYTHON:-python}
mkdir -p "$OUT"
for mode in joint; do
  extra=()
  if [ "$mode" = joint ]; then extra=(--set lr=2e-5 --set epochs=2 --set precision=bf16); fi
  "$PY" -m compressor early-exit "$TEACHER" --out "$OUT/$mode" --data-dir "$GLUE" --overwrite \
    --set training=$mode --set device=cuda --set batch_size=32 --set rule=entropy \
    --set calibrate.rows=2000 --set calibrate.target=0.99 "${extra[@]}" | tee "$OUT/$mode.log"
done
