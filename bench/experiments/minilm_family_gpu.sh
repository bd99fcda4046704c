#!/bin/bash
# The MiniLM-L6 SST-2 teacher and what the method issues build from it, on one GPU (device
# tool), in two calls (a call runs at most 10 minutes):
#   PART=1: fine-tune the teacher on all of SST-2 (the reference settings), then side by side on
#           the same GPU: its 3-layer distilled student (soft targets), BERT-of-Theseus 6 -> 3 with
#           a constant rate and with the linear curriculum (the same 3 epochs each), and ALBERT
#           sharing (3 groups of 2 layers) with a rank-128 factorised embedding, recovered by
#           distillation. The teacher comes back as fp16 parts.
#   PART=2: from the teacher of part 1 (carried back as fp16): the factorised embedding at ranks
#           64, 128 and 256 (one epoch of distillation each), 90% unstructured sparsity with two
#           epochs of distillation, heads + FFN removed at 25/50/75% with one epoch of recovery,
#           and sharing over the whole stack. The 3-layer student comes back as fp16 parts (part 1's
#           when the machine still holds it, else distilled again with the same command).
# Every run evaluates dev once, at its end: no checkpoint is chosen on dev, so the dev figures
# are the last weights' (the fine-tuned teacher too).
#   PART=3: sharing FFN only, attention only (3 groups of 2 layers, each with a rank-128 embedding),
#           all weights with rank-32 adapters, all weights alone, and embedding ranks 32 and 80;
#           the sharing run with the fewest parameters at 98% of the teacher or more comes back.
#   PART=1 bash bench/experiments/minilm_family_gpu.sh MINILM_FOLDER GLUE_DIR OUT_DIR
#   PART=2|3 bash bench/experiments/minilm_family_gpu.sh TEACHER_FOLDER GLUE_DIR OUT_DIR
# Folders of fp16 weights are widened to fp32 first. LIMITS="--train-limit 64 --dev-limit 32"
# and DEVICE=cpu make a dry run.
set -euo pipefail
SRC=$1; GLUE=$2; OUT=$3
export COMPRESSOR_PROGRESS=0 PYTHONUNBUFFERED=1 TRANSFORMERS_VERBOSITY=error
WORK=${WORK:-$HOME/family}; DEVICE=${DEVICE:-cuda}; LIMITS=${LIMITS:-}; PART=${PART:-1}
PRECISION=${PRECISION:-bf16}; [ "$DEVICE" = cpu ] && PRECISION=fp32
mkdir -p "$WORK" "$OUT/logs"
: > "$OUT/commands.txt"
ONCE=1000000   # eval_every past the last step: dev is scored once, at the end
log() { echo "$*" | sed "s|$HOME/|~/|g" >> "$OUT/commands.txt"; }
# run NAME CMD...: in the background, its log under OUT/logs, its metrics.json copied when done
bg() { local name=$1; shift; log "$*"; ( "$@" > "$OUT/logs/$name.log" 2>&1 && \
  cp "$WORK/$name/metrics.json" "$OUT/$name-metrics.json" || echo "FAILED $name" >> "$OUT/logs/failed.txt" ) & }
REC="--recover precision=$PRECISION --recover device=$DEVICE --recover eval_every=$ONCE"
KD="--recover mode=distill --recover losses.kd=1 --recover losses.kd.temperature=2"
T=$WORK/teacher

if [ "$PART" = 1 ]; then
  python3 -m bench.experiments.widen "$SRC" "$WORK/minilm"
  log python3 -m compressor finetune minilm-l6 --task sst2 --out teacher --epochs 3 --lr 5e-5 \
    --batch-size 32 --max-length 128 --warmup 0 --weight-decay 0 --eval-every $ONCE --seed 42 --precision $PRECISION
  python3 -m compressor finetune "$WORK/minilm" --task sst2 --data-dir "$GLUE" --out "$T" \
    --epochs 3 --lr 5e-5 --batch-size 32 --max-length 128 --warmup 0 --weight-decay 0 \
    --eval-every $ONCE --seed 42 --precision $PRECISION --device "$DEVICE" --overwrite $LIMITS \
    > "$OUT/logs/teacher.log" 2>&1
  cp "$T/metrics.json" "$OUT/teacher-metrics.json"
  bg student python3 -m compressor distill "$T" --out "$WORK/student" --data-dir "$GLUE" \
    --student num_layers=3 --student pick=every --loss kd=1 --loss kd.temperature=2 --epochs 3 --lr 1e-4 \
    --batch-size 32 --max-length 128 --warmup 0 --eval-every $ONCE --precision $PRECISION --device "$DEVICE" \
    --overwrite $LIMITS
  for sched in constant linear; do
    extra="--set schedule=constant --set rate=0.5"; [ $sched = linear ] && extra="--set schedule=linear --set b=0.3"
    bg theseus-$sched python3 -m compressor theseus "$T" --out "$WORK/theseus-$sched" --data-dir "$GLUE" \
      --set num_layers=3 --set init=last $extra --set replacing_epochs=2 --set finetune_epochs=1 --set lr=1e-4 \
      --set batch_size=32 --set max_length=128 --set eval_every=$ONCE --set device="$DEVICE" \
      --set precision=$PRECISION --overwrite $LIMITS
  done
  bg share-g2-e128 python3 -m compressor share "$T" --out "$WORK/share-g2-e128" --data-dir "$GLUE" \
    --set share=all --set group=2 --set init=mean --set embedding_rank=128 --set device="$DEVICE" \
    $KD --recover losses.hidden=1 --recover epochs=3 --recover lr=1e-4 $REC --overwrite $LIMITS
  wait
  PACK="teacher"
