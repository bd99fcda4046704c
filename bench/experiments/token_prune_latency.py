"""Where token pruning's time goes and what it saves on CPU (issue 33): a latency and kept-token
measurement, not an accuracy one.

The model has the MPNet chain's shapes: MPNet-base's real weights (``--mpnet``, an fp32 folder),
every other layer kept (6 layers, as the chain's layer-cut student), heads and FFN halved per
layer by ``prune`` (structured, magnitude, no recovery: 6 heads, FFN 1536), a random 2-label
head. Nothing is trained (no GPU here), so no score is claimed: the keep-ratio schedules are set
in advance (``--schedule NAME=[keep after layer 1, ..., after layer 5]``), not chosen on dev, and
each is exported by the toolkit (``export``; parity against PyTorch on RTE dev rows) and made
dynamic INT8 (``quantize``). On the first ``--rows`` dev rows of each task (RTE and MRPC: long
pairs; SST-2: short sentences), at batch 1:

* the mean share of each row's tokens each layer computed on (the graph's ``kept_tokens``);
* the latency of every graph, each in a process of its own timed in rounds
  (``compressor.bench.harness.isolated_latency``, as ``compressor bench`` times variants), at
  each ``--threads``, with the machine's load average (1, 5, 15 min) before and after;
* with ``--profile``, onnxruntime's per-operator time (``SessionOptions.enable_profiling``) of the
  unpruned graph and each pruned one (1 thread), summed by operator type.

    GLUE_DIR=../shared/glue_data .venv/bin/python -m bench.experiments.token_prune_latency \\
        --mpnet /tmp/mpnet --work /tmp/tp-bench --rows 100 --threads 1 2 --profile \\
        --schedule 'every-0.7=[0.7,0.7,0.7,0.7,0.7]' --schedule 'first3-0.6=[0.6,0.6,0.6,1,1]' \\
        --schedule 'first1-0.5=[0.5,1,1,1,1]' --int8 first3-0.6 \\
        --out bench/results/token-prune/mpnet6-half-latency-cpu.json

``--extra NAME=EXPORT_FOLDER`` times an export made elsewhere beside them (an earlier version's
graph, say). ``--unfused NAME`` also exports schedule NAME with its deciding layers' attention
left unfused (``fuse_mpnet_attention(probs_output=False)``, the export before those layers fused
through the ``MultiHeadAttention`` scores output), as ``NAME-unfused`` (and its INT8 where
``--int8 NAME``), so the two are timed in the same rounds:

    GLUE_DIR=../shared/glue_data .venv/bin/python -m bench.experiments.token_prune_latency \\
        --mpnet /tmp/mpnet --work /tmp/tp-fused --rows 100 --threads 1 --profile \\
        --schedule 'every-0.7=[0.7,0.7,0.7,0.7,0.7]' --schedule 'first3-0.6=[0.6,0.6,0.6,1,1]' \\
        --unfused every-0.7 --unfused first3-0.6 --int8 first3-0.6 \\
        --out bench/results/token-prune/mpnet6-half-fused-deciders-cpu.json
"""
import argparse
import collections
import contextlib
import functools
import json
import os
import sys
import tempfile
import time

import numpy as np

TASKS = ("rte", "mrpc", "sst2")


def build_model(mpnet: str, work: str) -> str:
    """MPNet-base's every other layer, heads and FFN halved per layer: the chain's shapes."""
    import torch
    import transformers
    from torch import nn

    from compressor.core.arch import arch_of
    from compressor.core.data import get_task
    from compressor.core.models import checkpoint_meta, save_checkpoint
    from compressor.prune.stage import prune

    half = os.path.join(work, "student-half")
    if os.path.isdir(half):
        return half
    torch.manual_seed(0)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(
        mpnet, num_labels=2, attn_implementation="eager")
    tokenizer = transformers.AutoTokenizer.from_pretrained(mpnet)
    arch = arch_of(model)
    layers = arch.get_layers(model)
    arch.set_layers(model, nn.ModuleList(layers[i] for i in range(0, len(layers), 2)))
    student = os.path.join(work, "student")
    save_checkpoint(model.eval(), tokenizer, student, checkpoint_meta(get_task("rte"), 128, "token_prune_latency"))
    prune(student, half, {"method": "structured", "heads": 0.5, "ffn": 0.5, "head_importance": "magnitude",
                          "ffn_importance": "magnitude", "scope": "layer"}, train_limit=16, dev_limit=16)
    return half


