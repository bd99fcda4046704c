"""Does unstructured sparsity make a model faster or smaller? MiniLM-L6, dense and 90% pruned,
through ONNX Runtime in FP32 and dynamic INT8.

MiniLM-L6 (the ``minilm-l6`` alias) gets a 2-label SST-2 head (seed 0, untrained: this
measures speed and size, not accuracy) and is saved as is (``dense``) and after one-shot
global magnitude pruning of 90% of its encoder's linear weights with no recovery
(``sparse90``, ``compressor.prune.magnitude``). Both go through the toolkit's export
(``export_onnx``: optimum, ORT fusions) and its ORT dynamic INT8 (``quantize``, preset
``auto``). The four graphs are timed at batch 1 on real SST-2 dev sentences with one
thread, each variant in its own process (``--time``: the harness's ``build`` and timer on
one ``Predictor``), in rounds whose variant order rotates, so drift on this shared machine
hits every variant alike; a variant's latency pools all its rounds, and its speed against
the dense graph of its precision is also taken round by round (``speed_vs_dense_paired``). Each ``model.onnx``
is also weighed on disk and gzip-compressed. Writes ``compressor.core.results`` JSON.

    flock /tmp/compressor-cpu.lock .venv/bin/python -m bench.experiments.sparse_latency \\
        --out bench/results/prune-magnitude-latency.json
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import time

SPARSITY = 0.9
THREADS = 1


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def build_models(work: str, data_dir: str, dev) -> dict:
    """name -> export folder of the four variants (reused where already built), and the
    pruning record."""
    import torch

    from compressor.core.data import get_task, load_split
    from compressor.export import export_onnx
    from compressor.core.models import checkpoint_meta, load_for_task, save_checkpoint
    from compressor.prune.configs import MagnitudePruneConfig, RecoverSettings, pruner_for
    from compressor.engine.job import RecoveryJob
    from compressor.quantize import quantize
    from compressor.quantize.configs import quantize_config
    from compressor.engine.train import set_seed

    task = get_task("sst2")
    checkpoints = {"dense": os.path.join(work, "dense"), "sparse90": os.path.join(work, "sparse90")}
    prune_file = os.path.join(work, "prune.json")
    if not all(os.path.isdir(p) for p in checkpoints.values()) or not os.path.isfile(prune_file):
        set_seed(0)   # the new classifier head
        net, tokenizer = load_for_task("minilm-l6", task)
        meta = checkpoint_meta(task, 128, "bench.experiments.sparse_latency")
        save_checkpoint(net, tokenizer, checkpoints["dense"], meta)
        config = MagnitudePruneConfig(sparsity=SPARSITY, scope="global", schedule="oneshot",
                                      recover=RecoverSettings(mode="none"), device="cpu")
        config.check()
        train = load_split(task, "train", data_dir=data_dir, limit=32)   # unused: no recovery
        job = RecoveryJob(net, tokenizer, train, dev, config, torch.device("cpu"))
        start = time.perf_counter()
        record = pruner_for(config)(job, config)
        record["prune_time_s"] = round(time.perf_counter() - start, 2)
        log(f"pruned: {record['sparsity']:.4f} of {record['chosen_weights']:,} encoder weights, "
            f"{record['model_zero_share']:.4f} of the model")
        save_checkpoint(job.model, tokenizer, checkpoints["sparse90"], {**meta, "pruning": {
            k: record[k] for k in ("method", "scope", "schedule", "target_sparsity", "sparsity")}})
        with open(prune_file, "w") as f:
            json.dump(record, f, indent=1)
    with open(prune_file) as f:
        record = json.load(f)
    folders = {}
    for base, checkpoint in checkpoints.items():
        fp32, int8 = os.path.join(work, f"{base}-fp32"), os.path.join(work, f"{base}-int8")
        if not os.path.isfile(os.path.join(fp32, "manifest.json")):
            log(f"exporting {base}")
            export_onnx(checkpoint, fp32, data_dir=data_dir, parity_limit=100, overwrite=True)
        if not os.path.isfile(os.path.join(int8, "quantize.json")):
            log(f"quantising {base} (ORT dynamic INT8)")
            quantize(fp32, int8, quantize_config(method="dynamic", preset="auto"), dev_set=dev,
                     overwrite=True)
        folders[f"{base}-fp32"], folders[f"{base}-int8"] = fp32, int8
    return folders, record


def time_one(folder: str, name: str, data_dir: str, sentences: int, warmup: int, seed: int) -> list:
    """Batch-1 seconds of one export folder on ``sentences`` dev sentences, in this process."""
    from compressor.bench.harness import Spec, build, interleaved_latency, sample_texts
    from compressor.core.data import load_split

    dev = load_split("sst2", "dev", data_dir=data_dir)
    texts = sample_texts(dev.examples, sentences, seed)
    runner = build(Spec(name, folder, "onnxruntime", device="cpu"), threads=THREADS)
    return interleaved_latency([runner], texts, warmup)[name]


def process_rounds(module: str, jobs: dict, rounds: int) -> dict:
    """key -> [seconds of each round]: ``jobs`` maps a key to ``(arguments, threads, label)``;
    each job runs ``python -m module ARGUMENTS`` (which prints its seconds as JSON last) in a
    fresh process per round with ``OMP_NUM_THREADS=threads``, the order rotating from round to
    round."""
    keys = list(jobs)
    times = {k: [] for k in keys}
    for r in range(rounds):
        for key in keys[r % len(keys):] + keys[:r % len(keys)]:
            arguments, threads, label = jobs[key]
            out = subprocess.run([sys.executable, "-m", module, *arguments], capture_output=True, text=True,
                                 check=True, env={**os.environ, "OMP_NUM_THREADS": str(threads)})
            seconds = json.loads(out.stdout.strip().splitlines()[-1])
            times[key].append(seconds)
            log(f"round {r + 1}/{rounds} {label} p50 {1000 * sorted(seconds)[len(seconds) // 2]:.3f} ms")
    return times


def timed_rounds(folders: dict, data_dir: str, sentences: int, rounds: int, warmup: int) -> dict:
    """name -> [seconds of each round]: every variant in a fresh process per round, the
    order rotating from round to round."""
    jobs = {name: (["--time", folder, "--name", name, "--data-dir", data_dir, "--sentences", str(sentences),
                    "--warmup", str(warmup)], THREADS, f"{name:15s}") for name, folder in folders.items()}
    return process_rounds("bench.experiments.sparse_latency", jobs, rounds)


def measure(folders: dict, args) -> dict:
    """Every variant's graph facts and timed rounds (``timed_rounds``), its pooled p50, and the
    load average before and after the timing."""
    import numpy as np

    facts = {name: graph_facts(folder) for name, folder in folders.items()}
    load_before = os.getloadavg()
    times = timed_rounds(folders, args.data_dir, args.sentences, args.rounds, args.warmup)
    load_after = os.getloadavg()
    return {"facts": facts, "times": times, "load": (load_before, load_after),
            "p50": {name: float(np.median(sum(rounds, []))) for name, rounds in times.items()}}


def compared(measured: dict, name: str, ref: str, label: str) -> dict:
    """``name``'s timing figures and its speed and size against ``ref`` (keys ``*_vs_<label>``)."""
    import numpy as np

    times, p50, facts = measured["times"], measured["p50"], measured["facts"]
    return {
        f"speed_vs_{label}": round(p50[ref] / p50[name], 3),
        # the same, paired within each round (drift between rounds cancels): the median
        f"speed_vs_{label}_paired": round(float(np.median(
            [np.median(a) / np.median(b) for a, b in zip(times[ref], times[name])])), 3),
        f"size_vs_{label}": round(facts[name]["size_bytes"] / facts[ref]["size_bytes"], 3),
        "round_p50_ms": [round(1000 * float(np.median(r)), 3) for r in times[name]],
        "sentences": sum(len(r) for r in times[name])}


