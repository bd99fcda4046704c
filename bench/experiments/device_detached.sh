#!/usr/bin/env bash
# On the device machine: run a job longer than one device call (10 minutes at most) detached from
# the calls. A process started with setsid survives the end of a call while the machine stays warm
# (the next call within 30 s); a recipe stage cut by a call's time limit would start again from
# scratch. Every 20 s the results folder is packed into the call's $OUT so a cut call still
# brings back what finished.
#   start: bash bench/experiments/device_detached.sh start SECONDS RESULTS_DIR COMMAND...
#   poll:  bash bench/experiments/device_detached.sh poll SECONDS RESULTS_DIR
# e.g. start 540 ~/res env PHASE=seeds TASKS="mrpc stsb rte cola" bash bench/experiments/mpnet_glue5_chain_gpu.sh ~/glue ~/res
# The job's output goes to ~/detached.log; "JOB EXIT rc" ends it when the job is over.
# The job runs in its own copy of the checkout (DETACHED_TREE, default ~/detached-tree; what an
# earlier job made there, runs/ say, is kept): each device call copies the working tree again, and a
# job reading files while that happens failed ("No module named 'compressor.bench.report'").
set -uo pipefail
mode=$1 seconds=$2 results=$3; shift 3
: "${OUT:?OUT=the output folder of the device call}"
if [ "$mode" = start ]; then
  if pgrep -f "device_detached_job" > /dev/null; then echo "a detached job is running already"; exit 1; fi
  tree=${DETACHED_TREE:-$HOME/detached-tree}
  mkdir -p "$tree" && cp -a "$PWD/." "$tree/" || { echo "could not copy the checkout to $tree"; exit 1; }
  # the checkout's path in PYTHONPATH (export PYTHONPATH=~/site:$PWD) becomes the copy's
  export PYTHONPATH=${PYTHONPATH:+${PYTHONPATH//$PWD/$tree}}
  ( cd "$tree" && setsid nohup bash -c '"$@"; echo "JOB EXIT $?"' device_detached_job "$@" \
      > ~/detached.log 2>&1 < /dev/null & )
fi
end=$((SECONDS + seconds))
while [ $SECONDS -lt $end ]; do
  sleep $(( end - SECONDS < 20 ? end - SECONDS : 20 ))
  tar -C "$(dirname "$results")" -czf "$OUT/res.tmp" "$(basename "$results")" 2>/dev/null \
    && mv "$OUT/res.tmp" "$OUT/res.tgz"
  grep -q "^JOB EXIT" ~/detached.log 2>/dev/null && break
done
cp ~/detached.log "$OUT/" 2>/dev/null
tail -3 ~/detached.log 2>/dev/null
pgrep -f device_detached_job > /dev/null && echo "job still running: poll again within 30 s" || echo "no job running"
