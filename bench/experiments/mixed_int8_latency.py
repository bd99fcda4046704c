"""Issue 32 item 3: what a mixed INT8 graph (some units kept FP32) costs beside all-INT8.

``auto`` once timed a mixed graph with layer 0 kept FP32 at 5.2 ms beside 2.2 ms for all-INT8
dynamic (bench/results/int8-choice/). This builds, from one FP32 export, static INT8 (QDQ,
minmax on 128 training rows, as ``auto`` builds it), dynamic INT8, mixed graphs with the first
1/2/4 encoder layers FP32 (``--fp32-layers``) and with layer 0's two FFN matrices FP32, and
for each graph records:

- its operators as written and as onnxruntime runs them (the node count per operator type in
  the per-operator profile of one thread, and milliseconds per sentence per type): whether the
  units kept FP32 stay the fused operators they were (Attention, SkipLayerNormalization,
  BiasGelu) and the INT8 ones the fused integer kernels (QAttention, DynamicQuantizeMatMul);
- its batch-1 latency on real dev sentences by the bench harness (each graph in a process of
  its own, one thread, timed in rounds; ``--repeats`` runs of the whole harness), with
  ``uptime`` and the CPU share other processes took while timing;
- what a mixed graph should cost: all-INT8 dynamic plus the kept units' share of the encoder's
  weights (their share of the matrix products' work at batch 1) times the FP32 minus INT8 gap;
- ``auto``'s own quick ranking, taken both ways ``--ranking-repeats`` times: each graph timed
  alone, one after the other (``sensitivity.latency_ms``, how ``auto`` timed until this run),
  and all timed interleaved (``sensitivity.latencies_ms``, how it times now).

    python -m bench.experiments.mixed_int8_latency --export EXPORT --task sst2 --data-dir $GLUE_DIR \\
        --work /tmp/mixed-int8 --out bench/results/mixed-int8-latency/minilm-l6-sst2-cpu.json
"""
from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import subprocess
import sys
import time


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def op_counts(path: str) -> dict:
    from compressor.export.onnx import load_graph

    graph = load_graph(path, load_external_data=False).graph
    return dict(sorted(collections.Counter(n.op_type for n in graph.node).items()))


def weight_elements(path: str, nodes) -> int:
    """Elements of the 2-D weights the named nodes of the FP32 graph multiply by."""
    from compressor.export.onnx import load_graph

    graph = load_graph(path, load_external_data=False).graph
    dims = {i.name: list(i.dims) for i in graph.initializer if len(i.dims) == 2}
    total = 0
    for node in graph.node:
        if node.name in nodes:
            total += sum(dims[i][0] * dims[i][1] for i in node.input if i in dims)
    return total


