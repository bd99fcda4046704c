# Shell functions of the GPU-session scripts that run many recipes side by side on held-out
# teachers (sourced by seed_systems_gpu.sh, accuracy_ablation_gpu.sh and accuracy_glue5_gpu.sh,
# which uses log, held_out_teacher and bring_back). The caller sets GLUE, OUT and, before
# lanes_setup, PROCS (the processes that run at once: each gets the cores over them as its threads).
#   lanes_setup                        environment, WORK, DEVICE, PRECISION, THREADS, env.txt
#   log CMD...                         append a command to OUT/commands.txt (home and checkout stripped)
#   held_out_teacher GPU TASK          fine-tune WORK/TASK-holdout (glue5_tasks.sh's settings) once
#   recipe_copy SRC NAME [VARIANT]     WORK/recipes/NAME.yaml: SRC with the session's paths (gpu_recipes.py)
#   start_run GPU TASK RECIPE RUN [TEACHER]  compressor run in the background into WORK/RUN (teacher:
#                                      WORK/TASK-holdout unless given); its pid in $!; a run that ran
#                                      out of GPU memory resumes after OOM_WAIT s (OOM_TRIES in all)
#   bring_back RUN                     every stage's small JSON and markdown files into OUT/RUN
#   wait_for FOLDER PID                until FOLDER/record.json exists or PID has ended (1: it ended first)
#   seed_run PARENT STAGE RUN          WORK/RUN starts with WORK/PARENT's stage folders up to STAGE
#   run_lanes FUNC                     FUNC GPU TASK for every task of LANES at once; then commands.txt sorted
# DETERMINISTIC=1: every training job takes PyTorch's deterministic kernels (COMPRESSOR_DETERMINISTIC,
# CUBLAS_WORKSPACE_CONFIG), so MRPC's and RTE's teachers repeat from run to run as CoLA's do
# (bench/results/gpu-determinism-h200/); its cost in speed is not measured. Off by default.
# Dry run on the CPU: DEVICE=cpu LIMITS="--train-limit 64 --dev-limit 32" HOLDOUT_ROWS=16
# RECIPE_DATA="train_limit: 64, dev_limit: 32" SHRINK=1 (every phase one epoch, two copies).
source "$(dirname "${BASH_SOURCE[0]}")/glue5_tasks.sh"   # teacher_spec, holdout_rows

lanes_setup() {
  export COMPRESSOR_PROGRESS=0 PYTHONUNBUFFERED=1 TRANSFORMERS_VERBOSITY=error TOKENIZERS_PARALLELISM=false
  WORK=${WORK:-$HOME/acc}; DEVICE=${DEVICE:-cuda}; LIMITS=${LIMITS:-}; MPNET=${MPNET:?MPNET=the MPNet-base folder}
  PRECISION=bf16; [ "$DEVICE" = cpu ] && PRECISION=fp32
  THREADS=${THREADS:-$(( $(nproc) / PROCS > 1 ? $(nproc) / PROCS : 1 ))}
  export OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS
  export PYTORCH_CUDA_ALLOC_CONF=${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}   # less fragmentation, 20 runs a GPU
  export COMPRESSOR_SCORE_CACHE=$WORK/scores   # each teacher scored on dev once, not once per run
  if [ "${DETERMINISTIC:-0}" = 1 ]; then export COMPRESSOR_DETERMINISTIC=1 CUBLAS_WORKSPACE_CONFIG=:4096:8; fi
  mkdir -p "$WORK/recipes" "$OUT/logs"
  python3 - > "$OUT/env.txt" 2>&1 <<'PY'
import os, platform, torch, transformers, onnx, onnxruntime
print(platform.python_version(), "torch", torch.__version__, "transformers", transformers.__version__,
      "onnx", onnx.__version__, "onnxruntime", onnxruntime.__version__,
      [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())], os.cpu_count(), "cores")
PY
  echo "threads per process: $THREADS ($PROCS processes at once)" >> "$OUT/env.txt"
  echo "deterministic kernels: ${COMPRESSOR_DETERMINISTIC:-0}" >> "$OUT/env.txt"
  # how busy the GPUs were, every 15 s: tells the next session whether more runs fit side by side
  if command -v nvidia-smi > /dev/null; then
    timeout 3600 nvidia-smi --query-gpu=timestamp,index,utilization.gpu,memory.used --format=csv -l 15 \
      > "$OUT/logs/gpu-utilisation.csv" 2>/dev/null &
    disown   # not one of the jobs the callers' wait and watch_runs wait for
  fi
}

log() { echo "$*" | sed -e "s|$HOME/|~/|g" -e "s|$PWD/||g" >> "$OUT/commands.txt"; }

