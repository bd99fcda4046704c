#!/bin/bash
# Issue 32 item 5 on a GPU machine with two GPUs (device tool, nvidia-h100-x2; given two H200s and 32
# cores): the seed systems again, each with TinyBERT's task data augmentation (and, where the
# paper distils layer by layer, the two-stage schedule): recipes/mpnet/SYSTEM-augmented.yaml.
# Per task (LANES: GPU:task,...), a teacher fine-tuned from MPNet-base with about a tenth of its
# training rows held out (glue5_tasks.sh; the teachers must be made again in each session), then
# every system of SYSTEMS side by side on the task's GPU: the first one's augment stage makes the
# task's 20 copies, the others take them from the cache; TinyBERT's and MiniLM's general phase
# (from MPNet-base, one epoch of GLUE text) is trained once per shape, for both tasks (a file lock:
# the second task's run waits for it). Each stage's record and the teachers' metrics come back in
# OUT/SYSTEM-TASK/ and OUT/TASK/ (no weights), copied every minute while the runs go on.
#   MPNET=BASE_FOLDER bash bench/experiments/seed_systems_gpu.sh GLUE_DIR OUT_DIR
#   then: python3 -m bench.experiments.seed_systems_summary OUT_DIR
# SYSTEMS (default "tinybert-4l minilm-6l pkd-6l albert-share"; also theseus-6l, distilbert-6l),
# LANES (default "0:rte 1:mrpc"), THREADS (default: the cores over the processes at once).
# Estimate for the default four on RTE and MRPC, two H200s, from the 2-layer-per-GPU rates of
# bench/results/accuracy-glue5-h200x2 (6-layer student, 20 copies: 1,130 rows/s intermediate and
# 1,750 prediction per process with two per GPU, i.e. about 2,260 and 3,500 per GPU), costs per
# row scaled by the student's share of the work (teacher forward 12 layer-units, a 768-wide
# student layer 3 forward+backward; TinyBERT 0.5, MiniLM 0.55, PKD 1.0, ALBERT 1.6 of the 6-layer
# student's intermediate cost): per GPU about 90-180 s teacher, 40 s augmentation, 250 s of the
# two general phases (one epoch each, on one GPU), then RTE (42k rows) 350 s and MRPC (66k) 580 s
# of task training: about 12 minutes on RTE's GPU and 14-16 on MRPC's, within the 25 minutes with
# room for loading and scoring; theseus-6l and distilbert-6l would add about 1.5 and 3 minutes.
# Dry run on the CPU (a tiny MPNet with 12 heads, as TinyBERT's and MiniLM's attention and relation
# losses need; every phase one epoch, two copies):
#   MPNET=/tmp/tinympnet12h DEVICE=cpu LANES="0:rte" LIMITS="--train-limit 64 --dev-limit 32" HOLDOUT_ROWS=16 \
#   RECIPE_DATA="train_limit: 64, dev_limit: 32" SHRINK=1 WORK=/tmp/seedwork bash bench/experiments/seed_systems_gpu.sh GLUE_DIR OUT_DIR
set -uo pipefail
GLUE=$1; OUT=$2
source "$(dirname "$0")/gpu_lanes.sh"
SYSTEMS=${SYSTEMS:-"tinybert-4l minilm-6l pkd-6l albert-share"}
LANES=${LANES:-"0:rte 1:mrpc"}
PROCS=$(( $(echo $LANES | tr ' ,' '\n\n' | grep -c :) * $(echo $SYSTEMS | wc -w) ))
mkdir -p "$OUT/recipes"
lanes_setup
for s in $SYSTEMS; do [ -f "recipes/mpnet/$s-augmented.yaml" ] || { echo "no recipes/mpnet/$s-augmented.yaml"; exit 1; }; done
# the general phase's teacher: the pre-trained encoder in fp32 (it may have travelled in fp16)
[ -f "$WORK/mpnet/config.json" ] || python3 -m bench.experiments.widen "$MPNET" "$WORK/mpnet"

seed_lane() {  # gpu task
  local gpu=$1 task=$2 first=1 runs=() pids=()
  held_out_teacher $gpu $task || return 1
  for s in $SYSTEMS; do
    start_run $gpu $task "$(recipe_copy recipes/mpnet/$s-augmented.yaml $s-$task)" $s-$task
    pids+=($!); runs+=($s-$task)
    if [ $first = 1 ]; then   # the task's copies made once: the others find them in the cache
      first=0; wait_for "$WORK/$s-$task/01-augment" ${pids[0]}; bring_back $s-$task
    fi
  done
  watch_runs "${runs[@]}"
  for i in "${!pids[@]}"; do wait ${pids[i]} || echo "FAILED ${runs[i]}" >> "$OUT/logs/failed.txt"; done
}
run_lanes seed_lane
python3 -m bench.experiments.seed_systems_summary "$OUT" > "$OUT/logs/summary.log" 2>&1 \
  || echo "summary failed: $OUT/logs/summary.log"
echo "all done"