elif [ "$PART" = 2 ]; then
  python3 -m bench.experiments.widen "$SRC" "$T"
  if [ -f "$WORK/student/model.safetensors" ]; then echo "part 1's student is still here" >> "$OUT/commands.txt"
  else
    bg student python3 -m compressor distill "$T" --out "$WORK/student" --data-dir "$GLUE" \
      --student num_layers=3 --student pick=every --loss kd=1 --loss kd.temperature=2 --epochs 3 --lr 1e-4 \
      --batch-size 32 --max-length 128 --warmup 0 --eval-every $ONCE --precision $PRECISION --device "$DEVICE" \
      --overwrite $LIMITS
  fi
  for rank in 64 128 256; do
    bg embed-r$rank python3 -m compressor share "$T" --out "$WORK/embed-r$rank" --data-dir "$GLUE" \
      --set share=none --set embedding_rank=$rank --set device="$DEVICE" $KD --recover epochs=1 \
      --recover lr=1e-4 $REC --overwrite $LIMITS
  done
  bg magnitude90 python3 -m compressor prune "$T" --out "$WORK/magnitude90" --method magnitude \
    --data-dir "$GLUE" --set sparsity=0.9 --set schedule=gradual --set scope=global --set device="$DEVICE" \
    $KD --recover epochs=2 --recover lr=1e-4 $REC --overwrite $LIMITS
  for share in 0.25 0.5 0.75; do
    bg prune-$share python3 -m compressor prune "$T" --out "$WORK/prune-$share" --data-dir "$GLUE" \
      --set heads=$share --set ffn=$share --set device="$DEVICE" $KD --recover losses.hidden=1 \
      --recover epochs=1 --recover lr=1e-4 $REC --overwrite $LIMITS
  done
  bg share-all python3 -m compressor share "$T" --out "$WORK/share-all" --data-dir "$GLUE" \
    --set share=all --set group=0 --set init=mean --set device="$DEVICE" \
    $KD --recover losses.hidden=1 --recover epochs=3 --recover lr=1e-4 $REC --overwrite $LIMITS
  wait
  PACK="student"
else   # PART=3: sharing that keeps 98% at 40% fewer parameters, and two more embedding ranks
  python3 -m bench.experiments.widen "$SRC" "$T"
  for what in ffn attention; do
    bg share-$what-g2-e128 python3 -m compressor share "$T" --out "$WORK/share-$what-g2-e128" \
      --data-dir "$GLUE" --set share=$what --set group=2 --set init=mean --set embedding_rank=128 \
      --set device="$DEVICE" $KD --recover losses.hidden=1 --recover epochs=3 --recover lr=1e-4 $REC \
      --overwrite $LIMITS
  done
  bg share-all-g2-a32-e128 python3 -m compressor share "$T" --out "$WORK/share-all-g2-a32-e128" \
    --data-dir "$GLUE" --set share=all --set group=2 --set init=mean --set adapter_rank=32 \
    --set embedding_rank=128 --set device="$DEVICE" $KD --recover losses.hidden=1 --recover epochs=3 \
    --recover lr=1e-4 $REC --overwrite $LIMITS
  bg share-all-g2 python3 -m compressor share "$T" --out "$WORK/share-all-g2" --data-dir "$GLUE" \
    --set share=all --set group=2 --set init=mean --set device="$DEVICE" $KD --recover losses.hidden=1 \
    --recover epochs=3 --recover lr=1e-4 $REC --overwrite $LIMITS
  for rank in 32 80; do
    bg embed-r$rank python3 -m compressor share "$T" --out "$WORK/embed-r$rank" --data-dir "$GLUE" \
      --set share=none --set embedding_rank=$rank --set device="$DEVICE" $KD --recover epochs=1 \
      --recover lr=1e-4 $REC --overwrite $LIMITS
  done
  wait
  # back comes the sharing run with the most parameters saved among those keeping 98% of the teacher
  PACK=$(python3 - "$WORK" <<'PY'
import json, os, sys
work = sys.argv[1]
runs = [json.load(open(os.path.join(work, n, "metrics.json"))) | {"name": n}
        for n in sorted(os.listdir(work)) if n.startswith("share-")
        and os.path.exists(os.path.join(work, n, "metrics.json"))]
ok = [r for r in runs if r["score"] >= 0.98 * r["score_before"]]
print(min(ok, key=lambda r: r["parameters"])["name"] if ok else "")
PY
)
fi
cat "$OUT/logs/failed.txt" 2>/dev/null || true
# models back as fp16 tar parts of at most 15 MB (the device tool brings back 16 MB a file)
python3 - "$WORK" "$OUT/carry" $PACK <<'PY'
import os, shutil, subprocess, sys
from safetensors.torch import load_file, save_file
work, out, names = sys.argv[1], sys.argv[2], sys.argv[3:]
os.makedirs(out, exist_ok=True)
for name in names:
    src, dst = os.path.join(work, name), os.path.join(work, name + "-fp16")
    if not os.path.exists(os.path.join(src, "model.safetensors")):
        print("missing", src); continue
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("model.safetensors", "*.tmp*"))
    w = load_file(os.path.join(src, "model.safetensors"))
    save_file({k: v.half() if v.is_floating_point() else v for k, v in w.items()},
              os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
    subprocess.run(f"tar -C {dst} -c . | split -b 15M -d -a 2 - {out}/{name}.", shell=True, check=True)
PY
# everything else in one file: the device tool brings back at most 8 files
tar -C "$OUT" -czf "$WORK/results.tgz" --exclude=./carry . && \
  find "$OUT" -mindepth 1 -maxdepth 1 ! -name carry -exec rm -rf {} + && mv "$WORK/results.tgz" "$OUT/"
ls -la "$OUT" "$OUT/carry"
