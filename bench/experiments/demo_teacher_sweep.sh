#!/usr/bin/env bash
# How the demo's teacher budget was chosen: MiniLM-L6 on SST-2 for one CPU-sized
# budget of steps, three seeds each. Dev accuracy every 50 steps is printed.
# Made bench/results/demo-teacher-sweep.log on the GPU machine (device tool, H200):
#   M=<MiniLM folder> GLUE_DIR=<glue> bash bench/experiments/demo_teacher_sweep.sh > demo-teacher-sweep.log
#   A: 8,000 packaged rows, 2 epochs, lr 1e-4     B: same, lr 5e-5
#   C: 8,000 rows, 1 epoch, batch 16, lr 5e-5     D: first 16,000 GLUE rows, 1 epoch, lr 1e-4
# (A-C ran on the earlier 8,000-row packaged slice; the slice now holds 16,000 rows.)
set -u
run() {
  n=$1; s=$2; shift 2
  ( python3 -m compressor finetune "$M" --task sst2 --out "/tmp/v-$n-$s" --max-length 64 \
      --eval-every 50 --seed "$s" --device cuda --overwrite "$@" >/dev/null 2>&1
    python3 -c "import json;h=json.load(open('/tmp/v-$n-$s/metrics.json'))['history'];print('$n $s',[round(x['score'],2) for x in h])" ) &
}
for s in 42 1 2; do
  run A $s --data-dir embedded --train-limit 8000 --epochs 2 --lr 1e-4
  run B $s --data-dir embedded --train-limit 8000 --epochs 2 --lr 5e-5
  run C $s --data-dir embedded --train-limit 8000 --epochs 1 --lr 5e-5 --batch-size 16
  run D $s --data-dir "$GLUE_DIR" --train-limit 16000 --epochs 1 --lr 1e-4
done
wait
