#!/bin/bash
# Issues 32 and 34 side by side on one machine with four GPUs (device tool, nvidia-h200-x4): the
# accuracy ablation (accuracy_ablation_gpu.sh) on GPUs 0 and 1, compressor auto's searches and its
# one- against two-worker runs (auto_gpu.sh) on GPUs 2 and 3. Each has its own WORK (teachers are
# fine-tuned in each) and its own results folder under OUT (ablation/, auto/).
#   MPNET=BASE_FOLDER bash bench/experiments/gpu_x4_session.sh GLUE_DIR OUT_DIR
# The ablation's variants are this session's (task2-b256 on GLUE-5, CoLA's pruning recoveries and
# lighter prunings, token pruning after the chain on MRPC and RTE); every setting of either script
# can still be given in the environment with the prefix ABL_ or SRCH_ (ABL_LANES, SRCH_TRIALS...).
# PAIR2 (default auto) picks what GPUs 2 and 3 run: auto, seeds (seed_systems_gpu.sh, issue 32's seed
# systems with augmentation on RTE and MRPC; its settings with the prefix SEED_, results in OUT/seeds)
# or none.
# On one GPU (nvidia-h200, 16 cores): PAIR2=none ABL_LANES="0:cola,stsb,mrpc,sst2,rte" ABL_TOKENS_AFTER=
# and fewer variants (task2-b256q0 instead of task2-b256 + task2-q0: each INT8 search is CPU time).
# It needs what both scripts need: optuna's wheels in .whl/auto and the 2-core table in
# .carry/auto-table/TABLE.json (auto_gpu.sh's header).
set -uo pipefail
GLUE=$1; OUT=$2; HERE=$(dirname "$0")
mkdir -p "$OUT"
abl=(LANES="0:cola,stsb 1:mrpc,sst2,rte"
  VARIANTS_cola="task2-b256 task2-h25 task2-f25 task2-redistill task2-rhid task2-r4 task2-iter2"
  VARIANTS_mrpc="task2-b256 task2-rhid" VARIANTS_sst2="task2-b256" VARIANTS_rte="task2-b256" VARIANTS_stsb="task2-b256"
  TOKENS_AFTER="mrpc rte" TOKENS_VARIANT=task2-b256 WORK=$HOME/acc)
auto=(LANES="2:sst2 3:mrpc,cola" SCALE_GPUS=2,3 WORK=$HOME/auto-work)
seeds=(LANES="2:rte 3:mrpc" WORK=$HOME/seed-work)
PAIR2=${PAIR2:-auto}
case $PAIR2 in auto|seeds|none) ;; *) echo "PAIR2 must be auto, seeds or none, not $PAIR2"; exit 2 ;; esac
prefixed() { env | sed -n "s/^$1_//p"; }   # ABL_X=1 -> X=1
mapfile -t abl_env < <(prefixed ABL); mapfile -t auto_env < <(prefixed SRCH); mapfile -t seed_env < <(prefixed SEED)
env "${abl[@]}" "${abl_env[@]}" bash "$HERE/accuracy_ablation_gpu.sh" "$GLUE" "$OUT/ablation" > "$OUT/ablation.log" 2>&1 &
case $PAIR2 in
  auto) env "${auto[@]}" "${auto_env[@]}" bash "$HERE/auto_gpu.sh" "$GLUE" "$OUT/auto" > "$OUT/auto.log" 2>&1 & ;;
  seeds) env "${seeds[@]}" "${seed_env[@]}" bash "$HERE/seed_systems_gpu.sh" "$GLUE" "$OUT/seeds" > "$OUT/seeds.log" 2>&1 & ;;
esac
wait
echo "all done"
