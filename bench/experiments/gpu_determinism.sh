#!/bin/bash
# Does fine-tuning repeat itself on a GPU with the same seed? (docs/training.md). Run on the device
# machine from the checkout, carrying .carry/glue5 (the GLUE-5 pack), .carry/tinympnet (the tiny
# 12-layer MPNet, /tmp/tinympnet) and this script:
#   bash bench/experiments/gpu_determinism.sh
# It fine-tunes the tiny MPNet on 1,400 MRPC rows twice, on CoLA twice, then on MRPC twice more
# with torch.use_deterministic_algorithms(True) set before the command and
# CUBLAS_WORKSPACE_CONFIG=:4096:8 (what COMPRESSOR_DETERMINISTIC=1 does in set_seed, warn_only
# aside), and prints each checkpoint's weights' sha256 and its dev score.
set -u
mkdir -p ~/glue && tar -xzf .carry/glue5/glue5.tgz -C ~/glue
T=.carry/tinympnet
ft() {  # name task extra-python-prefix
  local name=$1 task=$2; shift 2
  timeout 100 python3 "$@" finetune $T --task $task --data-dir ~/glue --out ~/det/$name --epochs 2 --batch-size 16 \
    --lr 1e-4 --max-length 128 --eval-every 1000000 --seed 42 --precision bf16 --device cuda --overwrite \
    --holdout 100 --train-limit 1500 > ~/det/$name.log 2>&1
  echo "$name $(sha256sum ~/det/$name/model.safetensors | cut -c1-16) $(grep -o 'score [0-9.]*' ~/det/$name.log | tail -1)"
}
mkdir -p ~/det
DET='-cimport torch,runpy,sys; torch.use_deterministic_algorithms(True); sys.argv=["compressor"]+sys.argv[1:]; runpy.run_module("compressor", run_name="__main__")'
ft mrpc-a mrpc -m compressor
ft mrpc-b mrpc -m compressor
ft cola-a cola -m compressor
ft cola-b cola -m compressor
export CUBLAS_WORKSPACE_CONFIG=:4096:8
ft mrpc-da mrpc "$DET"
ft mrpc-db mrpc "$DET"
tail -3 ~/det/mrpc-da.log
