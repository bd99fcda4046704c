# run from the repository root; MPNET_BASE from ../shared/tools/get-mpnet-teacher.sh
# cola: the chain shape of pipeline/ (pipeline3/ rebuilt exactly that shape); the others: the
# chain shapes of pipeline3/ (its RTE chain kept other heads and neurons than pipeline/'s, with
# the same totals).
export GLUE_DIR=${GLUE_DIR:-../shared/glue_data} COMPRESSOR_PROGRESS=0
for t in cola; do
  flock -x /tmp/cpu.lock .venv/bin/python -m bench.experiments.mpnet_glue5_latency --base ${MPNET_BASE:?} --runs bench/results/mpnet-glue5/pipeline --task $t --data-dir $GLUE_DIR --out bench/results/mpnet-glue5/latency-$t-cpu.json > /tmp/lat-$t.log 2>&1; echo "$t rc=$?" >> /tmp/lat.done
done
for t in mrpc stsb sst2 rte; do
  flock -x /tmp/cpu.lock .venv/bin/python -m bench.experiments.mpnet_glue5_latency --base ${MPNET_BASE:?} --runs bench/results/mpnet-glue5/pipeline3 --task $t --data-dir $GLUE_DIR --out bench/results/mpnet-glue5/latency-$t-cpu.json > /tmp/lat-$t.log 2>&1; echo "$t rc=$?" >> /tmp/lat.done
done
