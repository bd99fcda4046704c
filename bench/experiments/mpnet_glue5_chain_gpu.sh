#!/bin/bash
# The headline's students and chain (issue 14) on one GPU (device tool), in two calls on one warm
# machine:
#   PHASE=students: each task's teacher (mpnet_glue5_teachers.sh's settings, skipped where WORK
#     has it already), then two 6-layer students per task side by side, both from every other teacher
#     layer (2, 4, ..., 12 in 1-based terms): "kd" (soft targets at T=2, as the earlier
#     students, with more epochs on the small tasks) and "pkd" (the same plus every student
#     layer's hidden states against the teacher layer it was copied from: hidden.mapping=uniform).
#   PHASE=chain: a student (CHAIN_FROM=kd by default) loses half of its heads (gradient
#     importance) and half of its FFN neurons (Taylor importance) in one step, recovered by
#     distillation (soft targets) from the 12-layer teacher, then its vocabulary shrinks to the
#     word pieces the task's training data uses; the chain and the teacher as fused INT8 ONNX.
# Dev is scored once, at the end of every run: no checkpoint and no variant is chosen on dev.
# The models stay on the GPU machine; their metrics, configs, per-layer shapes and tokenizers
# come back in OUT_DIR/back.tar, for the latency of identical shapes on the CPU
# (bench/experiments/mpnet_glue5_latency.py).
#   MPNET=BASE_FOLDER PHASE=students bash bench/experiments/mpnet_glue5_chain_gpu.sh GLUE_DIR OUT_DIR
#   PHASE=chain bash bench/experiments/mpnet_glue5_chain_gpu.sh GLUE_DIR OUT_DIR
#   MPNET=BASE_FOLDER PHASE=pipeline TASKS="cola mrpc stsb rte" bash ... (everything in one call:
#     the machine does not keep files between calls unless the next comes within 30 s)
#   PHASE=bench TASKS=...: on a machine that kept the pipeline's models, `compressor bench` of the
#     GPU (teacher, kd student and chain, FP32 and BF16, batch 1 and 256), then of the server
#     CPU, all cores then 1 thread: the teacher, our fused INT8 of it and the chain INT8 beside
#     the PEERS made from the same teacher (default PyTorch dynamic INT8, optimum O2 + INT8, INC);
#     CPU_VARIANTS adds student-6L, BENCH=cpu skips the GPU, a task's finished bench is skipped
#   PHASE=seeds TASKS=... [LANES=N]: every seed system's committed recipe (recipes/mpnet/*.yaml,
#     SEEDS and SEEDS_CPU) run by `compressor run` on each task's teacher (fine-tuned first where the
#     machine has none); each run's manifest, report and stage records come back in OUT/seeds/.
#     SEEDS_TASK / SEEDS_CPU_TASK (SEEDS_stsb=...) replace them for one task (empty: none; so does
#     an empty SEEDS or SEEDS_CPU for every task);
#     SKIP_COMMITTED=bench/results/mpnet-glue5/seeds skips the pairs committed there with the
#     recipe as it is now (bench/experiments/seed_done.py).
#     SEED_DATA="train_limit: 64, dev_limit: 32" makes a dry run of the recipes.
#     A recipe that chooses on held-out rows (`search_on: holdout` or `split: holdout`:
#     qbert-mixed-holdout, early-exit-holdout) runs on a second teacher, TASK-holdout, fine-tuned
#     without about a tenth of the training rows (HOLDOUT_ROWS sets how many, for a dry run).
#   PHASE=eebench TASKS=...: after PHASE=seeds ran early-exit-holdout on this machine, that chain on the
#     server CPU (batch 1, all cores then 1 thread) beside its teacher, the teacher's fused INT8 and
#     optimum O2 + INT8 (SENTENCES, default 300), in OUT/bench-TASK-ee-cpu.json.
#   PHASE=collect: only the tar of what exists (after a call cut off by its time limit).
# Steps a warm machine finished are skipped, so a later call resumes an earlier one. OUT_DIR
# must outlive the call: not the device tool's $OUT (emptied before each call); tar OUT_DIR
# into $OUT at the end of each call.
# LIMITS="--train-limit 64 --dev-limit 32" QLIMITS="--dev-limit 32" DEVICE=cpu TASKS="rte" make a dry run.
set -euo pipefail
GLUE=$1; OUT=$2
source "$(dirname "$0")/glue5_tasks.sh"   # teacher_spec, holdout_rows
export COMPRESSOR_PROGRESS=0 PYTHONUNBUFFERED=1 TRANSFORMERS_VERBOSITY=error
WORK=${WORK:-$HOME/glue5}; DEVICE=${DEVICE:-cuda}; LIMITS=${LIMITS:-}
PRECISION=${PRECISION:-bf16}; [ "$DEVICE" = cpu ] && PRECISION=fp32
TASKS=${TASKS:-sst2 cola mrpc stsb rte}
ONCE=1000000
mkdir -p "$OUT/logs"
log() { echo "$*" | sed "s|$HOME/|~/|g" >> "$OUT/commands-$PHASE.txt"; }
touch "$OUT/commands-$PHASE.txt"  # appended to by a call that resumes (duplicates dropped at the end)
# task -> epochs batch (the teachers' batch sizes; small tasks get more student epochs)
spec() { case $1 in sst2) echo "2 32";; cola) echo "6 32";; *) echo "6 16";; esac; }
job() {  # name command...: run in the background, keep the log and metrics.json
  local name=$1; shift; log "$@"
  ( "$@" > "$OUT/logs/$name.log" 2>&1 && cp "$WORK/$name/metrics.json" "$OUT/$name-metrics.json" \
    || echo "FAILED $name" >> "$OUT/logs/failed.txt" ) &
}
done_() { [ -f "$WORK/$1/${2:-metrics.json}" ]; }  # a step this machine finished in an earlier call
int8() {  # name: fused ONNX export, dynamic INT8 (avx512_vnni preset, as the CPU timing), dev score
  local name=$1
  E=(python3 -m compressor export "$WORK/$name" --out "$WORK/$name-onnx" --exporter torch --data-dir "$GLUE" --overwrite)
  Q=(python3 -m compressor quantize "$WORK/$name-onnx" --out "$WORK/$name-int8" --data-dir "$GLUE"
    --preset avx512_vnni --threads 4 --overwrite ${QLIMITS:-})
  log "${E[@]}"; log "${Q[@]}"
  done_ $name-int8 quantize.json && return 0
  "${E[@]}" > "$OUT/logs/$name-onnx.log" 2>&1 && "${Q[@]}" > "$OUT/logs/$name-int8.log" 2>&1 \
    && cp "$WORK/$name-int8/quantize.json" "$OUT/$name-int8-quantize.json"
}
teacher() {  # task [holdout]: fine-tune where this machine has none yet (mpnet_glue5_teachers.sh's
  # settings); with holdout, a second teacher ($WORK/TASK-holdout) fine-tuned without about a tenth
  # of the training rows (2,000 on SST-2), for the recipes that choose on rows no model learned from.
  # One lock per teacher: a task's GPU and CPU lanes may both need TASK-holdout; the second waits
  # for the first's and finds it made instead of fine-tuning it again into the same folder.
  mkdir -p "$WORK"
  ( flock 9 && fine_tune "$@" ) 9> "$WORK/.teacher-$1${2:+-$2}.lock"
}
fine_tune() {  # task [holdout]: teacher()'s work, under its lock
  local task=$1 name=$1 held=()
  if [ "${2:-}" = holdout ]; then
    name=$task-holdout
    held=(--holdout ${HOLDOUT_ROWS:-$(holdout_rows $task)})   # HOLDOUT_ROWS: a dry run's few rows
  fi
  [ -f "$WORK/$name/metrics.json" ] && return 0
  set -- $(teacher_spec $task)
  T=(python3 -m compressor finetune "$WORK/mpnet" --task $task --data-dir "$GLUE" --out "$WORK/$name"
    --epochs "$1" --batch-size "$2" --lr 2e-5 --max-length 128 --warmup 0.06 --eval-every $ONCE --seed 42
    --precision $PRECISION --device "$DEVICE" --overwrite "${held[@]}" $LIMITS)
  log "${T[@]}"
  "${T[@]}" > "$OUT/logs/$name.log" 2>&1 && cp "$WORK/$name/metrics.json" "$OUT/$name-metrics.json" \
    || { echo "FAILED $name" >> "$OUT/logs/failed.txt"; return 1; }
}
student() {  # task variant(kd|pkd): a 6-layer student of every other teacher layer, in the foreground
  local task=$1 variant=$2; set -- $(spec $task)
  S=(python3 -m compressor distill "$WORK/$task" --out "$WORK/$task-6L-$variant" --data-dir "$GLUE"
    --student num_layers=6 --student pick=every --loss kd=1 --loss kd.temperature=2 --epochs "$1"
    --batch-size "$2" --lr 5e-5 --warmup 0.06 --max-length 128 --eval-every $ONCE
    --precision $PRECISION --device "$DEVICE" --overwrite $LIMITS)
  [ $variant = pkd ] && S+=(--loss hidden=1 --loss hidden.mapping=uniform --no-cache)
  log "${S[@]}"
  done_ $task-6L-$variant && return 0
  "${S[@]}" > "$OUT/logs/$task-6L-$variant.log" 2>&1 \
    && cp "$WORK/$task-6L-$variant/metrics.json" "$OUT/$task-6L-$variant-metrics.json"
}
chain() {  # task source: heads+FFN halved with kd recovery from the teacher, vocabulary, INT8
  local task=$1 src=$2; set -- $(spec $task)
  P1=(python3 -m compressor prune "$WORK/$src" --out "$WORK/$task-chain-hf"
    --data-dir "$GLUE" --set heads=0.5 --set ffn=0.5 --set iterations=1 --set device="$DEVICE"
    --set teacher="$WORK/$task" --recover mode=distill --recover losses.kd=1
    --recover losses.kd.temperature=2 --recover epochs="$1"
    --recover batch_size="$2" --recover lr=5e-5 --recover eval_every=$ONCE
    --recover precision=$PRECISION --recover device="$DEVICE" --overwrite $LIMITS)
  P2=(python3 -m compressor prune "$WORK/$task-chain-hf" --out "$WORK/$task-chain"
    --data-dir "$GLUE" --method vocab --recover mode=none --overwrite $LIMITS)
  log "${P1[@]}"; log "${P2[@]}"
  { done_ $task-chain-hf || "${P1[@]}" > "$OUT/logs/$task-chain-hf.log" 2>&1; } \
    && cp "$WORK/$task-chain-hf/metrics.json" "$OUT/$task-chain-hf-metrics.json" \
    && { done_ $task-chain || "${P2[@]}" > "$OUT/logs/$task-chain.log" 2>&1; } \
    && cp "$WORK/$task-chain/metrics.json" "$OUT/$task-chain-metrics.json" \
    && int8 $task-chain
}
theseus() {  # task: BERT-of-Theseus 12 -> 6 from the teacher, constant rate 0.5
  local task=$1; set -- $(spec $task)
  TH=(python3 -m compressor theseus "$WORK/$task" --out "$WORK/$task-theseus" --data-dir "$GLUE"
    --set num_layers=6 --set init=last --set schedule=constant --set rate=0.5
    --set replacing_epochs="$1" --set finetune_epochs=2 --set lr=5e-5 --set batch_size="$2"
    --set max_length=128 --set eval_every=$ONCE --set device="$DEVICE" --set precision=$PRECISION
    --overwrite $LIMITS)
  log "${TH[@]}"
  done_ $task-theseus && return 0
  "${TH[@]}" > "$OUT/logs/$task-theseus.log" 2>&1 \
    && cp "$WORK/$task-theseus/metrics.json" "$OUT/$task-theseus-metrics.json"
}
failed() { echo "FAILED $1" >> "$OUT/logs/failed.txt"; }
SEEDS=${SEEDS-distilbert-6l pkd-6l tinybert-4l minilm-6l pd-minilm-l6 theseus-6l albert-share mobilebert-progressive q8bert-qat early-exit early-exit-holdout}
SEEDS_CPU=${SEEDS_CPU-q8bert-dynamic qbert-mixed qbert-mixed-holdout}   # set but empty: no CPU lane
seed_teacher() {  # task recipe: the teacher folder (under $WORK) a seed recipe runs on
  grep -qE "(search_on|split): holdout" "recipes/mpnet/$2.yaml" && echo "$1-holdout" || echo "$1"
}
pending() {  # task recipes...: those not committed in SKIP_COMMITTED with the recipe as it is now
  local task=$1 r; shift
  for r in "$@"; do
    [ -n "${SKIP_COMMITTED:-}" ] && python3 -m bench.experiments.seed_done recipes/mpnet/$r.yaml $task \
      "$WORK/$(seed_teacher $task $r)" "$SKIP_COMMITTED" && { echo "seed $r-$task: in $SKIP_COMMITTED, skipped" >&2; continue; }
    echo $r
  done
}
seed() {  # task recipe: one seed system's committed recipe (recipes/mpnet/) on this task's teacher
  # (a recipe that chooses on held-out rows: on the teacher fine-tuned without them)
  local task=$1 r=$2 rec=recipes/mpnet/$2.yaml name=$2-$1 rc=0 t
  t=$(seed_teacher $task $r)
  [ $t = $task ] || teacher $task holdout || { failed seed-$name; return 1; }
  if [ -n "${SEED_DATA:-}" ]; then  # a dry run: the same recipe with data limits
    mkdir -p "$WORK/recipes"; { cat "$rec"; echo "data: {$SEED_DATA}"; } > "$WORK/recipes/$r.yaml"
    rec=$WORK/recipes/$r.yaml
  fi
  R=(python3 -m compressor run "$rec" --task $task --teacher "$WORK/$t" --data-dir "$GLUE"
    --device "$DEVICE" --out "$WORK/seeds/$name")
  log "${R[@]}"
  "${R[@]}" > "$OUT/logs/seed-$name.log" 2>&1 || rc=$?
  # what comes back: the run's manifest, report and every stage's record (no weights)
  mkdir -p "$OUT/seeds/$name"
  ( cd "$WORK/seeds/$name" 2>/dev/null && find . -maxdepth 3 \( -name '*.json' -o -name '*.md' \) -not -name 'tokenizer*' -not -name 'special_tokens_map.json' -size -4M \
      -not -path '*/.*' -print0 | xargs -0r cp --parents -t "$OUT/seeds/$name" ) || true
  # no path of this machine in what is committed: the checkout's becomes relative, the home ~/
  find "$OUT/seeds/$name" -type f -print0 | xargs -0r sed -i -e "s|$PWD/||g" -e "s|$HOME/|~/|g"
  [ $rc = 0 ] || failed seed-$name
}
complete() {  # bench results file: written to the end (compressor bench marks a partial one)
  [ -f "$1" ] && python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); sys.exit(0 if r.get("config",{}).get("complete",True) else 1)' "$1"
}
variants() {  # task kinds...: name=folder of each finished model of the given kinds
  local task=$1 kind; shift
  for kind in "$@"; do case $kind in
    teacher-int8) done_ $task-int8 quantize.json && echo "teacher-int8=$WORK/$task-int8";;
    chain-int8) done_ $task-chain-int8 quantize.json && echo "chain-int8=$WORK/$task-chain-int8";;
    student-6L) done_ $task-6L-kd && echo "student-6L=$WORK/$task-6L-kd";;
    chain) done_ $task-chain && echo "chain=$WORK/$task-chain";;
  esac; done; return 0
}
bench_cpu() {  # task: the server CPU, all cores then 1 thread; the peers made from the same teacher
  local task=$1
  complete "$OUT/bench-$task-cpu.json" && return 0
  # the chain's INT8 belongs in the same run as the peers: wait for a call that finished it
  done_ $task-chain-int8 quantize.json || { echo "bench-$task-cpu: no chain INT8 yet, skipped"; return 0; }
  B=(python3 -m compressor bench $(variants $task ${CPU_VARIANTS:-teacher-int8 chain-int8}) --teacher "$WORK/$task"
    --task $task --data-dir "$GLUE" --peers "${PEERS:-pytorch-int8,ort-o2-int8,inc-int8}"
    --preset avx512_vnni --device cpu --threads "$(nproc),1" --sentences ${SENTENCES:-100} --batch-sizes 32 --no-memory
    --work-dir "$WORK/peers-$task" --out "$OUT/bench-$task-cpu.json")
  log "${B[@]}"
  "${B[@]}" > "$OUT/logs/bench-$task-cpu.log" 2>&1 && return 0
  # a peer that cannot be built stops the whole run: once more without INC (the log says why)
  B=("${B[@]/,inc-int8/}"); log "${B[@]}"
  "${B[@]}" > "$OUT/logs/bench-$task-cpu-noinc.log" 2>&1 || failed bench-$task-cpu
}
bench_gpu() {  # task: the GPU, FP32 and BF16, batch 1 and 256
  local task=$1
  complete "$OUT/bench-$task-gpu.json" && return 0
  G=(python3 -m compressor bench $(variants $task student-6L chain) --teacher "$WORK/$task" --task $task
    --data-dir "$GLUE" --peers none --device cuda --precisions fp32,bf16 --threads 1
    --sentences ${SENTENCES:-200} --batch-sizes 256 --no-memory --out "$OUT/bench-$task-gpu.json")
  log "${G[@]}"
  "${G[@]}" > "$OUT/logs/bench-$task-gpu.log" 2>&1 || failed bench-$task-gpu
}
ee_bench() {  # task: the early-exit-holdout seed run on the server CPU, batch 1 over dev sentences,
  # all cores then 1 thread, beside its teacher (TASK-holdout) in PyTorch FP32, that teacher's fused
  # INT8 without exits and optimum's O2 + INT8 of it (as early-exit-cpu/ on the 2-core CPU)
  local task=$1 run=$WORK/seeds/early-exit-holdout-$1
  complete "$OUT/bench-$task-ee-cpu.json" && return 0
  grep -qs early_exit_export "$run/manifest.json" || { echo "bench-$task-ee-cpu: no early exit run yet, skipped"; return 0; }
  int8 $task-holdout || { failed $task-holdout-int8; return 1; }
  B=(python3 -m compressor bench "teacher-int8=$WORK/$task-holdout-int8" "early-exit-int8=$run/02-early_exit_export"
    --teacher "$WORK/$task-holdout" --task $task --data-dir "$GLUE" --peers ort-o2-int8 --preset avx512_vnni
    --device cpu --threads "$(nproc),1" --sentences ${SENTENCES:-300} --batch-sizes none --no-memory
    --work-dir "$WORK/peers-$task-holdout" --out "$OUT/bench-$task-ee-cpu.json")
  log "${B[@]}"
  "${B[@]}" > "$OUT/logs/bench-$task-ee-cpu.log" 2>&1 || failed bench-$task-ee-cpu
}
case ${PHASE:?PHASE=students, chain, pipeline, seeds, bench, eebench or collect} in
students|pipeline)
  [ -f "$WORK/mpnet/config.json" ] || python3 -m bench.experiments.widen "${MPNET:?MPNET=folder of the base encoder}" "$WORK/mpnet"
  for task in $TASKS; do
   (
    teacher $task || exit 1
    if [ $PHASE = students ]; then
      [ $task != sst2 ] && { student $task kd || failed $task-6L-kd; } &
      { student $task pkd || failed $task-6L-pkd; } &
    else
      # the kd student (the pkd variant scored lower on SST-2, MRPC, RTE and CoLA dev in the
      # students phase, so the chain starts from kd), the chain from it and INT8; beside it,
      # BERT-of-Theseus 12 -> 6 and the teacher's own INT8
      [ "${THESEUS:-1}" = 1 ] && { theseus $task || failed $task-theseus; } &
      { student $task kd && chain $task $task-6L-kd || failed $task-chain; } &
      { int8 $task || failed $task-int8; } &
    fi
    wait
   ) &
  done
  wait ;;