@contextlib.contextmanager
def deciders_unfused():
    """Exports made inside leave the attention of layers whose probabilities are read elsewhere
    (token pruning's deciding layers) unfused, as the toolkit did before it fused them."""
    from compressor.export import mpnet_fusion

    original = mpnet_fusion.fuse_mpnet_attention
    mpnet_fusion.fuse_mpnet_attention = functools.partial(original, probs_output=False)
    try:
        yield
    finally:
        mpnet_fusion.fuse_mpnet_attention = original


def build_graphs(model: str, work: str, schedules: dict, int8: list, unfused: tuple = ()) -> dict:
    """``{name: export folder}``: the unpruned graph, one per schedule (and ``NAME-unfused`` for
    the schedules in ``unfused``), and their INT8."""
    from compressor.core.data import get_task, load_data
    from compressor.export.onnx import export_onnx, read_manifest
    from compressor.quantize.api import quantize
    from compressor.quantize.configs import OrtDynamicConfig
    from compressor.tokens.stage import token_prune

    graphs, info = {}, {}
    sources = {"unpruned": model}
    for name, keep in schedules.items():
        folder = os.path.join(work, f"tokens-{name}")
        if not os.path.isdir(folder):
            token_prune(model, folder, {"by": "ratio", "keep": keep, "learn": False, "hard_epochs": 0},
                        train_limit=8, dev_limit=8)
        sources[name] = folder
    for name in unfused:
        sources[f"{name}-unfused"] = sources[name]
    dev = load_data(get_task("rte"), "dev", os.environ.get("GLUE_DIR"), 16)
    for name, source in sources.items():
        out = os.path.join(work, f"{name}-onnx")
        if not os.path.isdir(out):
            with deciders_unfused() if name.endswith("-unfused") else contextlib.nullcontext():
                export_onnx(source, out, parity_limit=64)
        manifest = read_manifest(out)
        graphs[name] = out
        fusion = ((manifest.get("optimization") or {}).get("attention") or {}).get("mpnet_fusion") or {}
        info[name] = {"fusions": (manifest.get("optimization") or {}).get("fusions"),
                      "mpnet_fusion": {k: fusion.get(k) for k in ("fused", "softmax", "probs_output")},
                      "parity": {k: manifest["parity"][k] for k in ("rows", "max_abs_logit_diff",
                                                                    "identical_predictions")
                                 if k in manifest.get("parity", {})},
                      "nodes": _nodes(out)}
        if name == "unpruned" or name in int8 or (name.endswith("-unfused") and name[:-len("-unfused")] in int8):
            q = os.path.join(work, f"{name}-int8")
            if not os.path.isdir(q):
                quantize(out, q, OrtDynamicConfig(), dev_set=dev)
            graphs[f"{name}-int8"] = q
            info[f"{name}-int8"] = {"nodes": _nodes(q)}
    return graphs, info


def _nodes(folder: str) -> dict:
    import onnx

    graph = onnx.load(os.path.join(folder, "model.onnx"), load_external_data=False).graph
    return {"all": len(graph.node), "not_constant": sum(n.op_type != "Constant" for n in graph.node)}


def kept_shares(folder: str, texts) -> dict:
    """The mean share of each row's tokens each layer computed on (the graph's own kept_tokens)."""
    from compressor.export.runtime import Predictor

    predictor = Predictor(folder, threads=1)
    if len(predictor.session.get_outputs()) < 2:
        return None
    rows = []
    for text in texts:
        kept = predictor.session.run(None, predictor.encode([text]))[1][0].astype(np.float64)
        rows.append(kept / kept[0])
    rows = np.asarray(rows)
    return {"layers": [round(float(v), 4) for v in rows.mean(0)], "mean_share": round(float(rows.mean()), 4)}


