#!/bin/bash
# Head and FFN pruning of the MiniLM-L6 SST-2 teacher, trained on the GPU machine (device
# tool): fine-tune the teacher on all of SST-2 (the reference settings), remove half of all
# attention heads (gradient importance) and half of all FFN neurons (Taylor importance) in
# two steps, each recovered by two epochs of distillation (soft targets at T=2 + hidden
# states) from the unpruned teacher, then bring both models back (fp16, in parts) for the
# CPU benchmark (bench/experiments/prune_minilm_cpu.sh).
#   bash bench/experiments/prune_minilm_gpu.sh MINILM_FOLDER GLUE_DIR OUT_DIR
# MINILM_FOLDER holds the base encoder (fp16 weights are widened to fp32 first).
set -euo pipefail
SRC=$1; GLUE=$2; OUT=$3
export COMPRESSOR_PROGRESS=0 PYTHONUNBUFFERED=1 TRANSFORMERS_VERBOSITY=error
WORK=${WORK:-$HOME/prune}; DEVICE=${DEVICE:-cuda}; LIMITS=${LIMITS:-}   # LIMITS: --train-limit N ... for a dry run
mkdir -p "$WORK" "$OUT"
python3 -m bench.experiments.widen "$SRC" "$WORK/minilm"
: > "$OUT/commands.txt"
run() { echo "$*" | sed "s|$HOME/|~/|g" >> "$OUT/commands.txt"; echo "+ $*"; "$@"; }
run python3 -m compressor finetune "$WORK/minilm" --task sst2 --data-dir "$GLUE" \
  --out "$WORK/teacher" --epochs 3 --lr 5e-5 --batch-size 32 --max-length 128 --warmup 0 \
  --weight-decay 0 --eval-every 500 --seed 42 --precision bf16 --device "$DEVICE" --overwrite $LIMITS
cp "$WORK/teacher/metrics.json" "$OUT/teacher-metrics.json"
run python3 -m compressor prune "$WORK/teacher" --out "$WORK/pruned" --data-dir "$GLUE" \
  --set heads=0.5 --set ffn=0.5 --set iterations=2 --set device="$DEVICE" \
  --recover mode=distill --recover losses.kd=1 --recover losses.kd.temperature=2 \
  --recover losses.hidden=1 --recover epochs=2 --recover lr=1e-4 --recover eval_every=500 \
  --recover precision=bf16 --recover device="$DEVICE" --overwrite $LIMITS
cp "$WORK/pruned/metrics.json" "$OUT/pruned-metrics.json"
cp "$WORK/pruned/importance.md" "$WORK/pruned/importance.png" "$OUT/"
# both models back as fp16 parts of at most 15 MB (the device tool brings back 16 MB a file)
python3 - "$WORK" "$OUT/carry" <<'PY'
import os, shutil, subprocess, sys
from safetensors.torch import load_file, save_file
work, out = sys.argv[1:]
for name in ("teacher", "pruned"):
    src, dst = os.path.join(work, name), os.path.join(work, name + "-fp16")
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("model.safetensors", "*.json.tmp*"))
    w = load_file(os.path.join(src, "model.safetensors"))
    save_file({k: v.half() if v.is_floating_point() else v for k, v in w.items()},
              os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
    os.makedirs(out, exist_ok=True)
    subprocess.run(f"tar -C {dst} -c . | split -b 15M -d -a 2 - {out}/{name}.", shell=True, check=True)
PY
ls -la "$OUT/carry"