held_out_teacher() {  # gpu task
  local gpu=$1 task=$2 name=$2-holdout
  set -- $(teacher_spec $task)
  local T=(python3 -m compressor finetune "$MPNET" --task $task --data-dir "$GLUE" --out "$WORK/$name"
    --epochs "$1" --batch-size "$2" --lr 2e-5 --max-length 128 --warmup 0.06 --eval-every 1000000 --seed 42
    --precision $PRECISION --device "$DEVICE" --overwrite --holdout ${HOLDOUT_ROWS:-$(holdout_rows $task)} $LIMITS)
  log "CUDA_VISIBLE_DEVICES=$gpu ${T[*]}"
  if [ ! -f "$WORK/$name/metrics.json" ]; then
    CUDA_VISIBLE_DEVICES=$gpu "${T[@]}" > "$OUT/logs/$name.log" 2>&1 \
      || { echo "FAILED $name" >> "$OUT/logs/failed.txt"; return 1; }
  fi
  mkdir -p "$OUT/$task" && cp "$WORK/$name/metrics.json" "$OUT/$task/teacher-holdout-metrics.json"
}

recipe_copy() {  # src name [variant]
  local args=(--augment-cache "$WORK/augment-cache" --general-teacher "$WORK/mpnet" --general-cache "$WORK/general")
  [ -n "${3:-}" ] && args+=(--variant "$3")
  [ -n "${RECIPE_DATA:-}" ] && args+=(--glue "$GLUE" --data "$RECIPE_DATA")
  [ "${SHRINK:-0}" = 1 ] && args+=(--shrink)
  python3 -m bench.experiments.gpu_recipes "$1" "$WORK/recipes/$2.yaml" "${args[@]}" > /dev/null \
    && cp "$WORK/recipes/$2.yaml" "$OUT/recipes/" 2>/dev/null; echo "$WORK/recipes/$2.yaml"
}

start_run() {  # gpu task recipe run [teacher]: the process's pid is in $!
  # every run of a task gets the same --device: it is part of each stage's fingerprint, so a run
  # seeded with another's stages skips them only if it matches
  local gpu=$1 task=$2 recipe=$3 run=$4 teacher=${5:-$WORK/$2-holdout}
  local C=(python3 -m compressor run "$recipe" --task $task --teacher "$teacher"
     --data-dir "$GLUE" --device "$DEVICE" --out "$WORK/$run")
  log "CUDA_VISIBLE_DEVICES=$gpu ${C[*]}"
  # Many runs share a GPU: one that runs out of its memory is started again after a pause (up to
  # OOM_TRIES in all), and the runner resumes it from its last finished stage. Other failures stand.
  local logf=$OUT/logs/$run.log
  : > "$logf"
  ( for try in $(seq 1 "${OOM_TRIES:-3}"); do
      from=$(( $(wc -l < "$logf") + 1 ))
      CUDA_VISIBLE_DEVICES=$gpu "${C[@]}" >> "$logf" 2>&1 && exit 0
      tail -n +$from "$logf" | grep -q -e "OutOfMemoryError" -e "CUDA out of memory" || exit 1
      [ "$try" -lt "${OOM_TRIES:-3}" ] || exit 1
      echo "[gpu_lanes] $run ran out of GPU memory (try $try): resuming in ${OOM_WAIT:-60} s" >> "$logf"
      sleep "${OOM_WAIT:-60}"
    done ) &
}

bring_back() {  # run-folder name: every stage's small JSON and markdown files, without weights
  mkdir -p "$OUT/$1"
  ( cd "$WORK/$1" 2>/dev/null && find . -maxdepth 3 \( -name '*.json' -o -name '*.md' \) -not -name 'tokenizer*' \
      -not -name 'special_tokens_map.json' -not -name 'vocab*' -not -name 'augmented*' -size -4M -not -path '*/.*' -print0 \
      | xargs -0r cp --parents -t "$OUT/$1" ) || true
  find "$OUT/$1" -type f -print0 | xargs -0r sed -i -e "s|$PWD/||g" -e "s|$HOME/|~/|g"
}

wait_for() {  # folder pid: 0 once folder/record.json exists, 1 if pid ended without it
  while [ ! -f "$1/record.json" ]; do
    kill -0 "$2" 2>/dev/null || { [ -f "$1/record.json" ]; return; }
    sleep 5
  done
}

seed_run() {  # parent stage run: the parent's manifest and stage folders up to STAGE, copied
  local from=$WORK/$1 to=$WORK/$3
  [ -f "$to/manifest.json" ] && return 0   # seeded (or run) before: the runner resumes it
  mkdir -p "$to.tmp" && cp "$from/manifest.json" "$to.tmp/" || return 1
  for d in "$from"/[0-9][0-9]-*; do
    [ -f "$d/record.json" ] || continue
    cp -r "$d" "$to.tmp/"
    [ "$(basename "$d")" = "$2" ] && break
  done
  mv "$to.tmp" "$to"
}

watch_runs() {  # run... : bring each back every minute while any of the jobs of this shell runs
  while [ -n "$(jobs -rp)" ]; do
    sleep 60; for r in "$@"; do bring_back "$r"; done
  done
  for r in "$@"; do bring_back "$r"; done
}

run_lanes() {  # func: "func GPU TASK" for every task of LANES ("0:cola 1:rte,mrpc"), side by side
  local lane gpu task
  for lane in $LANES; do
    gpu=${lane%%:*}
    for task in $(echo "${lane#*:}" | tr , ' '); do "$1" "$gpu" "$task" & done
  done
  wait
  sort -u -o "$OUT/commands.txt" "$OUT/commands.txt"
}