def timing_config(args, dev, measured: dict) -> dict:
    """How the variants were timed, for a results file's config."""
    before, after = measured["load"]
    return {"sentences_per_round": args.sentences, "rounds": args.rounds, "warmup": args.warmup,
            "threads": THREADS, "batch_size": 1, "process_per_variant_and_round": True,
            "order": "rotating per round", "data": dev.source,
            "load_average_before": [round(v, 2) for v in before],
            "load_average_after": [round(v, 2) for v in after]}


def graph_facts(folder: str) -> dict:
    """Bytes of model.onnx as written and gzip-compressed, and the share of exact zeros among
    the graph's weight matrices (initializers of two or more dimensions)."""
    import numpy as np
    from onnx import numpy_helper

    from compressor.export.onnx import load_graph

    path = os.path.join(folder, "model.onnx")
    with open(path, "rb") as f:
        data = f.read()
    start = time.perf_counter()
    packed = len(gzip.compress(data, compresslevel=6))
    zeros = total = 0
    for init in load_graph(path).graph.initializer:
        if len(init.dims) >= 2:
            values = numpy_helper.to_array(init)
            zeros += int(np.count_nonzero(values == 0))
            total += values.size
    return {"size_bytes": len(data), "gzip_bytes": packed, "gzip_ratio": round(len(data) / packed, 3),
            "gzip_level": 6, "gzip_time_s": round(time.perf_counter() - start, 2),
            "matrix_zero_share": round(zeros / total, 4) if total else None}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="results JSON to write")
    ap.add_argument("--work", default="runs/sparse-latency", help="checkpoints and exports (reused)")
    ap.add_argument("--data-dir", default=os.environ.get("GLUE_DIR") or "../shared/glue_data")
    ap.add_argument("--sentences", type=int, default=200, help="dev sentences timed per round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--time", help=argparse.SUPPRESS)    # child: time this export folder, print JSON
    ap.add_argument("--name", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.time:
        print(json.dumps(time_one(args.time, args.name, args.data_dir, args.sentences, args.warmup, 0)))
        return
    if not args.out:
        ap.error("--out is required")

    from compressor.bench.harness import fingerprint, percentiles
    from compressor.core.data import load_split
    from compressor.core.results import command_line, row, shown_path, write_results

    start = time.perf_counter()
    dev = load_split("sst2", "dev", data_dir=args.data_dir)
    folders, pruning = build_models(args.work, args.data_dir, dev)
    built_s = time.perf_counter() - start
    measured = measure(folders, args)
    rows = []
    for name, folder in folders.items():
        base, precision = name.rsplit("-", 1)
        dense = f"dense-{precision}"
        with open(os.path.join(folder, "manifest.json")) as f:
            manifest = json.load(f)
        info, facts = measured["facts"][name], measured["facts"]
        figures = compared(measured, name, dense, "dense")
        rows.append(row(
            name, "sst2", "accuracy", None, None, parameters=pruning["parameters"],
            size_bytes=info["size_bytes"], engine="onnxruntime", device="cpu", threads=THREADS,
            batch_size=1, latency_ms=percentiles(sum(measured["times"][name], [])), extra={
                "precision": precision, "path": shown_path(folder),
                "encoder_sparsity": pruning["sparsity"] if base == "sparse90" else 0.0,
                "model_zero_share": pruning["model_zero_share"] if base == "sparse90" else None,
                **info,
                **{k: figures[k] for k in ("speed_vs_dense", "speed_vs_dense_paired", "size_vs_dense")},
                "gzip_vs_dense": round(info["gzip_bytes"] / facts[dense]["gzip_bytes"], 3),
                **{k: figures[k] for k in ("round_p50_ms", "sentences")},
                "quantization": manifest.get("quantization"),
                "note": "value is None: the classification head is untrained (speed and size only)"}))
    for r in rows:
        x = r["extra"]
        log(f"{r['name']:15s} p50 {r['latency_ms']['p50']:7.3f} ms (x{x['speed_vs_dense']:.2f} vs dense)  "
            f"{r['size_bytes'] / 1e6:6.1f} MB, gzip {x['gzip_bytes'] / 1e6:6.1f} MB "
            f"(x{x['gzip_vs_dense']:.2f} of dense), zeros {x['matrix_zero_share']}")
    write_results(args.out, rows, command=command_line(), fingerprint_info=fingerprint(), config={
        "model": "minilm-l6 (all-MiniLM-L6-v2) + untrained 2-label head, seed 0",
        "pruning": {k: pruning[k] for k in ("method", "scope", "schedule", "target_sparsity", "sparsity",
                                              "chosen_weights", "pruned_weights", "model_zero_share")},
        "quantization": "compressor quantize: onnxruntime dynamic INT8, preset auto",
        "timing": timing_config(args, dev, measured),
        "wall_time_s": round(time.perf_counter() - start, 1), "build_time_s": round(built_s, 1)})
    log(f"wrote {args.out} in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
