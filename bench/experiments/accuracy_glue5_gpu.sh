#!/bin/bash
# Issue 32 on a GPU machine with several GPUs (device tool, nvidia-h100-x4): per GLUE-5 task, a
# teacher fine-tuned from MPNet-base with about a tenth of its training rows held out
# (glue5_tasks.sh: teacher_spec, holdout_rows), then side by side
#  - on the task's GPU: recipes/mpnet/chain-augmented.yaml (chain-augmented-sst2.yaml on SST-2):
#    augmentation, TinyBERT's two-stage 6-layer student, heads/FFN pruning with recovery, fused
#    ONNX, INT8 chosen on the held-out rows;
#  - on the CPU: recipes/mpnet/teacher-int8-auto.yaml, the teacher's own INT8 chosen the same way;
#  - then on the task's GPU (TOKENS=1, the default): recipes/mpnet/tokens-after-chain.yaml, token
#    pruning chosen on the held-out rows on top of the chain's pruned student, its ONNX and INT8.
# Dev is scored once per stage; nothing is chosen on dev. Every stage's record and the teachers'
# metrics come back in OUT_DIR/TASK/ (no weights), copied every minute while the runs go on.
# Each process gets THREADS CPU threads (default: the cores over the processes at once): the first
# run (bench/results/accuracy-glue5-h200x4) left torch's default of every core to each of its ten
# processes, loaded the 64 cores to 200, kept the GPUs 5-22% busy and ran out of device time.
#   MPNET=BASE_FOLDER LANES="0:sst2 1:cola 2:stsb 3:mrpc,rte" bash bench/experiments/accuracy_glue5_gpu.sh GLUE_DIR OUT_DIR
# LIMITS="--train-limit 64 --dev-limit 32" HOLDOUT_ROWS=16 DEVICE=cpu LANES="0:rte" RECIPE_DATA="train_limit: 64, dev_limit: 32"
# make a dry run on the CPU (RECIPE_DATA becomes the recipes' data section).
set -uo pipefail
GLUE=$1; OUT=$2
source "$(dirname "$0")/gpu_lanes.sh"   # log, held_out_teacher, bring_back, run_lanes (and glue5_tasks.sh)
export COMPRESSOR_PROGRESS=0 PYTHONUNBUFFERED=1 TRANSFORMERS_VERBOSITY=error TOKENIZERS_PARALLELISM=false
WORK=${WORK:-$HOME/acc}; DEVICE=${DEVICE:-cuda}; LIMITS=${LIMITS:-}; MPNET=${MPNET:?MPNET=the MPNet-base folder}
PRECISION=bf16; [ "$DEVICE" = cpu ] && PRECISION=fp32
LANES=${LANES:-"0:sst2 1:cola 2:stsb 3:mrpc,rte"}
mkdir -p "$WORK" "$OUT/logs"
procs=$(( $(echo $LANES | tr ' ,' '\n\n' | grep -c .) * 2 ))   # a chain and a teacher INT8 per task
THREADS=${THREADS:-$(( $(nproc) / procs > 1 ? $(nproc) / procs : 1 ))}
export OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS
python3 - > "$OUT/env.txt" 2>&1 <<'PY'
import os, platform, torch, transformers
print(platform.python_version(), "torch", torch.__version__, "transformers", transformers.__version__,
      [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())], os.cpu_count(), "cores")
PY
recipe_for() {  # task recipe: the recipe file to run (a copy with a data section for a dry run)
  local r="recipes/mpnet/$2.yaml"
  if [ -n "${RECIPE_DATA:-}" ]; then
    cp "$r" "$WORK/$2-$1.yaml" && echo "data: {dir: $GLUE, ${RECIPE_DATA}}" >> "$WORK/$2-$1.yaml" && r="$WORK/$2-$1.yaml"
  fi
  echo "$r"
}
task_lane() {  # gpu task
  local gpu=$1 task=$2 name=$2-holdout
  held_out_teacher "$gpu" "$task" || return 1
  local chain=chain-augmented chain_failed=; [ $task = sst2 ] && chain=chain-augmented-sst2
  C=(python3 -m compressor run "$(recipe_for $task $chain)" --task $task --teacher "$WORK/$name"
     --data-dir "$GLUE" --device "$DEVICE" --out "$WORK/$task-chain")
  Q=(python3 -m compressor run "$(recipe_for $task teacher-int8-auto)" --task $task --teacher "$WORK/$name"
     --data-dir "$GLUE" --device cpu --out "$WORK/$task-teacher-int8")
  log "CUDA_VISIBLE_DEVICES=$gpu ${C[*]}"; log "${Q[*]}"
  CUDA_VISIBLE_DEVICES=$gpu "${C[@]}" > "$OUT/logs/$task-chain.log" 2>&1 &
  local chain_pid=$!
  CUDA_VISIBLE_DEVICES= nice -n 5 "${Q[@]}" > "$OUT/logs/$task-teacher-int8.log" 2>&1 &
  local int8_pid=$!
  while kill -0 $chain_pid 2>/dev/null || kill -0 $int8_pid 2>/dev/null; do   # finished stages come back as they end
    sleep 60; bring_back $task-chain; bring_back $task-teacher-int8
  done
  wait $chain_pid || { echo "FAILED $task-chain" >> "$OUT/logs/failed.txt"; chain_failed=1; }
  if [ "${TOKENS:-1}" = 1 ] && [ -z "${chain_failed:-}" ]; then   # issue 33: token pruning on the chain's pruned student
    K=(python3 -m compressor run "$(recipe_for $task tokens-after-chain)" --task $task --teacher "$WORK/$task-chain/03-prune"
       --data-dir "$GLUE" --device "$DEVICE" --out "$WORK/$task-tokens")
    log "CUDA_VISIBLE_DEVICES=$gpu ${K[*]}"
    CUDA_VISIBLE_DEVICES=$gpu "${K[@]}" > "$OUT/logs/$task-tokens.log" 2>&1 &
    local tokens_pid=$!
    while kill -0 $tokens_pid 2>/dev/null; do sleep 60; bring_back $task-tokens; done
    wait $tokens_pid || echo "FAILED $task-tokens" >> "$OUT/logs/failed.txt"
    bring_back $task-tokens
  fi
  wait $int8_pid || echo "FAILED $task-teacher-int8" >> "$OUT/logs/failed.txt"
  bring_back $task-chain; bring_back $task-teacher-int8
}
run_lanes task_lane
echo "all done"
