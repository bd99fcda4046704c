#!/usr/bin/env bash
# Does rounding pruned FFN widths to a multiple of 64 (`prune --set ffn_multiple=64`) change INT8
# latency on this CPU? The SST-2 chain's shape from pipeline7/ (heads [5,8,5,7,4,7], FFN
# [2122,2309,1491,1165,1203,926]) against the same shape with each FFN width rounded to the nearest
# multiple of 64 ([2112,2304,1472,1152,1216,896]): copies built from MPNet-base by
# mpnet_glue5_latency.py (fresh heads: latency only), both INT8 graphs timed in one
# `compressor bench` run, each in its own process, in rounds.
#   MPNET_BASE=/tmp/mpnet-base bash bench/experiments/ffn_multiple_cpu.sh
# Needs runs/mpnet-glue5-latency7/sst2/ from latency-commands.sh (the unrounded chain's copy).
set -euo pipefail
export GLUE_DIR=${GLUE_DIR:-../shared/glue_data} COMPRESSOR_PROGRESS=0
R=bench/results/mpnet-glue5 OUT=bench/results/mpnet-glue5/ffn-multiple W=${WORK:-runs/ffn-multiple}
mkdir -p "$W/runs" "$OUT"
.venv/bin/python - "$R/pipeline7/sst2-chain-hf-metrics.json" "$W/runs/sst2-chain-hf-metrics.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["pruning"]["ffn_after"] = [max(64, int(round(w / 64)) * 64) for w in d["pruning"]["ffn_after"]]
json.dump(d, open(sys.argv[2], "w"))
PY
.venv/bin/python -m bench.experiments.mpnet_glue5_latency --base "${MPNET_BASE:?}" --runs "$W/runs" --task sst2 \
  --data-dir "$GLUE_DIR" --work "$W" --out "$W/latency-sst2-cpu.json" --peers pytorch-fp32
.venv/bin/compressor bench chain-int8=runs/mpnet-glue5-latency7/sst2/chain-int8 chain64-int8="$W/sst2/chain-int8" \
  --teacher runs/mpnet-glue5-latency7/sst2/teacher --peers none --device cpu --threads 1,2 --sentences 200 --batch-sizes 32 \
  --no-score --no-memory --task sst2 --data-dir "$GLUE_DIR" --out "$OUT/bench-sst2-cpu.json"
