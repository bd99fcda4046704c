#!/usr/bin/env bash
# MPNet-base early exit at full size on this 2-core CPU (issue 14): CoLA, the task whose exits
# leave earliest on the GPU runs (mean exit layer 4.1 of 12 on dev). The GPU machine's models are
# not kept, so the chain is trained here, on a shorter teacher schedule (1 epoch, lr 4e-5, where
# the GPU script gives 3 at 2e-5; the same 850 training rows held out), then
# recipes/mpnet/early-exit-holdout.yaml exactly as the GPU runs it (exits after every layer, the
# threshold calibrated on the held-out rows, INT8 segments with layers 6-7 FP32), and
# `compressor bench` times the chain beside the same teacher in PyTorch FP32, its fused INT8
# without exits and optimum's O2 + INT8, each in its own process, in rounds, at batch 1 over 300
# dev sentences, 1 and 2 threads; every variant scored on all of CoLA's dev.
#   MPNET=/tmp/mpnet-base GLUE_DIR=../shared/glue_data flock -x /tmp/cpu.lock bash bench/experiments/mpnet_early_exit_cpu.sh
# TASK=stsb (the GPU script's held-out rows and batch size for it: 600, 16) runs another task;
# the bench is then named bench-TASK-cpu.json and the records go to run-TASK/ (CoLA's: run/).
set -euo pipefail
: "${MPNET:?MPNET=the MPNet-base folder (../shared/tools/get-mpnet-teacher.sh)}" "${GLUE_DIR:?}"
W=${WORK:-runs/mpnet-cpu} OUT=${OUT:-bench/results/mpnet-glue5/early-exit-cpu} T=${TASK:-cola}
source "$(dirname "$0")/glue5_tasks.sh"
held=$(holdout_rows $T) || { echo "TASK is one of sst2 mrpc stsb rte cola" >&2; exit 2; }
bs=$(teacher_spec $T | cut -d' ' -f2)   # the GPU teachers' batch size (one epoch here)
rec=run; [ $T = cola ] || rec=run-$T
C=(.venv/bin/compressor)
mkdir -p "$W" "$OUT"
run() { echo "$*" | sed "s|$HOME/|~/|g" >> "$OUT/commands.txt"; "$@"; }
[ -f "$W/$T-holdout/metrics.json" ] || run "${C[@]}" finetune "$MPNET" --task $T --data-dir "$GLUE_DIR" \
  --out "$W/$T-holdout" --epochs 1 --batch-size $bs --lr 4e-5 --max-length 128 --warmup 0.06 \
  --eval-every 1000000 --seed 42 --device cpu --holdout $held --overwrite
[ -f "$W/ee-$T/manifest.json" ] && grep -q early_exit_export "$W/ee-$T/manifest.json" || \
  run "${C[@]}" run recipes/mpnet/early-exit-holdout.yaml --task $T --teacher "$W/$T-holdout" \
    --data-dir "$GLUE_DIR" --device cpu --out "$W/ee-$T"
[ -f "$W/$T-holdout-onnx/manifest.json" ] || run "${C[@]}" export "$W/$T-holdout" --out "$W/$T-holdout-onnx" \
  --data-dir "$GLUE_DIR" --overwrite
[ -f "$W/$T-holdout-int8/quantize.json" ] || run "${C[@]}" quantize "$W/$T-holdout-onnx" --out "$W/$T-holdout-int8" \
  --data-dir "$GLUE_DIR" --overwrite
run "${C[@]}" bench "teacher-int8=$W/$T-holdout-int8" "early-exit-int8=$W/ee-$T/02-early_exit_export" \
  --teacher "$W/$T-holdout" --task $T --data-dir "$GLUE_DIR" --peers ort-o2-int8 --device cpu --threads 1,2 \
  --sentences 300 --batch-sizes none --no-memory --work-dir "$W/peers-$T" --out "$OUT/bench-$T-cpu.json"
# the records (no weights): the teacher's, the recipe run's manifest, report and stage records
cp "$W/$T-holdout/metrics.json" "$OUT/teacher-$T-holdout-metrics.json"
run_out=$(realpath "$OUT")/$rec
mkdir -p "$run_out" && ( cd "$W/ee-$T" && find . -maxdepth 2 \( -name '*.json' -o -name '*.md' \) \
  -not -name 'tokenizer*' -not -name 'special_tokens_map.json' -print0 | xargs -0 cp --parents -t "$run_out" )
find "$OUT" -type f -name '*.json' -print0 | xargs -0 sed -i -e "s|$PWD/||g" -e "s|$HOME/|~/|g"
echo "results: $OUT/bench-$T-cpu.json"
