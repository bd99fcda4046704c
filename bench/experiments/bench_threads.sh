#!/bin/sh
# Issue 15: `compressor bench` at 1 and 2 threads, as a user runs it, each variant in its own
# process and timed in rounds. Two chains on this 2-core CPU:
#   1. the MiniLM-L6 SST-2 teacher (runs/teachers/minilm-l6-sst2), its fused ONNX export and
#      that export's dynamic INT8, beside the five default peers;
#   2. the demo's chain: its teacher (runs/demo-teacher) and 3-layer student (runs/demo-student),
#      the student's fused ONNX export and dynamic INT8, beside the same peers of the demo teacher.
# The exports are made first (shared CPU lock), then each benchmark holds the CPU alone.
#   bash bench/experiments/bench_threads.sh
set -e
export GLUE_DIR=${GLUE_DIR:-../shared/glue_data}
C=${COMPRESSOR:-.venv/bin/compressor}
W=${WORK:-runs/issue15}
SENTENCES=${SENTENCES:-300}
PEERS=pytorch-fp32,pytorch-int8,ort-fp32,ort-o2,ort-o2-int8
made() { [ -f "$1/manifest.json" ]; }
made $W/teacher-onnx || flock -s /tmp/cpu.lock $C export runs/teachers/minilm-l6-sst2 --out $W/teacher-onnx
made $W/teacher-int8 || flock -s /tmp/cpu.lock $C quantize $W/teacher-onnx --out $W/teacher-int8 --method dynamic --preset auto
made $W/student-onnx || flock -s /tmp/cpu.lock $C export runs/demo-student --out $W/student-onnx
made $W/student-int8 || flock -s /tmp/cpu.lock $C quantize $W/student-onnx --out $W/student-int8 --method dynamic --preset auto

flock -x /tmp/cpu.lock $C bench teacher-onnx=$W/teacher-onnx teacher-int8=$W/teacher-int8 \
    --teacher runs/teachers/minilm-l6-sst2 --peers $PEERS --device cpu --threads 1,2 --sentences $SENTENCES \
    --work-dir $W/peers-minilm-l6-sst2 --out bench/results/bench-threads-minilm-l6-sst2-cpu.json
flock -x /tmp/cpu.lock $C bench student=runs/demo-student student-onnx=$W/student-onnx student-int8=$W/student-int8 \
    --teacher runs/demo-teacher --peers $PEERS --device cpu --threads 1,2 --sentences $SENTENCES \
    --work-dir $W/peers-demo-teacher --out bench/results/bench-threads-demo-chain-cpu.json
$C report bench/results/bench-threads-minilm-l6-sst2-cpu.json --out bench/results/bench-threads-minilm-l6-sst2
$C report bench/results/bench-threads-demo-chain-cpu.json --out bench/results/bench-threads-demo-chain
