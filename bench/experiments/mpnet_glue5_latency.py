"""Latency on this CPU of the headline's shapes (issue 14), on copies with identical shapes.

The trained MPNet-base teachers, students and chains stay on the GPU machine
(``mpnet_glue5_chain_gpu.sh``); their accuracy comes from there. Latency depends on shapes
only, so here each shape is rebuilt from the MPNet-base encoder with a fresh task head:

- ``teacher``: MPNet-base, 12 layers (one training step on 32 rows, so it is a task checkpoint);
- ``student6``: the teacher without every other layer (``prune --method layers``, 6 left, the
  students' depth);
- ``chain``: that student resized to the heads and FFN neurons each layer kept in the GPU
  run (``{task}-chain-hf-metrics.json``'s ``pruning.heads_after``/``ffn_after``), then its
  vocabulary pruned to the task's training data (``prune --method vocab``: the same function of
  the same data and tokenizer as on the GPU machine, so the same pieces).

Each goes through the toolkit's export (MPNet's attention fusion included) and dynamic INT8
(preset ``avx512_vnni``, as the GPU machine scored the chains), then ``compressor bench``
times them beside the teacher's peers (PyTorch FP32 and dynamic INT8, optimum's O2 + INT8),
at batch 1 over the task's real dev inputs, each variant in its own process, in rounds, at 1
and 2 threads. ``--no-score``: the copies' heads are untrained.

    flock -x /tmp/cpu.lock .venv/bin/python -m bench.experiments.mpnet_glue5_latency \\
        --base MPNET_BASE --runs bench/results/mpnet-glue5/pipeline --task rte \\
        --out bench/results/mpnet-glue5/latency-rte-cpu.json
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys


def sh(*args: str) -> None:
    print("+", " ".join(args), flush=True)
    subprocess.run([sys.executable, "-m", "compressor", *args], check=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", required=True, help="the MPNet-base encoder folder")
    ap.add_argument("--runs", required=True, help="folder with the GPU run's {task}-chain-hf-metrics.json")
    ap.add_argument("--task", default="rte")
    ap.add_argument("--data-dir", default=os.environ.get("GLUE_DIR", "../shared/glue_data"))
    ap.add_argument("--work", default="runs/mpnet-glue5-latency")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--sentences", type=int, default=100)
    ap.add_argument("--peers", default="pytorch-fp32,pytorch-int8,ort-o2-int8")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    task, glue, work = args.task, args.data_dir, os.path.join(args.work, args.task)
    os.makedirs(work, exist_ok=True)
    with open(os.path.join(args.runs, f"{task}-chain-hf-metrics.json")) as f:
        pruning = json.load(f)["pruning"]
    shape = {"heads": pruning["heads_after"], "ffn": pruning["ffn_after"]}
    d = lambda name: os.path.join(work, name)   # noqa: E731

    sh("finetune", args.base, "--task", task, "--data-dir", glue, "--out", d("teacher"),
       "--max-steps", "1", "--train-limit", "32", "--dev-limit", "8", "--device", "cpu", "--overwrite")
    sh("prune", d("teacher"), "--out", d("student6"), "--data-dir", glue, "--method", "layers",
       "--set", "rule=every_other", "--recover", "mode=none", "--dev-limit", "8", "--overwrite")
    from bench.experiments.prune_latency import build_pruned

    kept = build_pruned(d("student6"), shape, d("chain-hf"))
    print(f"chain shape: heads {kept['heads']}, ffn {kept['ffn']}", flush=True)
    sh("prune", d("chain-hf"), "--out", d("chain"), "--data-dir", glue, "--method", "vocab",
       "--recover", "mode=none", "--dev-limit", "8", "--overwrite")
    with open(os.path.join(d("chain"), "metrics.json")) as f:
        vocab = json.load(f)["pruning"]
    gpu_vocab = None
    chain_metrics = os.path.join(args.runs, f"{task}-chain-metrics.json")
    if os.path.exists(chain_metrics):
        with open(chain_metrics) as f:
            gpu_vocab = json.load(f)["pruning"]["pieces_after"]
        if gpu_vocab != vocab["pieces_after"]:
            raise SystemExit(f"vocabulary here {vocab['pieces_after']} pieces, on the GPU machine {gpu_vocab}")
    models = []
    for name in ("teacher", "student6", "chain"):
        sh("export", d(name), "--out", d(f"{name}-onnx"), "--data-dir", glue, "--overwrite")
        sh("quantize", d(f"{name}-onnx"), "--out", d(f"{name}-int8"), "--data-dir", glue,
           "--preset", "avx512_vnni", "--dev-limit", "8", "--overwrite")
        models.append(d(f"{name}-int8"))
    sh("bench", *models, "--teacher", d("teacher"), "--peers", args.peers, "--preset", "avx512_vnni",
       "--device", "cpu", "--threads", args.threads, "--sentences", str(args.sentences), "--batch-sizes", "none",
       "--no-score", "--no-memory", "--task", task, "--data-dir", glue, "--out", args.out,
       "--work-dir", d("peers"))
    with open(args.out) as f:
        record = json.load(f)
    record["shapes"] = {"task": task, "chain": {"heads": kept["heads"], "ffn": kept["ffn"],
                                                "vocab": vocab["pieces_after"], "vocab_on_gpu": gpu_vocab},
                        "student6": {"layers": 6}, "teacher": {"layers": 12},
                        "note": "copies of identical shapes with untrained heads: latency only"}
    record["command"] = "python -m bench.experiments.mpnet_glue5_latency " + " ".join(
        a if not os.path.isabs(a) else "PATH" for a in sys.argv[1:])
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(record, f, indent=1)
    os.replace(tmp, args.out)
    print(f"written: {args.out}")


if __name__ == "__main__":
    main()
