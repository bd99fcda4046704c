#!/bin/bash
# Issue 32 item 6 on a GPU machine with two GPUs (device tool, nvidia-h100-x2; given two H200s and
# 32 cores): the ablation of recipes/mpnet/chain-augmented.yaml on CoLA, RTE and MRPC (SST-2, given in
# LANES, starts from chain-augmented-sst2.yaml), every variant
# of a task on one teacher fine-tuned with about a tenth of its rows held out (made again in each
# session). The variants are bench/experiments/accuracy_ablation.py's (the chain's recipe with one
# thing changed); a variant that changes a late stage starts from the chain's finished stages.
#   MPNET=BASE_FOLDER bash bench/experiments/accuracy_ablation_gpu.sh GLUE_DIR OUT_DIR
#   then: python3 -m bench.experiments.accuracy_ablation summary OUT_DIR
# LANES (default "0:cola 1:rte,mrpc"); variants per task: VARIANTS_cola (default
# "c20-i5 c10-i5 c10-i10 noaug-i5": CoLA's gap first, epochs 10 + 3 against 5 + 3 at 10 copies, 20
# against 10 copies at 5 + 3, augmentation off), VARIANTS_rte / VARIANTS_mrpc (default "chain
# noaug-i5 no-intermediate recover4 int8-dynamic int8-static int8-mixed": the chain, augmentation
# off, the intermediate stage off, 4 recovery epochs against 2, each INT8 method on dev beside the
# held-out choice). A variant is started after the one it builds on (listed earlier).
# TOKENS_AFTER="rte mrpc" (default none): on those tasks, once the chain variant's pruned student is
# written, recipes/mpnet/tokens-after-chain.yaml runs on it as TASK-tokens (issue 33's tuned token
# search on top of the chain), on the task's GPU. TOKENS_VARIANT (default chain): the variant whose
# pruned student it starts from. TOKENS_RECIPE_VARIANT (default none): a variant applied to the
# token recipe itself (q0: its INT8 chosen on the measured drop).
# Estimate from bench/results/accuracy-glue5-h200x2 (two runs per GPU: CoLA 123 s per intermediate
# epoch over 161k rows and 75 s per prediction epoch; RTE and MRPC distillation 256 and 412 s,
# prune with 2 epochs 118 and 186 s; INT8 on the CPU 100-170 s), taking a GPU alone as twice one
# of two runs: GPU 0 (CoLA) about 150 s teacher, 40 s augmentation, then 440 + 220 + 385 + 25 GPU
# seconds of distillation: about 21 minutes; GPU 1 (RTE and MRPC) about 180 s teachers, 60 s
# augmentation, chains 510 s, no-intermediate and no-augmentation 115 s, recovery x4 305 s, then
# the INT8 runs on the CPU: about 22 minutes. Both fit 25 minutes with little room: the variants
# are listed most wanted first, and what finished comes back each minute if the session ends.
# Dry run on the CPU (tiny MPNet, every phase one epoch, two copies):
#   MPNET=/tmp/tinympnet DEVICE=cpu LANES="0:cola,rte" LIMITS="--train-limit 64 --dev-limit 32" HOLDOUT_ROWS=16 \
#   RECIPE_DATA="train_limit: 64, dev_limit: 32" SHRINK=1 WORK=/tmp/ablwork bash bench/experiments/accuracy_ablation_gpu.sh GLUE_DIR OUT_DIR
set -uo pipefail
GLUE=$1; OUT=$2
source "$(dirname "$0")/gpu_lanes.sh"
LANES=${LANES:-"0:cola 1:rte,mrpc"}
VARIANTS_cola=${VARIANTS_cola:-"c20-i5 c10-i5 c10-i10 noaug-i5"}
CHAIN_VARIANTS="chain noaug-i5 no-intermediate recover4 int8-dynamic int8-static int8-mixed"
VARIANTS_rte=${VARIANTS_rte:-$CHAIN_VARIANTS}; VARIANTS_mrpc=${VARIANTS_mrpc:-$CHAIN_VARIANTS}
PROCS=0
for task in $(echo $LANES | sed 's/[0-9]*://g' | tr , ' '); do v=VARIANTS_$task; PROCS=$((PROCS + $(echo ${!v:-chain} | wc -w))); done
mkdir -p "$OUT/recipes"
lanes_setup

ablation_lane() {  # gpu task
  local gpu=$1 task=$2 v=VARIANTS_$2 runs=() names=()
  declare -A pid
  held_out_teacher $gpu $task || return 1
  for name in ${!v:-chain}; do
    local base=chain-augmented; [ $task = sst2 ] && base=chain-augmented-sst2   # SST-2: 2 copies, 2 + 2 epochs
    local recipe; recipe=$(recipe_copy recipes/mpnet/$base.yaml $task-$name $name)
    set -- $(python3 -m bench.experiments.accuracy_ablation deps $name ${!v:-chain})
    if [ $# = 0 ]; then
      start_run $gpu $task "$recipe" $task-$name
    elif [ -z "${pid[$1]:-}" ]; then
      echo "SKIPPED $task-$name: it builds on $1, not in this task's variants" >> "$OUT/logs/failed.txt"; continue
    else   # after the parent's stage folder: seeded with the parent's stages, or (cache) just after
      ( parent=$1 stage=$2 how=$3
        wait_for "$WORK/$task-$parent/$stage" ${pid[$parent]} || { echo "SKIPPED $task-$name: $task-$parent has no $stage" >> "$OUT/logs/failed.txt"; exit 1; }
        [ $how = seed ] && { seed_run $task-$parent $stage $task-$name || exit 1; }
        start_run $gpu $task "$recipe" $task-$name; wait $! ) &
    fi
    pid[$name]=$!; runs+=($task-$name); names+=($name)
  done
  local tbase=${TOKENS_VARIANT:-chain}
  if [[ " ${TOKENS_AFTER:-} " == *" $task "* ]] && [ -n "${pid[$tbase]:-}" ]; then
    local tokens; tokens=$(recipe_copy recipes/mpnet/tokens-after-chain.yaml $task-tokens ${TOKENS_RECIPE_VARIANT:-})
    ( wait_for "$WORK/$task-$tbase/03-prune" ${pid[$tbase]} || { echo "SKIPPED $task-tokens: $task-$tbase has no 03-prune" >> "$OUT/logs/failed.txt"; exit 1; }
      start_run $gpu $task "$tokens" $task-tokens "$WORK/$task-$tbase/03-prune"; wait $! ) &
    pid[tokens]=$!; runs+=($task-tokens); names+=(tokens)
  fi
  watch_runs "${runs[@]}"
  for name in "${names[@]}"; do wait ${pid[$name]} || echo "FAILED $task-$name" >> "$OUT/logs/failed.txt"; done
}
run_lanes ablation_lane
python3 -m bench.experiments.accuracy_ablation summary "$OUT" > "$OUT/logs/summary.log" 2>&1 \
  || echo "summary failed: $OUT/logs/summary.log"
echo "all done"
