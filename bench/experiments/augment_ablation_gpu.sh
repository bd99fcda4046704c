#!/bin/bash
# Issue 32's first ablation (one task, CoLA by default) and issue 30's FP32-master-weights check,
# on the GPU machine (transformers 5 there):
#  - teachers fine-tuned straight from MPNet-base's weights stored in fp16 (SST-2 2 epochs, the
#    task 3 epochs; bf16 autocast, lr 2e-5, seed 42): before the FP32 fix SST-2 stayed at chance
#    (49.08) this way; with fp32 weights it reached 93.81. Each checkpoint's stored dtype is logged.
#  - three 6-layer students of the task teacher (bench/experiments/augment_ablation/*.yaml): soft
#    targets alone; TinyBERT's two stages; the two stages over augmented rows. Nothing is chosen on
#    dev: each student is its last checkpoint, scored on dev once.
#   bash bench/experiments/augment_ablation_gpu.sh MPNET_FP16_FOLDER GLUE_DIR RESULTS_DIR
# LIMITS="--train-limit 64 --dev-limit 32" RECIPE_DATA="train_limit: 64, dev_limit: 32" DEVICE=cpu SST2=0
# make a dry run on the CPU (RECIPE_DATA becomes the students' recipes' data section).
set -u
SRC=$1; GLUE=$2; RES=$3
TASK=${TASK:-cola}; DEVICE=${DEVICE:-cuda}; LIMITS=${LIMITS:-}; SST2=${SST2:-1}
PRECISION=bf16; [ "$DEVICE" = cpu ] && PRECISION=fp32
export COMPRESSOR_PROGRESS=0 PYTHONUNBUFFERED=1 TRANSFORMERS_VERBOSITY=error
W=${WORK:-$HOME/aug}; mkdir -p "$W" "$RES/logs"
python3 - > "$RES/env.txt" 2>&1 <<'PY'
import platform, torch, transformers
print(platform.python_version(), "torch", torch.__version__, "transformers", transformers.__version__,
      torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu")
PY
dtype_of() {  # the dtypes a checkpoint stores, and what its config.json says
  python3 -c "
import json, sys
from safetensors import safe_open
f = safe_open(sys.argv[1] + '/model.safetensors', 'pt')
print(sys.argv[1], sorted({str(f.get_slice(k).get_dtype()) for k in f.keys()}),
      json.load(open(sys.argv[1] + '/config.json')).get('dtype', json.load(open(sys.argv[1] + '/config.json')).get('torch_dtype')))
" "$1"; }
echo "source weights: $(dtype_of "$SRC")" > "$RES/dtypes.txt"
teacher() {  # teacher TASK EPOCHS
  local cmd=(python3 -m compressor finetune "$SRC" --task "$1" --data-dir "$GLUE" --out "$W/teacher-$1"
    --epochs "$2" --batch-size 32 --lr 2e-5 --max-length 128 --warmup 0.06 --eval-every 1000000 --seed 42
    --precision $PRECISION --device "$DEVICE" --overwrite $LIMITS)
  echo "${cmd[*]}" | sed "s|$HOME/|~/|g" >> "$RES/commands.txt"
  "${cmd[@]}" > "$RES/logs/teacher-$1.log" 2>&1 && cp "$W/teacher-$1/metrics.json" "$RES/teacher-$1-metrics.json" \
    && dtype_of "$W/teacher-$1" >> "$RES/dtypes.txt"
}
# the FP32 tests on this machine's transformers (MINILM_DIR: MiniLM's tokenizer files, carried)
[ -n "${MINILM_DIR:-}" ] && { MINILM_DIR=$MINILM_DIR GLUE_DIR=$GLUE python3 -m pytest -q -p no:cacheprovider \
  tests/test_fp32_master.py > "$RES/logs/test_fp32_master.log" 2>&1 & }
[ "$SST2" = 1 ] && { teacher sst2 2 & }
teacher "$TASK" 3 || { echo "task teacher failed"; wait; exit 1; }
for v in kd two-stage two-stage-augmented; do
  recipe="bench/experiments/augment_ablation/$v.yaml"
  if [ -n "${RECIPE_DATA:-}" ]; then
    cp "$recipe" "$W/$v.yaml" && echo "data: {dir: $GLUE, ${RECIPE_DATA}}" >> "$W/$v.yaml" && recipe="$W/$v.yaml"
  fi
  cmd=(python3 -m compressor run "$recipe" --task "$TASK"
    --teacher "$W/teacher-$TASK" --data-dir "$GLUE" --device "$DEVICE" --out "$W/$v-$TASK")
  echo "${cmd[*]}" | sed "s|$HOME/|~/|g" >> "$RES/commands.txt"
  ( "${cmd[@]}" > "$RES/logs/$v.log" 2>&1; mkdir -p "$RES/$v"
    for d in "$W/$v-$TASK"/[0-9]*; do cp "$d/record.json" "$RES/$v/$(basename "$d").json" 2>/dev/null; done ) &
done
wait
echo "all done"
