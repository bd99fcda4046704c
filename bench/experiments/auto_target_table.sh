#!/bin/bash
# Issue 34, the target side: on the deployment CPU (this 2-core machine, nothing else running), the
# latency table that auto_gpu.sh's searches read with --target-table: every entry auto_space.sh's
# space can ask for at SST-2's, MRPC's and CoLA's lengths, at 1 thread, into one file (the three
# tasks share a family: MPNet-base, 2 labels, 128 tokens). MPNet-base's own folder serves (random
# weights are timed): no fine-tuned teacher is needed here. Entries already in the file are kept,
# so a stopped run resumes where it was.
#   MPNET=/tmp/mpnet GLUE_DIR=../shared/glue_data bash bench/experiments/auto_target_table.sh [TABLE]
# TABLE defaults to .carry/auto-table/TABLE.json (the file auto_gpu.sh reads there; name .carry/auto-table
# in the device call's carry: it is small). TASKS (default "sst2 mrpc cola"), THREADS (default 1),
# PYTHON (default .venv/bin/python).
# Timings taken while other work runs are inflated: run it on a quiet machine.
# Test of the script with a tiny MPNet (12 layers of 48 wide; a smaller space):
#   MPNET=/tmp/tinympnet12h HEADS=0,0.5 FFN=0 bash bench/experiments/auto_target_table.sh /tmp/tiny-table.json
set -euo pipefail
HERE=$(dirname "$0")
source "$HERE/auto_space.sh"
TABLE=${1:-.carry/auto-table/TABLE.json}
MPNET=${MPNET:?MPNET=the MPNet-base folder}
: "${GLUE_DIR:?GLUE_DIR=the GLUE folder (a few training rows calibrate the INT8 graphs)}"
PYTHON=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
mkdir -p "$(dirname "$TABLE")"
TASKS=(${TASKS:-sst2 mrpc cola})
lengths=$(for task in "${TASKS[@]}"; do auto_seq $task; done | paste -sd,)
start=$SECONDS
# one call for every task's length: each model is exported once (the tasks share the family; the
# first task's rows calibrate the INT8 graphs)
"$PYTHON" -m compressor auto "$MPNET" --task "${TASKS[0]}" --measure-table --seq-len "$lengths" \
  --threads "${THREADS:-1}" "${AUTO_SPACE[@]}" --latency-table "$TABLE"
echo "target table $TABLE complete for the space of auto_space.sh in $((SECONDS - start)) s"
