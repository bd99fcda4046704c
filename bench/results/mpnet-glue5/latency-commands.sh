# run from the repository root; MPNET_BASE from ../shared/tools/get-mpnet-teacher.sh
# Each task's copies take the chain shape of the run the report scores that task from:
# pipeline7/ (the pinned stack on two H200 machines of one session) for SST-2, MRPC, STS-B and
# RTE; pipeline5/ (H200) for CoLA. All five are timed in one sitting, one after the other, so
# their ratios share the machine's state of the day.
export GLUE_DIR=${GLUE_DIR:-../shared/glue_data} COMPRESSOR_PROGRESS=0
R=bench/results/mpnet-glue5
for tr in sst2:pipeline7 mrpc:pipeline7 stsb:pipeline7 cola:pipeline5 rte:pipeline7; do
  t=${tr%%:*} run=${tr#*:}
  flock -x /tmp/cpu.lock .venv/bin/python -m bench.experiments.mpnet_glue5_latency --base ${MPNET_BASE:?} --runs $R/$run --task $t --data-dir $GLUE_DIR --work runs/mpnet-glue5-latency7 --out $R/latency-$t-cpu.json > /tmp/lat-$t.log 2>&1; echo "$t rc=$? $(date +%T)" >> /tmp/lat.done
done