def op_profile(folder: str, texts, threads: int = 1) -> dict:
    """onnxruntime's kernel time per operator type, ms per run (batch 1), and the wall time."""
    from compressor.export.runtime import Predictor

    predictor = Predictor(folder, threads=threads, profile=os.path.join(tempfile.mkdtemp(), "profile"))
    feeds = [predictor.encode([t]) for t in texts]
    session = predictor.session
    names = {i.name for i in session.get_inputs()}
    for feed in feeds[:5]:
        session.run(None, {k: v for k, v in feed.items() if k in names})
    start = time.perf_counter()
    for feed in feeds:
        session.run(None, {k: v for k, v in feed.items() if k in names})
    wall = (time.perf_counter() - start) * 1000 / len(feeds)
    with open(session.end_profiling()) as f:
        events = json.load(f)
    by_op, runs = collections.Counter(), 0
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            by_op[event["args"]["op_name"]] += event["dur"]
        elif event.get("cat") == "Session" and event["name"] == "model_run":
            runs += 1
    per_run = {op: round(us / runs / 1000, 3) for op, us in by_op.most_common()}
    return {"wall_ms_per_run_profiled": round(wall, 3), "kernel_ms_per_run": round(sum(per_run.values()), 3),
            "by_op_ms": per_run, "runs": runs}


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--mpnet", required=True, help="MPNet-base fp32 folder (its weights)")
    parser.add_argument("--work", default=None, help="folder for the models and graphs (kept and reused)")
    parser.add_argument("--tasks", nargs="+", default=list(TASKS))
    parser.add_argument("--rows", type=int, default=100)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--schedule", action="append", default=[], metavar="NAME=[k1,...,k5]")
    parser.add_argument("--int8", action="append", default=[], help="schedules also timed as dynamic INT8")
    parser.add_argument("--extra", action="append", default=[], metavar="NAME=EXPORT_FOLDER")
    parser.add_argument("--unfused", action="append", default=[],
                        help="schedules also exported with their deciding layers' attention unfused")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    from compressor.bench.harness import (
        BenchConfig,
        Spec,
        fingerprint,
        isolated_latency,
        percentiles,
    )
    from compressor.core.data import get_task, load_data
    from compressor.export.onnx import example_texts
    from compressor.export.runtime import Predictor

    schedules = {}
    for item in args.schedule:
        name, value = item.split("=", 1)
        schedules[name] = json.loads(value)
    work = args.work or tempfile.mkdtemp()
    os.makedirs(work, exist_ok=True)
    model = build_model(args.mpnet, work)
    graphs, info = build_graphs(model, work, schedules, args.int8, tuple(args.unfused))
    for item in args.extra:
        name, folder = item.split("=", 1)
        graphs[name] = folder
        info[name] = {"nodes": _nodes(folder), "note": "made elsewhere (--extra)"}
    config = BenchConfig()
    results = {}
    for task_name in args.tasks:
        dev = load_data(get_task(task_name), "dev", os.environ.get("GLUE_DIR"), args.rows)
        texts = example_texts(dev.examples)
        encoder = Predictor(graphs["unpruned"], threads=1)
        lengths = [int(encoder.encode([t])["input_ids"].shape[1]) for t in texts]
        entry = {"rows": len(texts), "mean_tokens": round(float(np.mean(lengths)), 2),
                 "kept_tokens": {n: kept_shares(g, texts) for n, g in graphs.items() if n != "unpruned"},
                 "latency": {}}
        if args.profile:
            entry["profile_1_thread"] = {n: op_profile(g, texts) for n, g in graphs.items()
                                         if not n.endswith("-int8")}
        for threads in args.threads:
            specs = [Spec(name=n, path=g, engine="onnxruntime") for n, g in graphs.items()]
            load_before = os.getloadavg()
            times = isolated_latency(specs, texts, threads, config)
            stats = {n: percentiles(t) for n, t in times.items()}
            for n, s in stats.items():
                base = stats["unpruned-int8" if n.endswith("-int8") else "unpruned"]
                s["speedup_mean"] = round(base["mean"] / s["mean"], 3)
                s["speedup_p50"] = round(base["p50"] / s["p50"], 3)
            entry["latency"][f"{threads}_threads"] = {
                "ms": stats, "loadavg_before": [round(v, 2) for v in load_before],
                "loadavg_after": [round(v, 2) for v in os.getloadavg()]}
            print(task_name, threads, json.dumps({n: (s["mean"], s["p50"], s["speedup_mean"], s["speedup_p50"])
                                                  for n, s in stats.items()}), flush=True)
        results[task_name] = entry
    out = {"command": "python -m bench.experiments.token_prune_latency " + " ".join(argv or sys.argv[1:]),
           "what": "latency and kept tokens only: untrained model (random head), schedules set in advance; "
                   "no accuracy is measured here",
           "model": "MPNet-base weights, layers 0,2,4,6,8,10, heads and FFN halved per layer (structured "
                    "magnitude, no recovery): hidden 768, 6 heads, FFN 1536",
           "schedules": schedules, "graphs": info, "batch": 1,
           "timing": "compressor.bench.harness.isolated_latency: a process per graph, rounds of "
                     f"{config.block} sentences, warm-up {config.warmup}, pause {config.pause_s} s",
           "fingerprint": fingerprint(), "tasks": results}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f, indent=1)
    os.replace(tmp, args.out)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
