#!/bin/bash
# Does general distillation over the GLUE files' own sentences help a student built at random?
# On this CPU, small: the MiniLM-L6 package fine-tuned on CoLA as the teacher, then a
# TinyBERT-shaped 4-layer student (hidden 312, 12 heads, FFN 1200) distilled from it twice with
# the same seed and settings, once with the task stages alone and once after one epoch of
# general distillation on 30,000 sentences sampled from every GLUE training file under GLUE_DIR
# (CoLA's dev sentences left out). Dev is scored once, at the end of each run: nothing is chosen on dev.
# RUNS picks the students (default "task-stages general"); "subclone" is the same student cut out of
# the teacher's weights (init=teacher: compressor.engine.subclone) instead of drawn at random;
# "kd-random" and "kd-subclone" are the two starts trained on soft targets alone (3 epochs, no
# layer losses, no intermediate stage).
# SEED (default 42) seeds the students (the teacher keeps 42); another seed's runs are named RUN-seedN.
#   [RUNS="task-stages subclone"] [SEED=1] bash bench/experiments/general_distill_cpu.sh GLUE_DIR WORK_DIR RESULTS_DIR
set -euo pipefail
GLUE=$1; W=$2; OUT=$3
PY=${PYTHON:-.venv/bin/python}
export COMPRESSOR_PROGRESS=${COMPRESSOR_PROGRESS:-0}
mkdir -p "$W" "$OUT"
COMMON=(--max-length 64 --eval-every 1000000 --device cpu --overwrite)
[ -f "$W/teacher/metrics.json" ] || $PY -m compressor finetune minilm-l6 --task cola --data-dir "$GLUE" \
  --out "$W/teacher" --epochs 3 --batch-size 32 --lr 5e-5 --warmup 0.06 --seed 42 "${COMMON[@]}"
SHAPE=(--data-dir "$GLUE" --student kind=config --student num_layers=4
  --student hidden_size=312 --student heads=12 --student ffn_size=1200)
STUDENT=("${SHAPE[@]}"
  --loss kd=1 --loss hidden=1 --loss hidden.mapping=uniform --loss embedding=1 --loss attention=1
  --loss attention.mapping=uniform --intermediate-epochs 3 --intermediate-lr 2e-4
  --epochs 3 --lr 1e-4 --warmup 0.1 --batch-size 32 "${COMMON[@]}")
KD=("${SHAPE[@]}" --loss kd=1 --epochs 3 --lr 1e-4 --warmup 0.1 --batch-size 32 "${COMMON[@]}")
RUNS=${RUNS:-"task-stages general"}
for run in $RUNS; do
  args=("${STUDENT[@]}")
  case $run in
    task-stages) extra=() ;;
    general) extra=(--general-epochs 1 --general-rows 30000 --general-lr 2e-4) ;;
    subclone) extra=(--student init=teacher) ;;
    kd-random) args=("${KD[@]}"); extra=() ;;
    kd-subclone) args=("${KD[@]}"); extra=(--student init=teacher) ;;
    *) echo "unknown run $run"; exit 1 ;;
  esac
  name=$run; [ "${SEED:-42}" = 42 ] || name=$run-seed$SEED
  [ -f "$W/$name/metrics.json" ] || $PY -m compressor distill "$W/teacher" --out "$W/$name" "${args[@]}" \
    "${extra[@]}" --seed "${SEED:-42}"
  cp "$W/$name/metrics.json" "$OUT/$name-metrics.json"
  names="${names:-} $name"
done
cp "$W/teacher/metrics.json" "$OUT/teacher-metrics.json"
$PY - "$OUT" $names <<'PY'
import json, os, sys
out = sys.argv[1]
t = json.load(open(os.path.join(out, "teacher-metrics.json")))
for name in sys.argv[2:]:
    r = json.load(open(os.path.join(out, f"{name}-metrics.json")))
    phases = ", ".join(f"{p['phase']} {p['train_examples']} rows {p['steps']} steps" for p in r["phases"])
    print(f"{name}: CoLA dev MCC {r['score']:.2f} (teacher {t['score']:.2f}), {r['parameters']:,} parameters, "
          f"{r['train_time_s']:.0f} s; {phases}")
PY
