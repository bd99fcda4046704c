#!/bin/bash
# Issue 34 on a GPU machine with two GPUs (device tool, nvidia-h200-x2): compressor auto on MPNet-base
# SST-2, MRPC and CoLA, candidates built and scored there (importance, exit heads and recovery on the
# GPU, --device cuda), their latency predicted for the 2-core deployment CPU from its table, measured
# there beforehand (auto_target_table.sh) and carried as .carry/auto-table/TABLE.json (--target-table:
# nothing is timed on the GPU machine; the pick and the teacher are measured later on the CPU). Then
# the second target: a fixed number of trials with one worker on one GPU, then with two workers
# on two GPUs (each worker its own GPU), the same trials in both (the first of the MRPC search's).
#   MPNET=BASE_FOLDER bash bench/experiments/auto_gpu.sh GLUE_DIR OUT_DIR
# Detached on the device (a device call lasts 10 minutes at most; the checkout with .carry/auto-table):
#   start: bash bench/experiments/device_detached.sh start 540 ~/res env MPNET=~/mpnet \
#            bash bench/experiments/auto_gpu.sh ~/glue ~/res
#   poll:  bash bench/experiments/device_detached.sh poll 540 ~/res
# It needs optuna there: where it is missing, the script installs the wheels in .whl/auto (carry that
# folder; 4.8 MB: optuna 5.0.0, alembic, sqlalchemy, Mako, colorlog, greenlet for Python 3.12, from
# pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64
# --platform manylinux_2_28_x86_64 -d .whl/auto ...) into ~/auto-site, first on PYTHONPATH.
# Settings (environment):
#   LANES "0:sst2 1:mrpc,cola"   the searches side by side: SST-2's teacher alone takes about 4 min
#   TRIALS 40, BUDGET 5m         each search stops at whichever comes first (then recovery and dev);
#                                40 is a cap: a trial exports MPNet-base and scores ONNX graphs on the
#                                CPU one sentence at a time (guess: 40-60 s), so 5 minutes is 5-8 trials
#   SCORE_ROWS_T                 held-out rows a trial is scored on (SST-2 1000 of its 2000; others all)
#   RECOVER 2, RECOVER_EPOCHS 1  candidates that may enter the front rebuilt with distillation
#   SCALE_TASK mrpc, SCALE_TRIALS 6, SCALE_GPUS 0,1   the one- against two-worker runs
#   PHASE all | search | scale   scale alone enqueues the trials of an earlier search if WORK has one
#   TABLE .carry/auto-table/TABLE.json; auto_space.sh's space and lengths (HEADS, PRECISIONS, SEQ_T...)
# What comes back to OUT: each search's report.json, report.md, front.png, auto.json and
# pick-recipe.yaml (the pick's recipe, no weights), the teachers' metrics, logs, commands.txt,
# scaling.json, target-table.json. The picks' graphs, to be timed on the 2-core CPU beside the
# hand-written chains, come back afterwards in parts, while the machine is still warm:
#   cd ~/acc (WORK) && bash ~/snap/bench/experiments/device_bring_back.sh pack picks */pick
#   bash ~/snap/bench/experiments/device_bring_back.sh give picks 0     (then 1, 2, ...: one call each)
#   here: bash bench/experiments/device_bring_back.sh unpack runs/auto-picks /work/.device/N ...
# Time on two H200s (estimate, no MPNet search has run there yet):
# teachers 4 min (SST-2; MRPC and CoLA 1-2 min on the other GPU), searches 5 min, their recovery and
# dev scoring 2-3 min, then the two scaling runs about 5 + 3 min (6 trials of 40-60 s): about 20
# minutes, with no room: if the first poll shows slower trials, lower SCALE_TRIALS, or run the
# searches (PHASE=search) and the scaling runs (PHASE=scale) in two sessions.
# Dry run on the CPU (tiny MPNet; its table first, as auto_target_table.sh's header says; with the
# .venv's python3 first on PATH): the three searches, 3 trials each, 2-4 minutes side by side, and
# both scaling runs finished (2 trials: the second worker started after the first had done both).
#   MPNET=/tmp/tinympnet12h HEADS=0,0.5 FFN=0 bash bench/experiments/auto_target_table.sh /tmp/tiny-table.json
#   MPNET=/tmp/tinympnet12h HEADS=0,0.5 FFN=0 TABLE=/tmp/tiny-table.json DEVICE=cpu \
#   LIMITS="--train-limit 64 --dev-limit 32" HOLDOUT_ROWS=16 AUTO_LIMITS="--train-limit 64 --dev-limit 32" \
#   TRIALS=3 SCALE_TRIALS=2 MAX_DROP=100 RECOVER_ARGS="--recover batch_size=16" WORK=/tmp/autowork \
#   bash bench/experiments/auto_gpu.sh GLUE_DIR OUT_DIR
# STUDENT=1 (issue 34's second GPU run): each search compresses the chain's distilled student, not
# the 12-layer teacher. In each lane, after the held-out teacher, the chain's first two stages run on
# the GPU (recipes/mpnet/chain-augmented.yaml, SST-2's chain-augmented-sst2.yaml, variant task2-b256,
# cut after its distill stage by gpu_recipes.py --until distill: augment, then a 6-layer student of
# the teacher's width) into WORK/TASK-student; then the search runs with --student
# WORK/TASK-student/02-distill --proxy-recover steps=$PROXY_STEPS (every trial's last pruning step
# distilled from the teacher for PROXY_STEPS optimiser steps, batch PROXY_BATCH, before it is scored),
# MIN_LAYERS 2 (of the student's 6). The teacher stays the reference (--max-drop, the report).
#   STUDENT 0|1, PROXY_STEPS 200, PROXY_BATCH 32, STUDENT_VARIANT task2-b256
# Time (estimate from bench/results/auto-mpnet-h200x4/logs/wall.txt: searches 352-710 s with their
# teachers' export and scoring, recovery and dev; and accuracy-ablation-h200x4's task2-b256 runs:
# augment 35-91 s, distill 243 s SST-2, 248 s MRPC, 327 s CoLA; held-out teachers 4 min SST-2, 1-2
# min MRPC and CoLA): per lane teacher + augment + distill + search = SST-2 4 + 1.5 + 4 + 12 = ~22
# min, MRPC 2 + 1 + 4 + 8 = ~15, CoLA 2 + 1 + 5.5 + 6 = ~15; proxy recovery makes each trial longer
# (200 steps of a 6-layer student, guess 10-20 s), so the 5-minute budgets hold fewer trials. On
# nvidia-h200-x4 with LANES="0:sst2 1:mrpc 2:cola" PHASE=search: ~22 minutes; on two GPUs
# ("0:sst2 1:mrpc,cola") ~30, over one session's device time. The scaling target is met
# (1.96x, auto-mpnet-h200x4): PHASE=search leaves it out.
#   STUDENT=1 PHASE=search LANES="0:sst2 1:mrpc 2:cola" MPNET=~/mpnet bash bench/experiments/auto_gpu.sh ~/glue ~/res
# Dry run on the CPU of the student mode (tiny MPNet and its table as above; every phase shrunk):
#   MPNET=/tmp/tinympnet12h HEADS=0,0.5 FFN=0 TABLE=/tmp/tiny-table.json DEVICE=cpu STUDENT=1 PHASE=search \
#   LANES="0:mrpc" MIN_LAYERS=1 LIMITS="--train-limit 64 --dev-limit 32" HOLDOUT_ROWS=16 \
#   AUTO_LIMITS="--train-limit 64 --dev-limit 32" RECIPE_DATA="train_limit: 64, dev_limit: 32" SHRINK=1 \
#   TRIALS=3 MAX_DROP=100 PROXY_STEPS=2 PROXY_BATCH=16 RECOVER_ARGS="--recover batch_size=16" \
#   WORK=/tmp/autowork-student bash bench/experiments/auto_gpu.sh GLUE_DIR OUT_DIR
set -uo pipefail
GLUE=$1; OUT=$2
HERE=$(dirname "$0")
source "$HERE/gpu_lanes.sh"
source "$HERE/auto_space.sh"
LANES=${LANES:-"0:sst2 1:mrpc,cola"}
TABLE=$(realpath "${TABLE:-.carry/auto-table/TABLE.json}" 2>/dev/null)
TRIALS=${TRIALS:-40}; BUDGET=${BUDGET:-5m}; RECOVER=${RECOVER:-2}; RECOVER_EPOCHS=${RECOVER_EPOCHS:-1}
SCALE_TASK=${SCALE_TASK:-mrpc}; SCALE_TRIALS=${SCALE_TRIALS:-6}; SCALE_GPUS=${SCALE_GPUS:-0,1}
PHASE=${PHASE:-all}; AUTO_LIMITS=${AUTO_LIMITS:-}; RECOVER_ARGS=${RECOVER_ARGS:-}
STUDENT=${STUDENT:-0}; PROXY_STEPS=${PROXY_STEPS:-200}; PROXY_BATCH=${PROXY_BATCH:-32}
STUDENT_VARIANT=${STUDENT_VARIANT:-task2-b256}
[ "$STUDENT" = 1 ] && MIN_LAYERS=${MIN_LAYERS:-2} && source "$HERE/auto_space.sh"   # the space again, at the student's depth
PROCS=3   # searches at once
[ -f "$TABLE" ] || { echo "no target table ${TABLE:-.carry/auto-table/TABLE.json}: measure it on the CPU (auto_target_table.sh)"; exit 1; }
if ! python3 -c "import optuna" 2>/dev/null && ls .whl/auto/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target ~/auto-site .whl/auto/*.whl
  export PYTHONPATH=~/auto-site${PYTHONPATH:+:$PYTHONPATH}
fi
python3 -c "import optuna" 2>/dev/null || { echo "optuna is not importable: carry its wheels (see the header)"; exit 1; }
mkdir -p "$OUT"
lanes_setup
cp "$TABLE" "$OUT/target-table.json"

score_rows() { local v=SCORE_ROWS_$1; case $1 in sst2) echo ${!v:-1000};; *) echo ${!v:-0};; esac; }

bring_auto() {  # name: the search's report, front, state and the pick's recipe; no weights
  mkdir -p "$OUT/$1"
  for f in report.json report.md front.png auto.json pick-recipe.yaml recovered.json; do
    [ -f "$WORK/$1/$f" ] && cp "$WORK/$1/$f" "$OUT/$1/"
  done
  find "$OUT/$1" -type f \( -name '*.json' -o -name '*.md' -o -name '*.yaml' \) -print0 \
    | xargs -0r sed -i -e "s|$WORK/|WORK/|g" -e "s|$PWD/||g" -e "s|$HOME/|~/|g"
}

auto_run() {  # gpus task name [option...]: compressor auto on WORK/TASK-holdout into WORK/NAME
  local gpus=$1 task=$2 name=$3; shift 3
  local A=(python3 -m compressor auto "$WORK/$task-holdout" --task $task --data-dir "$GLUE" --out "$WORK/$name"
    --target-table "$TABLE" --device "$DEVICE" --threads 1 --seq-len "$(auto_seq $task)" --max-drop "${MAX_DROP:-1.0}"
    --score-rows "$(score_rows $task)"
    "${AUTO_SPACE[@]}" $AUTO_LIMITS "$@")
  log "CUDA_VISIBLE_DEVICES=$gpus ${A[*]}"
  local start=$SECONDS rc
  CUDA_VISIBLE_DEVICES=$gpus "${A[@]}" > "$OUT/logs/$name.log" 2>&1; rc=$?
  echo "$name $((SECONDS - start)) s exit $rc" >> "$OUT/logs/wall.txt"
  bring_auto "$name"
  [ $rc = 0 ] || echo "FAILED $name (exit $rc): $OUT/logs/$name.log" >> "$OUT/logs/failed.txt"
  return $rc
}

student() {  # gpu task: the chain's augment and distill stages on the held-out teacher, into WORK/TASK-student
  local src=recipes/mpnet/chain-augmented.yaml args=(--variant "$STUDENT_VARIANT" --until distill
    --augment-cache "$WORK/augment-cache")
  [ $2 = sst2 ] && src=recipes/mpnet/chain-augmented-sst2.yaml
  [ -n "${RECIPE_DATA:-}" ] && args+=(--glue "$GLUE" --data "$RECIPE_DATA")
  [ "${SHRINK:-0}" = 1 ] && args+=(--shrink)
  python3 -m bench.experiments.gpu_recipes $src "$WORK/recipes/$2-student.yaml" "${args[@]}" > /dev/null || return 1
  mkdir -p "$OUT/recipes" && cp "$WORK/recipes/$2-student.yaml" "$OUT/recipes/"
  local C=(python3 -m compressor run "$WORK/recipes/$2-student.yaml" --task $2 --teacher "$WORK/$2-holdout"
    --data-dir "$GLUE" --device "$DEVICE" --out "$WORK/$2-student")
  log "CUDA_VISIBLE_DEVICES=$1 ${C[*]}"
  local start=$SECONDS
  CUDA_VISIBLE_DEVICES=$1 "${C[@]}" > "$OUT/logs/$2-student.log" 2>&1 \
    || { echo "FAILED $2-student: $OUT/logs/$2-student.log" >> "$OUT/logs/failed.txt"; return 1; }
  echo "$2-student $((SECONDS - start)) s exit 0" >> "$OUT/logs/wall.txt"
  bring_back $2-student
}

search_lane() {  # gpu task: the held-out teacher (and with STUDENT=1 the chain's student), then the search
  held_out_teacher $1 $2 || return 1
  local from=()
  if [ "$STUDENT" = 1 ]; then
    student $1 $2 || return 1
    from=(--student "$WORK/$2-student/02-distill" --proxy-recover steps=$PROXY_STEPS
          --proxy-recover batch_size=$PROXY_BATCH)
  fi
  auto_run $1 $2 auto-$2 --trials $TRIALS --budget $BUDGET --recover-candidates $RECOVER \
    --recover epochs=$RECOVER_EPOCHS $RECOVER_ARGS "${from[@]}"
}

scale() {  # SCALE_TRIALS trials with one worker on one GPU, then two workers on two GPUs
  held_out_teacher ${SCALE_GPUS%%,*} $SCALE_TASK || return 1
  local w gpus
  for w in 1 2; do
    gpus=${SCALE_GPUS%%,*}; [ $w = 2 ] && gpus=$SCALE_GPUS
    rm -rf "$WORK/scale-w$w" "$WORK/scale-w$w.journal"
    [ -f "$WORK/auto-$SCALE_TASK/auto.json" ] && python3 -m bench.experiments.auto_gpu enqueue \
      "$WORK/auto-$SCALE_TASK" "$WORK/scale-w$w.journal" $SCALE_TRIALS >> "$OUT/logs/scale.log" 2>&1
    auto_run $gpus $SCALE_TASK scale-w$w --trials $SCALE_TRIALS --workers $w --seed 1 --recover-candidates 0 \
      --storage "journal:$WORK/scale-w$w.journal"
  done
  python3 -m bench.experiments.auto_gpu scaling "$OUT" scale-w1 scale-w2 >> "$OUT/logs/scale.log" 2>&1
}

[ "$PHASE" = scale ] || run_lanes search_lane
[ "$PHASE" = search ] || scale
cp "$TABLE" "$OUT/target-table.json"
echo "all done"
