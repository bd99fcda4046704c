"""Where an early-exit chain's time goes: each segment of an INT8 chain timed alone (in one
process, every segment run for every row, twice over 200 CoLA dev rows), beside the same teacher's
INT8 graph without exits. A profile, not a benchmark (`compressor bench` times variants).

    GLUE_DIR=../shared/glue_data flock -x /tmp/cpu.lock .venv/bin/python \
        bench/experiments/early_exit_segment_profile.py [CHAIN_FOLDER INT8_FOLDER]
(defaults: what bench/experiments/mpnet_early_exit_cpu.sh made)
"""
import os
import sys
import time

import numpy as np

from compressor.exit.runtime import SegmentChain
from compressor.export.runtime import Predictor
from compressor.core.data import get_task, load_data
from compressor.export.onnx import example_texts
chain_dir, int8_dir = (sys.argv[1:3] if len(sys.argv) > 2 else
                       ("runs/mpnet-cpu/ee-cola/02-early_exit_export", "runs/mpnet-cpu/cola-holdout-int8"))
dev = load_data(get_task("cola"), "dev", os.environ["GLUE_DIR"], 200)
texts = example_texts(dev.examples)
c = SegmentChain(chain_dir, threads=1)
p = Predictor(int8_dir, threads=1)
per = np.zeros((len(texts), len(c.segments))); plain = []
for rep in range(2):
    for i, t in enumerate(texts):
        f = c.encode([t]); mask = f["attention_mask"]; h = None
        for k in range(len(c.segments)):
            s = time.perf_counter(); h, _ = c._segment(k, h, mask, f); per[i, k] = time.perf_counter() - s
        g = p.encode([t]); s = time.perf_counter(); p.run(g); plain.append(time.perf_counter() - s)
print("segment mean ms:", np.round(1000 * per.mean(0), 2), "sum", round(1000 * per.mean(0).sum(), 2))
print("plain int8 mean ms", round(1000 * np.mean(plain[len(texts):]), 2))
