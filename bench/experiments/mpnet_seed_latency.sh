#!/usr/bin/env bash
# The seed systems' latency on this CPU (the edge box; issue 14), on copies with their shapes.
# The seed runs (bench/results/mpnet-glue5/seeds/, trained on the GPU machine) keep no weights here;
# latency depends on shapes only, so each shape is rebuilt from MPNet-base and trained for 25 steps
# on 800 rows (enough for logits that differ, so INT8's parity check against FP32 can tell a sound
# graph), every shape a recipe in recipes/mpnet/ trains:
#   student6      DistilBERT-style, BERT-PKD, BERT-of-Theseus 12 -> 6 (every other layer: one shape)
#   tinybert4     TinyBERT 4 layers, hidden 312, FFN 1200 (a config student)
#   minilm6       MiniLM-style 6 layers, hidden 384, FFN 1536
#   mobilebert12  MobileBERT-style 12 layers, hidden 384, FFN 1536
#   pd-minilm     PD: the pre-trained MiniLM-L6 (BERT, its own tokenizer)
#   albert        ALBERT-style sharing: layer pairs, embedding rank 128 (12 layers of compute)
#   teacher       the teacher: Q8BERT dynamic and QAT, Q-BERT mixed (with FP32 layers) share its shape
#   chain         the headline's chain for the task (pipeline7's heads and FFN widths per layer, then
#                 the vocabulary), as mpnet_glue5_latency.py builds it: timed in the same run
# Each as the toolkit's fused dynamic INT8 ONNX (PRESET, default auto: this CPU's; a VNNI preset on
# an AVX2-only CPU saturates and INT8's parity check refuses the graph; the op mix and so the
# latency are the same), timed by one `compressor bench` beside the teacher in PyTorch FP32 and
# optimum's O2 + INT8 peer (the same preset): batch 1 over 100 SST-2 dev sentences, each variant
# in its own process, in rounds, 1 and 2 threads; --no-score (barely trained copies: the scores
# are the seed runs').
#   MPNET_BASE=/tmp/mpnet-base GLUE_DIR=../shared/glue_data bash bench/experiments/mpnet_seed_latency.sh
# BUILD_ONLY=1 builds the copies and stops before the timing (which wants the CPU to itself).
set -euo pipefail
: "${MPNET_BASE:?MPNET_BASE=the MPNet-base folder (../shared/tools/get-mpnet-teacher.sh)}" "${GLUE_DIR:?}"
W=${WORK:-runs/mpnet-seed-latency} OUT=${OUT:-bench/results/mpnet-glue5/seed-latency} T=${TASK:-sst2}
C=(${COMPRESSOR:-.venv/bin/compressor})
mkdir -p "$W" "$OUT"
run() { echo "$*" | sed "s|$HOME/|~/|g" >> "$OUT/commands.txt"; "$@"; }
one=(--max-steps 25 --train-limit 800 --dev-limit 8 --device cpu --overwrite)
[ -f "$W/teacher/metrics.json" ] || run "${C[@]}" finetune "$MPNET_BASE" --task $T --data-dir "$GLUE_DIR" \
  --out "$W/teacher" "${one[@]}"
student() {  # name student settings...
  local name=$1; shift
  local args=(); for s in "$@"; do args+=(--student "$s"); done
  [ -f "$W/$name/metrics.json" ] || run "${C[@]}" distill "$W/teacher" --out "$W/$name" \
    --data-dir "$GLUE_DIR" "${args[@]}" "${one[@]}"
}
student student6 kind=layers num_layers=6 pick=every
student tinybert4 kind=config num_layers=4 hidden_size=312 heads=12 ffn_size=1200
student minilm6 kind=config num_layers=6 hidden_size=384 heads=12 ffn_size=1536
student mobilebert12 kind=config num_layers=12 hidden_size=384 heads=12 ffn_size=1536
student pd-minilm kind=pretrained model=minilm-l6
[ -f "$W/albert/metrics.json" ] || run "${C[@]}" share "$W/teacher" --out "$W/albert" --data-dir "$GLUE_DIR" \
  --set share=all --set group=2 --set init=mean --set embedding_rank=128 --recover mode=finetune --recover epochs=1 \
  --train-limit 800 --dev-limit 8 --overwrite
RUNS=${RUNS:-bench/results/mpnet-glue5/pipeline7}
[ -f "$W/chain-hf/config.json" ] || .venv/bin/python - "$W/student6" "$RUNS/$T-chain-hf-metrics.json" "$W/chain-hf" <<'PY'
import json, sys
from bench.experiments.prune_latency import build_pruned
pruning = json.load(open(sys.argv[2]))["pruning"]
print(build_pruned(sys.argv[1], {"heads": pruning["heads_after"], "ffn": pruning["ffn_after"]}, sys.argv[3]))
PY
[ -f "$W/chain/metrics.json" ] || run "${C[@]}" prune "$W/chain-hf" --out "$W/chain" --data-dir "$GLUE_DIR" \
  --method vocab --recover mode=none --dev-limit 8 --overwrite
variants=()
for name in teacher student6 tinybert4 minilm6 mobilebert12 pd-minilm albert chain; do
  [ -f "$W/$name-onnx/manifest.json" ] || run "${C[@]}" export "$W/$name" --out "$W/$name-onnx" --data-dir "$GLUE_DIR" \
    --parity-limit 64 --overwrite
  [ -f "$W/$name-int8/quantize.json" ] || run "${C[@]}" quantize "$W/$name-onnx" --out "$W/$name-int8" \
    --data-dir "$GLUE_DIR" --preset ${PRESET:-auto} --dev-limit 64 --overwrite
  variants+=("$name-int8=$W/$name-int8")
done
[ "${BUILD_ONLY:-0}" = 1 ] && { echo "built: ${variants[*]}"; exit 0; }   # time later, on a quiet CPU
run "${C[@]}" bench "${variants[@]}" --teacher "$W/teacher" --task $T --data-dir "$GLUE_DIR" \
  --peers pytorch-fp32,ort-o2-int8 --preset ${PRESET:-auto} --device cpu --threads 1,2 --sentences 100 --batch-sizes none \
  --no-score --no-memory --work-dir "$W/peers" --out "$OUT/bench-$T-cpu.json"
echo "results: $OUT/bench-$T-cpu.json"
