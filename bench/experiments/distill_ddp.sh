#!/bin/bash
# Data-parallel distillation measured on a two-GPU machine (device tool, kind nvidia-h100-x2):
# fine-tune the MPNet-base SST-2 teacher on one GPU, then distil a 6-layer student (every
# other teacher layer, soft targets, teacher run on every batch) with 1 GPU and with 2 GPUs
# at the same global batch, and compare training throughput and dev accuracy.
#   bash bench/experiments/distill_ddp.sh MPNET_FOLDER GLUE_DIR OUT_DIR [BATCHES] [EPOCHS]
# MPNET_FOLDER holds the base encoder (fp16 weights are widened to fp32 first, as they
# travel at half size); BATCHES is a comma list of global batch sizes (default 256);
# REPEATS (environment, default 1) times each 1-GPU/2-GPU pair that many times.
# Writes OUT_DIR/distill-ddp-mpnet.json (bench.experiments.distill_ddp_summary).
set -euo pipefail
SRC=$1; GLUE=$2; OUT=$3; BATCHES=${4:-256}; EPOCHS=${5:-3}
# NVLink multicast stays off in every process (the GPU machines' rule); --nproc sets it too
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export COMPRESSOR_PROGRESS=0 PYTHONUNBUFFERED=1 TRANSFORMERS_VERBOSITY=error
WORK=${WORK:-$HOME/ddp}; DEVICE=${DEVICE:-cuda}; LIMITS=${LIMITS:-}   # LIMITS: --train-limit N ... for a dry run
mkdir -p "$WORK" "$OUT"
python3 -m bench.experiments.widen "$SRC" "$WORK/mpnet"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/gpus.txt" || true
: > "$OUT/commands.txt"
run() { echo "$*" >> "$OUT/commands.txt"; echo "+ $*"; "$@"; }
START=$SECONDS
run python3 -m compressor finetune "$WORK/mpnet" --task sst2 --data-dir "$GLUE" \
  --out "$WORK/teacher" --epochs 1 --lr 2e-5 --batch-size 32 --max-length 128 --warmup 0.06 \
  --precision bf16 --device "$DEVICE" --overwrite $LIMITS
# REPEATS=N runs each pair N times, 1 GPU then 2 in turn, so that drift on the host hits both
for batch in ${BATCHES//,/ }; do
 for r in $(seq 1 "${REPEATS:-1}"); do
  suffix=$( (( r > 1 )) && echo "-r$r" || true)
  for n in 1 2; do
    if (( SECONDS - START > ${BUDGET_S:-480} )); then echo "time budget spent: skipping b$batch x$n$suffix"; continue; fi
    run python3 -m compressor distill "$WORK/teacher" --out "$WORK/student-b$batch-gpu$n$suffix" \
      --data-dir "$GLUE" --student kind=layers --student num_layers=6 --student pick=every \
      --loss kd=1 --no-cache --epochs "$EPOCHS" --batch-size "$batch" --lr 1e-4 --warmup 0.06 \
      --max-length 128 --precision bf16 --device "$DEVICE" --overwrite --nproc "$n" $LIMITS
  done
 done
done
python3 -m bench.experiments.distill_ddp_summary "$WORK" "$OUT"
