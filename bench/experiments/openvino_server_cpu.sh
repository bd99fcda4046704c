#!/usr/bin/env bash
# Issue 35 item 4 on the GPU machine's server CPU (16 Xeon cores, AVX-512 VNNI and AMX): the demo's
# chain (its INT8 ONNX graph) against the demo teacher in PyTorch FP32, ONNX Runtime O2 + dynamic
# INT8, OpenVINO FP32 and OpenVINO + NNCF INT8, at 1, 16 and 2 threads, batch 1 and batch 32, each
# scored on the 872 SST-2 dev rows of the packaged data: the comparison of
# bench/results/openvino-peers-demo-cpu.json (2-core CPU), on the server CPU.
#
# That machine has no openvino, no nncf, no optimum and no demo outputs, and one call carries at most
# 64 MiB. So everything is built HERE and carried: the peers are made by the same code the 2-core
# run used (compressor.bench.peers), the bench there finds them built in its work dir (nothing is
# exported or quantised there), and only the openvino runtime wheel is installed there.
#
# Here (a `compressor demo` run folder, default /tmp/demo-run; CPU work under nice, about 2 min):
#   bash bench/experiments/openvino_server_cpu.sh pack [DEMO_RUN]
# writes .carry/ov/part.NNN (a gzipped tar stream cut into parts that fit one call beside the tree
# that travels with it, about 13 MB: PART_MB, default 64 - tree - 6 MiB) and .carry/ov/SHA256SUMS,
# and prints the device calls.
#
# There: one call per part, back to back (staged parts live in ~/ov-stage only while the machine is
# warm, 30 s after a call), each the same command with that part and SHA256SUMS carried:
#   bash bench/experiments/openvino_server_cpu.sh
# Each call stages its part; the call that brings the last one unpacks, installs the wheels into
# ~/ov/site (pip --no-index --target), runs the bench and writes $OUT/openvino-peers-demo-server-cpu.json
# and $OUT/bench.log. A call that finds parts missing (the machine went cold) names them.
#
# Knobs (both sides): THREADS (1,16,2: the most wanted first, the results file is rewritten after
# each count), SENTENCES (300), BUDGET_S (270: the bench is stopped there and keeps the thread
# counts it finished, marked incomplete), PYTHON (python3), INSTALL_WHEELS (1), OV_HOME (~/ov),
# OV_STAGE (~/ov-stage), MODE (both sides: full, the above; or equal, below). A CPU dry run here of the device part on the same files:
#   OV_HOME=/tmp/ovdry OV_STAGE=/tmp/ovdry-stage OUT=/tmp/ovdry-out PYTHON=$PWD/.venv/bin/python \
#     INSTALL_WHEELS=0 THREADS=1,2 SENTENCES=20 bash bench/experiments/openvino_server_cpu.sh
# ran in about 60 s on the 2-core CPU from the packed parts: every row scored, the same dev scores
# and sizes as the 2-core file (teacher 86.93, chain 84.52, ORT INT8 86.24, OpenVINO FP32 86.93,
# OpenVINO INT8 86.47). The bench runs from the checkout through the ignored link runs/ov-device.
#
# MODE=equal: the comparison at equal score. The demo's chain scores 1.95 points under OpenVINO's
# INT8 of the teacher; the toolkit's own answer at that score is the teacher's accuracy-aware INT8
# (compressor quantize --method auto --search-on train: chosen on 2,000 training rows, dev scored
# once). Packed: that folder (EQUAL_INT8, default /tmp/c35eq/auto), the chain, the OpenVINO INT8
# peer already built by 'pack' (WORK/peers) and the wheels; no teacher, no FP32 graph and no ORT
# peer (optimum's folder is not a model folder), so two parts instead of six. There the three
# folders are benched as models (--peers none):
#   MODE=equal bash bench/experiments/openvino_server_cpu.sh pack [DEMO_RUN]
#   MODE=equal bash bench/experiments/openvino_server_cpu.sh      (one call per part, as above)
# writes $OUT/openvino-equal-score-demo-server-cpu.json.
set -uo pipefail
CARRY=.carry/ov
MODE=${MODE:-full}
case $MODE in full|equal) ;; *) echo "MODE must be full or equal, not $MODE"; exit 2 ;; esac
PEERS=pytorch-fp32,ort-o2-int8,openvino-fp32,openvino-int8
# the ORT INT8 peer's preset: the server's (amx); optimum's configuration for amx is avx512_vnni's,
# and the demo chain's INT8 (avx512_vnni on the packing machine) has amx's formats too
PRESET=amx
PY=${PYTHON:-python3}
THREADS=${THREADS:-1,16,2}
SENTENCES=${SENTENCES:-300}

