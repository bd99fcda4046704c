# run from the repository root; MPNET_BASE from ../shared/tools/get-mpnet-teacher.sh
# Each task's copies take the chain shape of the run the report scores that task from: pipeline4/
# (the pinned stack on an H200) for SST-2, MRPC, RTE and CoLA; pipeline3/ for STS-B (the same
# stack and GPU kind, one session earlier; pipeline4 has no STS-B).
export GLUE_DIR=${GLUE_DIR:-../shared/glue_data} COMPRESSOR_PROGRESS=0
for t in stsb; do
  flock -x /tmp/cpu.lock .venv/bin/python -m bench.experiments.mpnet_glue5_latency --base ${MPNET_BASE:?} --runs bench/results/mpnet-glue5/pipeline3 --task $t --data-dir $GLUE_DIR --work runs/mpnet-glue5-latency4 --out bench/results/mpnet-glue5/latency-$t-cpu.json > /tmp/lat-$t.log 2>&1; echo "$t rc=$? $(date +%T)" >> /tmp/lat.done
done
for t in ${TASKS4:-rte mrpc cola sst2}; do
  flock -x /tmp/cpu.lock .venv/bin/python -m bench.experiments.mpnet_glue5_latency --base ${MPNET_BASE:?} --runs bench/results/mpnet-glue5/pipeline4 --task $t --data-dir $GLUE_DIR --work runs/mpnet-glue5-latency4 --out bench/results/mpnet-glue5/latency-$t-cpu.json > /tmp/lat-$t.log 2>&1; echo "$t rc=$? $(date +%T)" >> /tmp/lat.done
done