def profile(folder: str, path: str, feeds, prefix: str) -> dict:
    """onnxruntime's per-operator profile of one graph over ``feeds`` (one thread, after 5 warm-up
    runs that are profiled too and counted): per operator type as run, the nodes and ms per run."""
    from compressor.export.runtime import Predictor

    predictor = Predictor(folder, threads=1, model_file=path, profile=prefix)
    runs = 0
    for feed in feeds[:5] + list(feeds):
        predictor.run(feed)
        runs += 1
    with open(predictor.session.end_profiling()) as f:
        events = json.load(f)
    spent = collections.defaultdict(float)
    nodes = collections.defaultdict(set)
    for e in events:
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"):
            op = e["args"]["op_name"]
            spent[op] += e["dur"]
            nodes[op].add(e["name"][:-len("_kernel_time")])
    for f in glob.glob(prefix + "*.json"):
        os.remove(f)
    return {op: {"nodes": len(nodes[op]), "ms_per_run": round(spent[op] / runs / 1000, 4)}
            for op in sorted(spent, key=lambda o: -spent[o])}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--export", required=True, help="an FP32 ONNX export folder")
    parser.add_argument("--task", default="sst2")
    parser.add_argument("--data-dir", default=os.environ.get("GLUE_DIR", "embedded"))
    parser.add_argument("--preset", default="auto")
    parser.add_argument("--fp32-layers", default="1,2,4", help="mixed graphs: the first k layers FP32")
    parser.add_argument("--sentences", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=2, help="runs of the whole harness")
    parser.add_argument("--profile-sentences", type=int, default=100)
    parser.add_argument("--ranking-repeats", type=int, default=3)
    parser.add_argument("--work", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)

    import numpy as np

    from compressor.bench.harness import (BenchConfig, OtherLoad, Spec, fingerprint, isolated_latency,
                                          percentiles, sample_texts)
    from compressor.core.data import get_task, load_data
    from compressor.core.presets import resolve_preset
    from compressor.core.results import command_line, row, write_results
    from compressor.export import int8 as ox
    from compressor.export.runtime import Predictor
    from compressor.quantize import sensitivity as sens

    start = time.perf_counter()
    os.makedirs(args.work, exist_ok=True)
    task = get_task(args.task)
    dev = load_data(task, "dev", args.data_dir)
    train = load_data(task, "train", args.data_dir)
    preset = resolve_preset(args.preset)
    src = ox.onnx_file(args.export)
    layers = ox.quantizable_units(src, "layer")
    matrices = ox.quantizable_units(src, "matrix")
    encoder = [n for name, nodes in layers.items() if name.startswith("layer.") for n in nodes]
    predictor = Predictor(args.export, threads=1)

    graphs = {"fp32": src}
    kept = {}
    graphs["static-int8"] = os.path.join(args.work, "static.onnx")
    if not os.path.isfile(graphs["static-int8"]):
        feeds = ox.calibration_feeds(predictor, train.examples, 128, 42)   # auto's defaults
        ox.quantize_static_onnx(src, graphs["static-int8"], preset, feeds, "minmax", pad_id=predictor.pad_id)
    graphs["dynamic-int8"] = os.path.join(args.work, "dynamic.onnx")
    if not os.path.isfile(graphs["dynamic-int8"]):
        ox.quantize_dynamic_onnx(src, graphs["dynamic-int8"], preset)
    mixes = {"mixed-ffn0": matrices["layer.0.intermediate.dense"] + matrices["layer.0.output.dense"]}
    for k in (int(v) for v in args.fp32_layers.split(",")):
        mixes[f"mixed-{k}-layer{'s' if k > 1 else ''}"] = [n for i in range(k) for n in layers[f"layer.{i}"]]
    for name, nodes in mixes.items():
        graphs[name] = os.path.join(args.work, f"{name}.onnx")
        kept[name] = nodes
        if not os.path.isfile(graphs[name]):
            ox.quantize_dynamic_onnx(src, graphs[name], preset, nodes_to_exclude=nodes)

    texts = sample_texts(dev.examples, args.sentences, 0)
    feeds = [predictor.encode([t]) for t in texts]
    structure = {}
    for name, path in graphs.items():
        structure[name] = {"written": op_counts(path), "size_bytes": os.path.getsize(path),
                           "run": profile(args.export, path, feeds[:args.profile_sentences],
                                          os.path.join(args.work, f"profile-{name}"))}
        print(name, {op: v["nodes"] for op, v in structure[name]["run"].items()}, flush=True)

    specs = [Spec(name, path, engine="onnxruntime", tokenizer_path=args.export)
             for name, path in graphs.items()]
    runs = []
    for r in range(args.repeats):
        before = uptime()
        with OtherLoad() as load:
            times = isolated_latency(specs, texts, 1, BenchConfig(block=20, pause_s=0.1))
        runs.append({"uptime_before": before, "uptime_after": uptime(), "other_cpu_share": load.share,
                     "latency_ms": {name: percentiles(t) for name, t in times.items()}})
        print(f"harness run {r + 1}: other CPU share {load.share}; "
              + ", ".join(f"{n} {v['p50']:.2f}" for n, v in runs[-1]["latency_ms"].items()), flush=True)
    p50 = {name: float(np.median([run["latency_ms"][name]["p50"] for run in runs])) for name in graphs}

    total = weight_elements(src, encoder)
    gap = p50["fp32"] - p50["dynamic-int8"]
    expected = {}
    for name, nodes in kept.items():
        share = weight_elements(src, nodes) / total
        expected[name] = {"kept_nodes": nodes, "weight_share": round(share, 4),
                          "expected_p50_ms": round(p50["dynamic-int8"] + share * gap, 3),
                          "measured_p50_ms": round(p50[name], 3),
                          "measured_over_expected": round(p50[name] / (p50["dynamic-int8"] + share * gap), 3)}

    # auto's quick ranking, 100 sentences as auto takes them: one at a time vs interleaved
    quick = feeds[:100]
    ranking = {"alone": [], "interleaved": []}
    for _ in range(args.ranking_repeats):
        ranking["alone"].append({name: round(sens.latency_ms(args.export, path, quick, threads=1), 3)
                                 for name, path in graphs.items()})
        ranking["interleaved"].append({name: round(v, 3) for name, v in
                                       sens.latencies_ms(args.export, graphs, quick, threads=1).items()})

    rows = [row(name, task.name, task.main_metric, None, size_bytes=structure[name]["size_bytes"],
                engine="onnxruntime", device="cpu", threads=1, batch_size=1,
                latency_ms={k: float(np.median([run["latency_ms"][name][k] for run in runs]))
                            for k in ("p50", "p90", "p99", "mean")},
                extra={"fp32_nodes": kept.get(name, []), **expected.get(name, {})})
            for name in graphs]
    write_results(args.out, rows, command=command_line(["python", "-m", "bench.experiments.mixed_int8_latency"]
                                                        + (argv if argv is not None else sys.argv[1:])),
                  fingerprint_info=fingerprint(), preset=preset.to_dict(), sentences=len(texts),
                  harness_runs=runs, structure=structure, expected=expected, auto_ranking=ranking,
                  wall_time_s=round(time.perf_counter() - start, 1))
    for name, e in expected.items():
        print(f"{name}: {e['measured_p50_ms']:.2f} ms, expected {e['expected_p50_ms']:.2f} "
              f"(weight share {e['weight_share']:.3f}): x{e['measured_over_expected']}")
    for way, tries in ranking.items():
        print(way, tries)
    return 0


if __name__ == "__main__":
    sys.exit(main())
