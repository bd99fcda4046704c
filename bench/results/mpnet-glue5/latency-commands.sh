# run from the repository root; MPNET_BASE from ../shared/tools/get-mpnet-teacher.sh
# Each task's copies take the chain shape of the run the report scores that task from:
# pipeline5/ (the pinned stack on an H200) for MRPC, STS-B and CoLA; pipeline6/ (an H100) for
# SST-2; pipeline4/ (H200) for RTE. All five are timed in one sitting, one after the other, so
# their ratios share the machine's state of the day.
export GLUE_DIR=${GLUE_DIR:-../shared/glue_data} COMPRESSOR_PROGRESS=0
R=bench/results/mpnet-glue5
for tr in sst2:pipeline6 mrpc:pipeline5 stsb:pipeline5 cola:pipeline5 rte:pipeline4; do
  t=${tr%%:*} run=${tr#*:}
  flock -x /tmp/cpu.lock .venv/bin/python -m bench.experiments.mpnet_glue5_latency --base ${MPNET_BASE:?} --runs $R/$run --task $t --data-dir $GLUE_DIR --work runs/mpnet-glue5-latency5 --out $R/latency-$t-cpu.json > /tmp/lat-$t.log 2>&1; echo "$t rc=$? $(date +%T)" >> /tmp/lat.done
done