pack() {
  local demo=${1:-/tmp/demo-run} mb work=${WORK:-runs/ov-server} py=${PYTHON:-.venv/bin/python}
  local equal=${EQUAL_INT8:-/tmp/c35eq/auto}
  for d in 00-teacher 04-quantize; do
    [ -d "$demo/$d" ] || { echo "no $demo/$d: run 'compressor demo --out $demo' first"; return 1; }
  done
  [ "$MODE" = full ] || [ -f "$equal/model.onnx" ] || { echo "no INT8 graph in $equal (EQUAL_INT8): make it with
  compressor quantize $demo/00-teacher --out $equal --method auto --search-on train --data-dir embedded"; return 1; }
  mkdir -p .whl/openvino
  ls .whl/openvino/openvino-2026.4.1-*cp312*.whl .whl/openvino/openvino_telemetry-*.whl > /dev/null 2>&1 ||
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      -d .whl/openvino openvino==2026.4.1 openvino-telemetry==2025.2.0 || return 1
  # the peers, built as the 2-core run built them (compressor bench --peers ... --data-dir embedded:
  # NNCF calibrates on the packaged training rows)
  nice -n 10 "$py" -c "
import sys
from compressor.bench.peers import peer_specs
for s in peer_specs(sys.argv[1], sys.argv[2], sys.argv[3].split(','), preset='$PRESET', data_dir='embedded'):
    print(s.name, s.path, s.size_bytes)
" "$demo/00-teacher" "$work/peers" "${PEERS#pytorch-fp32,}" || return 1
  local src=$work/carry
  rm -rf "$src" && mkdir -p "$src/wheels" "$src/peers" || return 1
  cp .whl/openvino/openvino-2026.4.1-*cp312*.whl .whl/openvino/openvino_telemetry-*.whl "$src/wheels/"
  if [ "$MODE" = equal ]; then   # the four folders benched as models, under the names the rows get
    cp -r "$equal" "$src/teacher-int8-auto" && cp -r "$demo/04-quantize" "$src/chain-int8" &&
      cp -r "$work/peers/openvino-int8" "$src/" || return 1
  else
    cp -r "$demo/00-teacher" "$demo/04-quantize" "$src/"
    cp -r "$work/peers/ort-o2-int8-$PRESET" "$work/peers/openvino-fp32" "$work/peers/openvino-int8" "$src/peers/"
    # the plain export's folder stands for the ONNX peers' tokenizer and manifest: its 91 MB graph stays
    mkdir -p "$src/peers/ort-fp32" && find "$work/peers/ort-fp32" -maxdepth 1 -type f ! -name 'model.onnx*' \
      -exec cp {} "$src/peers/ort-fp32/" \;
    # the tokenizer files are the teacher's in every folder: hard links, which tar stores once
    find "$src/04-quantize" "$src/peers" -type f | while read -r f; do
      t="$src/00-teacher/$(basename "$f")"
      [ -f "$t" ] && cmp -s "$f" "$t" && ln -f "$t" "$f"
    done
  fi
  du -sh "$src"/* "$src"/peers/*
  git check-ignore -q .carry/ov || echo '/.carry/' >> .git/info/exclude
  # a call carries 64 MiB with the tree (tracked and untracked files that git does not ignore):
  # parts of what is left, less 6 MiB for the tree growing before the calls are made
  local tree_mb; tree_mb=$({ git ls-files -z; git ls-files -z --others --exclude-standard; } |
    du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
  tree_mb=$(( tree_mb / 1048576 + 1 ))
  mb=${PART_MB:-$(( 64 - tree_mb - 6 ))}
  echo "the tree that travels: about $tree_mb MiB; parts of $mb MiB"
  [ "$mb" -ge 8 ] || { echo "the tree leaves too little room for parts"; return 1; }
  rm -rf "$CARRY" && mkdir -p "$CARRY"
  tar -C "$src" -c . | gzip -1 | split -b "${mb}M" -d -a 3 - "$CARRY/part."
  (cd "$CARRY" && sha256sum part.* > SHA256SUMS)
  ls -la "$CARRY"
  local n; n=$(ls "$CARRY"/part.* | wc -l)
  echo
  echo "device calls ($n, back to back; kind nvidia-h200; the last one runs the bench, about 3-4 min):"
  for p in "$CARRY"/part.*; do
    echo "  run(carry=[\"$p\", \"$CARRY/SHA256SUMS\"], timeout_s=420, command=\"MODE=$MODE bash bench/experiments/openvino_server_cpu.sh\")"
  done
}

stage() {   # copy this call's parts to the stage; 0 when every part listed in SHA256SUMS is there
  local stage=$1 missing=()
  mkdir -p "$stage"
  cp "$CARRY"/SHA256SUMS "$stage/" 2>/dev/null || [ -f "$stage/SHA256SUMS" ] ||
    { echo "no $CARRY/SHA256SUMS carried: name it in carry with each part"; return 2; }
  for p in "$CARRY"/part.*; do [ -f "$p" ] && cp "$p" "$stage/" && echo "staged $(basename "$p")"; done
  while read -r _ name; do [ -f "$stage/$name" ] || missing+=("$name"); done < "$stage/SHA256SUMS"
  if [ ${#missing[@]} -gt 0 ]; then
    echo "staged $(( $(wc -l < "$stage/SHA256SUMS") - ${#missing[@]} )) of $(wc -l < "$stage/SHA256SUMS") parts; send next: ${missing[*]}"
    return 1
  fi
  (cd "$stage" && sha256sum -c --quiet SHA256SUMS) || { echo "a part is damaged: send it again"; return 2; }
}

device() {
  : "${OUT:?OUT=the folder whose files come back}"
  local home=${OV_HOME:-$HOME/ov} stage=${OV_STAGE:-$HOME/ov-stage} tree=$PWD
  stage "$stage"; local rc=$?
  [ $rc -eq 0 ] || return $(( rc == 1 ? 0 : rc ))
  if ! cmp -s "$stage/SHA256SUMS" "$home/unpacked"; then   # unpacked once per set of parts
    rm -rf "$home" && mkdir -p "$home" && cat "$stage"/part.* | tar -xz -C "$home" &&
      cp "$stage/SHA256SUMS" "$home/unpacked" || { echo "could not unpack the parts"; return 2; }
  fi
  export PYTHONPATH=$tree
  if [ "${INSTALL_WHEELS:-1}" = 1 ]; then
    [ -f "$home/site/ok" ] || { "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
      --upgrade --target "$home/site" "$home"/wheels/*.whl && touch "$home/site/ok"; } ||
      { echo "could not install the openvino wheels"; return 2; }
    export PYTHONPATH=$home/site:$tree
  fi
  "$PY" -c "import openvino, compressor; print('openvino', openvino.__version__)" || return 2
  nproc; grep -o -w -E 'amx_int8|avx512_vnni|avx512_bf16|avx2' /proc/cpuinfo | sort | uniq -c
  # run from the checkout through an ignored link to the unpacked files: the results file then names
  # relative paths (04-quantize and 00-teacher as the 2-core file does) and 'python -m compressor'.
  # The CPU only: on the GPU machine --device auto picks CUDA, where export folders are not timed
  local d=runs/ov-device
  mkdir -p runs && ln -sfn "$home" "$d" && rm -rf "$d/results" || return 2
  local models=("$d/04-quantize") name=openvino-peers-demo-server-cpu.json
  local what=(--teacher "$d/00-teacher" --peers "$PEERS" --preset "$PRESET" --work-dir "$d/peers")
  if [ "$MODE" = equal ]; then   # the folders packed for it, benched as models
    models=("$d/teacher-int8-auto" "$d/chain-int8" "$d/openvino-int8") what=(--peers none)
    name=openvino-equal-score-demo-server-cpu.json
  fi
  CUDA_VISIBLE_DEVICES= PYTHONUNBUFFERED=1 timeout "${BUDGET_S:-270}" "$PY" -m compressor bench "${models[@]}" \
    "${what[@]}" --device cpu --threads "$THREADS" --sentences "$SENTENCES" --batch-sizes 32 --data-dir embedded \
    --out "$d/results" 2>&1 | tee "$OUT/bench.log"
  local bench_rc=${PIPESTATUS[0]}
  cp "$d/results/bench.json" "$OUT/$name" 2>/dev/null || { echo "no results (bench exit $bench_rc)"; return 2; }
  echo "bench exit $bench_rc; results: \$OUT/$name"
}

case "${1:-device}" in
  pack) shift; pack "$@" ;;
  device) device ;;
  *) echo "usage: $0 [pack [DEMO_RUN] | device]"; exit 2 ;;
esac