seeds)  # every seed system's recipe on each task's teacher (fine-tuned first where missing):
  # per task LANES lanes of GPU recipes (SEEDS) and one of CPU ones (SEEDS_CPU: ONNX export and INT8)
  [ -f "$WORK/mpnet/config.json" ] || python3 -m bench.experiments.widen "${MPNET:?MPNET=folder of the base encoder}" "$WORK/mpnet"
  # TinyBERT's and MiniLM's general phase learns from the base encoder the teachers were fine-tuned
  # from (general_teacher: runs/mpnet/base) and is kept once for every task (runs/mpnet/general)
  mkdir -p runs/mpnet && ln -sfn "$WORK/mpnet" runs/mpnet/base
  export COMPRESSOR_SCORE_CACHE=$WORK/scores   # each task's teacher scored once, not once per recipe
  for task in $TASKS; do
   (
    v=SEEDS_$task; seeds=($(pending $task ${!v-$SEEDS})); v=SEEDS_CPU_$task; cpu=$(pending $task ${!v-$SEEDS_CPU})
    [ ${#seeds[@]} = 0 ] && [ -z "$cpu" ] && exit 0   # nothing left on this task: no teacher either
    for r in "${seeds[@]}" $cpu; do   # the plain teacher only where a recipe runs on it
      [ "$(seed_teacher $task $r)" = $task ] && { teacher $task || exit 1; break; }
    done
    for ((lane = 0; lane < ${LANES:-1}; lane++)); do  # LANES GPU lanes, recipes dealt round-robin
      { export OMP_NUM_THREADS=${GPU_LANE_THREADS:-2}  # 16 processes of 16 threads each starve the CPU
        for ((i = lane; i < ${#seeds[@]}; i += ${LANES:-1})); do seed $task ${seeds[i]}; done; } &
    done
    { export OMP_NUM_THREADS=${CPU_LANE_THREADS:-4}; for r in $cpu; do seed $task $r; done; } &
    wait
   ) &
  done
  wait ;;
bench)  # on a machine that kept the pipeline's models: GPU first (quick), then the server CPU
  # BENCH=cpu: the server CPU only (a task whose GPU bench an earlier run made)
  [ "$DEVICE" = cuda ] && [ "${BENCH:-gpu cpu}" != cpu ] && for task in $TASKS; do bench_gpu $task; done
  for task in $TASKS; do bench_cpu $task; done ;;
eebench)  # after PHASE=seeds ran early-exit-holdout on this machine: its server-CPU bench per task
  for task in $TASKS; do ee_bench $task; done ;;
collect) ;;  # only what comes back (below), e.g. after a call that ran out of time
chain)  # on a machine that kept the students phase's models
  for task in $TASKS; do
    { chain $task $task-6L-${CHAIN_FROM:-kd} || failed $task-chain; } &
    { int8 $task || failed $task-int8; } &
  done
  wait ;;
esac
cat "$OUT/logs/failed.txt" 2>/dev/null || true
# what comes back: every finished model's metrics, and each model's configs, shape and tokenizer (no weights)
( cd "$WORK" && find . -maxdepth 2 \( -name 'config.json' -o -name 'compressor.json' -o -name 'tokenizer*.json' \
    -o -name 'vocab.txt' -o -name 'special_tokens_map.json' -o -name 'metrics.json' -o -name 'quantize.json' \
    -o -name 'manifest.json' -o -name 'parity.json' \) -print0 \
  | tar --null -cf "$OUT/back-$PHASE.tar" -T - )
rm -f "$OUT"/*-metrics.json.tmp* 2>/dev/null || true
awk '!seen[$0]++' "$OUT/commands-$PHASE.txt" > "$OUT/commands.tmp" && mv "$OUT/commands.tmp" "$OUT/commands-$PHASE.txt"
ls -la "$OUT"
