#!/bin/bash
# Issue 32's teacher-INT8 target (>= 99.5% of FP32 on every task) where the held-out INT8 choice
# misses it: CoLA (53.12 against 54.17, 98.1%, with 8-11 units kept FP32;
# bench/results/accuracy-glue5-h200x2/cola-teacher-int8). Q8BERT's quantisation-aware training of
# the teacher itself (recipes/mpnet/q8bert-qat.yaml: one epoch with every product fake-quantised,
# half on the FP32 teacher's soft targets, then dynamic INT8 of its graph), on a GPU, on the
# teacher fine-tuned with rows held out as every GPU session fine-tunes it (glue5_tasks.sh): dev and
# the held-out rows are each scored once, at the end.
#   MPNET=BASE_FOLDER bash bench/experiments/teacher_qat_gpu.sh GLUE_DIR OUT_DIR
# LANES (default "0:cola"); QAT_SEEDS (default 42): one QAT run per seed, side by side, on the same
# teacher (TASK-teacher-qat, TASK-teacher-qat-seedN). About 2.5 minutes for CoLA on one H200.
# Dry run on the CPU: MPNET=/tmp/tinympnet DEVICE=cpu LIMITS="--train-limit 64 --dev-limit 32" HOLDOUT_ROWS=16 \
#   RECIPE_DATA="train_limit: 64, dev_limit: 32" SHRINK=1 WORK=/tmp/tqwork bash bench/experiments/teacher_qat_gpu.sh GLUE_DIR OUT_DIR
set -uo pipefail
GLUE=$1; OUT=$2
source "$(dirname "$0")/gpu_lanes.sh"
LANES=${LANES:-"0:cola"}
PROCS=$(echo $LANES | tr ' ,' '\n\n' | grep -c :)
lanes_setup
mkdir -p "$OUT/recipes"
QAT_SEEDS=${QAT_SEEDS:-42}   # QAT's own seed (row order, dropout); the teacher's stays 42
one_task() {  # gpu task
  held_out_teacher "$1" "$2" || return 1
  local seed run recipe pids=() runs=()
  for seed in $QAT_SEEDS; do
    run=$2-teacher-qat; [ "$seed" = 42 ] || run=$run-seed$seed
    recipe=$(recipe_copy recipes/mpnet/q8bert-qat.yaml $run)
    python3 -c "import sys, yaml; p = sys.argv[1]; d = yaml.safe_load(open(p))
d['stages'][0]['quantize']['train']['seed'] = int(sys.argv[2]); yaml.safe_dump(d, open(p, 'w'), sort_keys=False)" \
      "$recipe" "$seed" && cp "$recipe" "$OUT/recipes/"
    start_run "$1" "$2" "$recipe" "$run"; pids+=($!); runs+=("$run")
  done
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || echo "FAILED ${runs[$i]}" >> "$OUT/logs/failed.txt"
    bring_back "${runs[$i]}"
  done
}
run_lanes one_task
echo "all done"
