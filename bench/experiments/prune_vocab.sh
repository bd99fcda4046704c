#!/bin/bash
# Vocabulary pruning of a MiniLM-L6 SST-2 teacher on this CPU: keep the word pieces SST-2's
# training sentences use, export both models (fused) and quantise both to dynamic INT8,
# then compare size on disk and dev accuracy of the two INT8 graphs (one scorer for both).
# With BASE (a model made from the teacher, e.g. its head- and FFN-pruned checkpoint), the
# vocabulary of BASE is pruned instead, and BASE's INT8 graph is compared too: a chain.
#   bash bench/experiments/prune_vocab.sh TEACHER GLUE_DIR WORK OUT_JSON [BASE]
set -euo pipefail
TEACHER=$1; GLUE=$2; WORK=$3; OUT=$4; BASE=${5:-}
export COMPRESSOR_PROGRESS=0 TRANSFORMERS_VERBOSITY=error
PY=${PY:-.venv/bin/python}
mkdir -p "$WORK"
$PY -m compressor prune "${BASE:-$TEACHER}" --out "$WORK/vocab" --method vocab --data-dir "$GLUE" --overwrite
for m in teacher ${BASE:+base} vocab; do
  case $m in teacher) src=$TEACHER;; base) src=$BASE;; vocab) src=$WORK/vocab;; esac
  $PY -m compressor export "$src" --out "$WORK/$m-onnx" --data-dir "$GLUE" --overwrite
  $PY -m compressor quantize "$WORK/$m-onnx" --out "$WORK/$m-int8" --method dynamic --preset auto --data-dir "$GLUE" --overwrite
  $PY -m compressor eval "$WORK/$m-int8" --data-dir "$GLUE" --out "$WORK/$m-int8-eval"
done
$PY -m bench.experiments.prune_vocab_summary "$TEACHER" "$WORK" "$OUT" \
  "bash bench/experiments/prune_vocab.sh $TEACHER \$GLUE_DIR $WORK $OUT${BASE:+ $BASE}"
