#!/bin/bash
# group_by_length on the GPU: the same TinyBERT two-stage distillation steps on CoLA's training rows
# (MPNet-base teacher fine-tuned for a few steps, 6-layer student, the chain's losses and batch 64),
# once with random batches and once length-grouped, each phase cut at STEPS optimiser steps. The
# records' phase times say what the 54% fewer token positions (bench/results/group-by-length) buy
# on a GPU, where fixed per-step costs do not shrink; it also runs the setting once on CUDA + bf16.
#   MPNET=BASE_FOLDER bash bench/experiments/group_by_length_gpu.sh GLUE_DIR OUT_DIR
# Dry run on the CPU: MPNET=/tmp/tinympnet DEVICE=cpu STEPS=5 LIMIT="--train-limit 256" WORK=/tmp/gbl ...
set -euo pipefail
GLUE=$1; OUT=$2; MPNET=${MPNET:?MPNET=the MPNet-base folder}
DEVICE=${DEVICE:-cuda}; STEPS=${STEPS:-200}; LIMIT=${LIMIT:-}; W=${WORK:-$HOME/gbl}; BATCH=${BATCH:-64}
PRECISION=bf16; [ "$DEVICE" = cpu ] && PRECISION=fp32
export COMPRESSOR_PROGRESS=0 PYTHONUNBUFFERED=1 TRANSFORMERS_VERBOSITY=error TOKENIZERS_PARALLELISM=false
mkdir -p "$W" "$OUT"
T=(python3 -m compressor finetune "$MPNET" --task cola --data-dir "$GLUE" --out "$W/teacher" --max-steps 30
   --batch-size 32 --max-length 128 --precision $PRECISION --device "$DEVICE" --overwrite --seed 42 $LIMIT)
echo "${T[*]}" | sed "s|$HOME/|~/|g" > "$OUT/commands.txt"
[ -f "$W/teacher/metrics.json" ] || "${T[@]}" > "$OUT/teacher.log" 2>&1
data=""; [ -n "$LIMIT" ] && data="data: {dir: $GLUE, train_limit: ${LIMIT##* }, dev_limit: 64}"
for grouped in false true; do
  cat > "$W/distill-$grouped.yaml" <<EOF
name: group-by-length-$grouped
task: cola
$data
stages:
  - distill:
      student: {kind: layers, num_layers: 6, pick: every}
      losses: {kd: 1, hidden: {weight: 1, mapping: uniform}, embedding: 1, attention: {weight: 1, mapping: uniform}}
      train: {max_length: 128, batch_size: $BATCH, epochs: 1, max_steps: $STEPS, lr: 5e-5, warmup: 0.1,
              precision: $PRECISION, eval_every: 1000000, group_by_length: $grouped}
      intermediate_epochs: 1
      intermediate_lr: 1e-4
EOF
  C=(python3 -m compressor run "$W/distill-$grouped.yaml" --task cola --teacher "$W/teacher" --data-dir "$GLUE"
     --device "$DEVICE" --out "$W/run-$grouped")
  echo "${C[*]}" | sed "s|$HOME/|~/|g" >> "$OUT/commands.txt"
  rm -rf "$W/run-$grouped"
  "${C[@]}" > "$OUT/distill-$grouped.log" 2>&1
  cp "$W/run-$grouped/01-distill/record.json" "$OUT/record-$grouped.json"
done
python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
rows = {}
for grouped in ("false", "true"):
    r = json.load(open(os.path.join(out, f"record-{grouped}.json")))
    rows[grouped] = {"score": r.get("score"), "phases": {
        p["phase"]: {k: p.get(k) for k in ("steps", "train_loop_s", "samples_per_s", "steady_samples_per_s")}
        for p in r.get("phases") or []}}
summary = {"random": rows["false"], "grouped": rows["true"], "speedup": {}}
for phase, p in rows["false"]["phases"].items():
    q = rows["true"]["phases"].get(phase) or {}
    if p.get("train_loop_s") and q.get("train_loop_s") and p.get("steps") == q.get("steps"):
        summary["speedup"][phase] = round(p["train_loop_s"] / q["train_loop_s"], 3)
json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=1)
print(json.dumps(summary, indent=1))
PY
