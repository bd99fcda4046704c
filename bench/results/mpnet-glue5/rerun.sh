#!/bin/bash
# Rerun the MPNet-base GLUE-5 headline (issue 14) from the repository root, in two halves.
#
#   bash bench/results/mpnet-glue5/rerun.sh gpu MPNET_BASE GLUE_DIR RESULTS_DIR
#       on a machine with one GPU and 16 cores (here: the device tool's, after
#       bench/experiments/device_setup.sh put the pinned stack in ~/site): each task's teacher,
#       6-layer kd student, Theseus 12 -> 6, the chain (heads+FFN halved with kd recovery,
#       vocabulary), INT8 of teacher and chain; then the GPU bench (FP32/BF16, batch 1 and 256)
#       and the server-CPU bench beside the peers (PyTorch INT8, optimum O2 + INT8, INC).
#       Over an hour on one H100 or H200 (more than one device session: see README.md "Next
#       runs"); copy RESULTS_DIR's *-metrics.json, *-quantize.json and commands-*.txt into a new
#       bench/results/mpnet-glue5/pipeline<N>/ (N above the last: the report takes each task from
#       the newest run that has its teacher) and its bench-*.json into
#       bench/results/mpnet-glue5/server/; then every seed system's recipe (recipes/mpnet/) on each
#       teacher: copy RESULTS_DIR/seeds/ (manifests, records) and commands-seeds.txt into
#       bench/results/mpnet-glue5/seeds/; last the early-exit chain on the server CPU beside its
#       teacher, that teacher's fused INT8 and O2 + INT8 (PHASE=eebench): copy
#       RESULTS_DIR/bench-TASK-ee-cpu.json to bench/results/mpnet-glue5/early-exit-server/bench-TASK-cpu.json
#       and seeds/early-exit-holdout-TASK/ to early-exit-server/run-TASK/.
#   bash bench/results/mpnet-glue5/rerun.sh cpu MPNET_BASE GLUE_DIR
#       on the edge CPU: latency of copies with the chains' shapes (read from the runs that
#       latency-commands.sh names: point its --runs at the new pipeline<N>/), then
#       the summary and the report (report.md, report.html, report.png, report.json), and the
#       summary of early exit on the server CPU (early-exit-server/summary.md).
set -euo pipefail
where=${1:?gpu or cpu}; base=${2:?the MPNet-base folder (../shared/tools/get-mpnet-teacher.sh)}
glue=${3:?GLUE_DIR}
case $where in
gpu)
  out=${4:?RESULTS_DIR}
  MPNET=$base PHASE=pipeline bash bench/experiments/mpnet_glue5_chain_gpu.sh "$glue" "$out"
  PHASE=bench bash bench/experiments/mpnet_glue5_chain_gpu.sh "$glue" "$out"
  MPNET=$base LANES=2 PHASE=seeds bash bench/experiments/mpnet_glue5_chain_gpu.sh "$glue" "$out"
  PHASE=eebench bash bench/experiments/mpnet_glue5_chain_gpu.sh "$glue" "$out" ;;
cpu)
  MPNET_BASE=$base GLUE_DIR=$glue bash bench/results/mpnet-glue5/latency-commands.sh
  ${PYTHON:-.venv/bin/python} -m bench.experiments.mpnet_glue5_summary bench/results/mpnet-glue5
  ${PYTHON:-.venv/bin/python} -m bench.experiments.mpnet_glue5_report bench/results/mpnet-glue5
  ${PYTHON:-.venv/bin/python} -m bench.experiments.early_exit_server_summary bench/results/mpnet-glue5/early-exit-server ;;
*) echo "rerun.sh: the first argument is gpu or cpu, not $where" >&2; exit 2 ;;
esac
