"""Does removing heads and FFN neurons make a model faster on CPU? The MiniLM-L6 SST-2 teacher
against the same model resized to the per-layer shape that structured pruning reached.

The pruned variant is the teacher resized (``compressor.core.shapes.resize_layers``) to the heads
and FFN neurons each layer kept in a structured pruning run (``--shape-from``: a results JSON
whose pruned row has ``extra.heads_after`` and ``extra.ffn_after``; else ``--heads``/``--ffn``).
Which units are kept does not change the speed; the highest-magnitude ones are kept
(``compressor.prune.structured.magnitude_importance`` and ``select``), with no recovery
training, so its dev score is recorded as ``unrecovered`` and is not an accuracy of the
method. Both go through the toolkit's export (``export_onnx``: optimum, ORT fusions, the
fused attention nodes checked against each layer's head count) and its ORT dynamic INT8
(``quantize``, preset ``auto``). The four graphs are timed at batch 1 on real SST-2 dev
sentences with one thread, each variant in its own process, in rounds whose order rotates
(``bench.experiments.sparse_latency``'s timer); the speed-up against the teacher of the same
precision is taken pooled and paired round by round. Writes ``compressor.core.results`` JSON.

With ``--pruned CKPT`` (a checkpoint that ``compressor prune`` wrote, recovered) that model is
timed and scored instead of a resized copy, so its dev accuracy is the method's own:

    flock /tmp/compressor-cpu.lock .venv/bin/python -m bench.experiments.prune_latency \\
        --teacher runs/teachers/minilm-l6-sst2 --pruned runs/teachers/minilm-l6-sst2-pruned50 \\
        --out bench/results/prune-structured-latency-minilm.json

    flock /tmp/compressor-cpu.lock .venv/bin/python -m bench.experiments.prune_latency \\
        --teacher runs/demo-teacher --shape-from bench/results/prune-minilm-sst2-h100.json \\
        --out bench/results/prune-structured-latency.json
"""
from __future__ import annotations

import argparse
import json
import os
import time

from bench.experiments.sparse_latency import THREADS, compared, log, measure, timing_config

FALLBACK_HEADS = "7,6,5,4,5,9"            # what the H100 run (heads 0.5, ffn 0.5, 2 steps) kept
FALLBACK_FFN = "893,555,615,717,1038,790"


def ints(text: str) -> list:
    return [int(v) for v in text.split(",") if v.strip()]


def read_shape(path, row_name, heads, ffn) -> dict:
    """Heads and FFN neurons per layer: from a results file's pruned row, else the given lists."""
    if path and os.path.isfile(path):
        with open(path) as f:
            rows = [r for r in json.load(f).get("rows", [])
                    if (r.get("extra") or {}).get("heads_after") and (r.get("extra") or {}).get("ffn_after")]
        if row_name:
            rows = [r for r in rows if r["name"] == row_name]
        else:   # the final pruned model, not an intermediate step scored before recovery
            rows = [r for r in rows if "before" not in r["name"]] or rows
        if rows:
            r = rows[-1]
            return {"heads": list(r["extra"]["heads_after"]), "ffn": list(r["extra"]["ffn_after"]),
                    "from": f"{path} row {r['name']}"}
        log(f"{path} has no pruned row with heads_after and ffn_after; using --heads/--ffn")
    elif path:
        log(f"{path} is not there (yet); using --heads/--ffn")
    return {"heads": ints(heads), "ffn": ints(ffn), "from": "--heads/--ffn"}


def build_pruned(teacher: str, shape: dict, out: str) -> dict:
    """The teacher resized to ``shape``, keeping each layer's highest-magnitude heads and
    neurons, saved as a checkpoint; returns what was kept."""
    from compressor.core.loaders import read_meta
    from compressor.core.models import count_parameters, load_for_task, save_checkpoint
    from compressor.prune.structured import magnitude_importance, select
    from compressor.core.shapes import resize_layers, shape_of

    model, tokenizer = load_for_task(teacher)
    before = shape_of(model)
    if len(shape["heads"]) != before["layers"] or len(shape["ffn"]) != before["layers"]:
        raise SystemExit(f"shape {shape} does not fit a {before['layers']}-layer model")
    scores = magnitude_importance(model)
    keep = {unit: select(scores[unit], 0, "layer", 1,
                         [n0 - n for n0, n in zip(before[unit], shape[unit])])
            for unit in ("heads", "ffn")}
    resize_layers(model, heads=keep["heads"], ffn=keep["ffn"])
    after = shape_of(model)
    assert after["heads"] == shape["heads"] and after["ffn"] == shape["ffn"], after
    meta = {k: v for k, v in read_meta(teacher).items() if k not in ("kind", "shape")}
    meta.update(made_by="bench.experiments.prune_latency", source=os.path.abspath(teacher),
                pruning={"method": "resize_layers to a given shape", "kept": "highest magnitude",
                         "recovery": "none"})
    save_checkpoint(model.eval(), tokenizer, out, meta)
    return {"heads": after["heads"], "ffn": after["ffn"], "parameters": count_parameters(model),
            "heads_kept_index": keep["heads"]}


def read_pruned(pruned: str) -> dict:
    """What a checkpoint that ``compressor prune`` wrote kept, as build_pruned returns it."""
    from compressor.core.models import count_parameters, load_for_task
    from compressor.core.shapes import shape_of

    model, _ = load_for_task(pruned)
    after = shape_of(model)
    return {"heads": after["heads"], "ffn": after["ffn"], "parameters": count_parameters(model),
            "heads_kept_index": None}


def attention_nodes(folder: str) -> list:
    """(op, num_heads) of every fused attention node in the folder's model.onnx, graph order."""
    from onnx import helper

    from compressor.export.onnx import load_graph

    nodes = []
    for node in load_graph(os.path.join(folder, "model.onnx")).graph.node:
        if node.op_type in ("Attention", "QAttention", "MultiHeadAttention"):
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            nodes.append([node.op_type, int(attrs.get("num_heads", 0))])
    return nodes


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--teacher", default="runs/demo-teacher", help="the unpruned task checkpoint")
    ap.add_argument("--pruned", help="a pruned, recovered checkpoint to time and score (else the teacher "
                                     "is resized to --shape-from's shape with no recovery)")
    ap.add_argument("--name", default="pruned", help="the compressed variant's name in the results "
                                                    "(e.g. shared, for a --pruned checkpoint of sharing)")
    ap.add_argument("--shape-from", help="results JSON with the pruned row (extra.heads_after, extra.ffn_after)")
    ap.add_argument("--row", help="that row's name (default: the last pruned row not scored before recovery)")
    ap.add_argument("--heads", default=FALLBACK_HEADS, help="heads per layer when --shape-from has none")
    ap.add_argument("--ffn", default=FALLBACK_FFN, help="FFN neurons per layer when --shape-from has none")
    ap.add_argument("--out", required=True, help="results JSON to write")
    ap.add_argument("--work", default="runs/prune-latency", help="checkpoint and exports (rebuilt)")
    ap.add_argument("--data-dir", default=os.environ.get("GLUE_DIR") or "../shared/glue_data")
    ap.add_argument("--sentences", type=int, default=200, help="dev sentences timed per round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=20)
    args = ap.parse_args()

    from compressor.bench.harness import fingerprint, percentiles
    from compressor.core.data import load_split
    from compressor.export import export_onnx
    from compressor.export.onnx import score_onnx
    from compressor.core.models import count_parameters, load_for_task
    from compressor.quantize import quantize
    from compressor.quantize.configs import quantize_config
    from compressor.core.results import command_line, row, shown_path, write_results
    from compressor.core.shapes import shape_of

    start = time.perf_counter()
    if args.pruned:
        shape = {**read_pruned(args.pruned), "from": shown_path(args.pruned)}
    else:
        shape = read_shape(args.shape_from, args.row, args.heads, args.ffn)
    log(f"shape from {shape['from']}: heads {shape['heads']}, ffn {shape['ffn']}")
    dev = load_split("sst2", "dev", data_dir=args.data_dir)
    teacher_net, _ = load_for_task(args.teacher)
    teacher_shape = shape_of(teacher_net)
    params = {"teacher": count_parameters(teacher_net)}
    del teacher_net
    pruned_dir = args.pruned or os.path.join(args.work, "pruned")
    built = shape if args.pruned else build_pruned(args.teacher, shape, pruned_dir)
    recovered = bool(args.pruned)
    params["pruned"] = built["parameters"]
    log(f"pruned: {params['pruned']:,} parameters of {params['teacher']:,}")
    checkpoints = {"teacher": args.teacher, "pruned": pruned_dir}
    heads = {"teacher": teacher_shape["heads"], "pruned": built["heads"]}
    folders, fusion, scores = {}, {}, {}
    for base, checkpoint in checkpoints.items():
        fp32, int8 = os.path.join(args.work, f"{base}-fp32"), os.path.join(args.work, f"{base}-int8")
        log(f"exporting {base}")
        manifest = export_onnx(checkpoint, fp32, data_dir=args.data_dir, parity_limit=100, overwrite=True)
        log(f"quantising {base} (ORT dynamic INT8, preset auto)")
        qrecord = quantize(fp32, int8, quantize_config(method="dynamic", preset="auto"), dev_set=dev,
                           overwrite=True)
        folders[f"{base}-fp32"], folders[f"{base}-int8"] = fp32, int8
        opt = manifest["optimization"]
        nodes = {"fp32": attention_nodes(fp32), "int8": attention_nodes(int8)}
        fusion[base] = {
            "layer_heads": heads[base], "manifest_attention": opt.get("attention"),
            "fusions": opt.get("fusions"), "tool": opt.get("tool"),
            "attention_nodes_fp32": nodes["fp32"], "attention_nodes_int8": nodes["int8"],
            "ok": (len(nodes["fp32"]) == len(heads[base])
                   and [n for _, n in nodes["fp32"]] == heads[base]
                   and [n for _, n in nodes["int8"]] == heads[base]),
            "parity": {k: manifest["parity"][k] for k in ("examples", "max_abs_logit_diff",
                                                          "identical_predictions")},
            "quantization_preset": (qrecord.get("preset") or {}).get("name")}
        log(f"{base}: {len(nodes['fp32'])} fused attention nodes, num_heads "
            f"{[n for _, n in nodes['fp32']]} (layers {heads[base]}); INT8 {nodes['int8']}; "
            f"fusions {opt.get('fusions')}")
        for precision in ("fp32", "int8"):
            folder = folders[f"{base}-{precision}"]
            t = time.perf_counter()
            scores[f"{base}-{precision}"] = score_onnx(folder, dev)
            log(f"scored {base}-{precision}: {scores[f'{base}-{precision}']} ({time.perf_counter() - t:.0f} s)")
    built_s = time.perf_counter() - start
    measured = measure(folders, args)
    rows = []
    for name, folder in folders.items():
        base, precision = name.rsplit("-", 1)
        ref = f"teacher-{precision}"
        with open(os.path.join(folder, "manifest.json")) as f:
            manifest = json.load(f)
        info = {k: measured["facts"][name][k] for k in ("size_bytes", "gzip_bytes")}
        accuracy = 100 * scores[name]["accuracy"]
        teacher_accuracy = 100 * scores[ref]["accuracy"]
        figures = compared(measured, name, ref, "teacher")
        extra = {
            "precision": precision, "path": shown_path(folder),
            "heads": heads[base], "ffn": built["ffn"] if base == "pruned" else teacher_shape["ffn"],
            **info,
            **{k: figures[k] for k in ("speed_vs_teacher", "speed_vs_teacher_paired", "size_vs_teacher")},
            "parameters_vs_teacher": round(params[base] / params["teacher"], 3),
            **{k: figures[k] for k in ("round_p50_ms", "sentences")},
            "attention_nodes": fusion[base][f"attention_nodes_{precision}"],
            "quantization": manifest.get("quantization")}
        if base == "pruned" and not recovered:
            extra["unrecovered_accuracy"] = round(accuracy, 2)
            extra["score_note"] = ("unrecovered: the teacher resized to the pruned shape keeping the "
                                   "highest-magnitude units, with no recovery training; value is None "
                                   "since this is no accuracy of the method (the GPU run's recovered "
                                   "model of this shape is in --shape-from)")
        unscored = base == "pruned" and not recovered
        shown = name if base == "teacher" else f"{args.name}-{precision}"
        rows.append(row(shown, "sst2", "accuracy", None if unscored else round(accuracy, 2),
                        None if unscored else round(teacher_accuracy, 2),
                        parameters=params[base], size_bytes=info["size_bytes"], engine="onnxruntime",
                        device="cpu", threads=THREADS, batch_size=1,
                        latency_ms=percentiles(sum(measured["times"][name], [])), extra=extra))
    for r in rows:
        x = r["extra"]
        log(f"{r['name']:13s} p50 {r['latency_ms']['p50']:7.3f} ms p90 {r['latency_ms']['p90']:7.3f} ms "
            f"(x{x['speed_vs_teacher']:.2f}, paired x{x['speed_vs_teacher_paired']:.2f} vs teacher)  "
            f"{r['size_bytes'] / 1e6:6.1f} MB  {r['parameters']:,} params  "
            f"acc {r['value'] if r['value'] is not None else str(x.get('unrecovered_accuracy')) + ' (unrecovered)'}")
    write_results(args.out, rows, command=command_line(), fingerprint_info=fingerprint(), config={
        "teacher": shown_path(args.teacher), "teacher_shape": {k: teacher_shape[k] for k in ("heads", "ffn")},
        "pruned_shape": {"heads": built["heads"], "ffn": built["ffn"], "from": shape["from"],
                         "kept": ("by the pruning run" if recovered else
                                  "highest magnitude per layer (magnitude_importance, select scope layer)"),
                         "heads_kept_index": built["heads_kept_index"],
                         "recovery": "as recorded in the checkpoint" if recovered else "none"},
        "fusion": fusion,
        "scores": {k: {"accuracy": round(100 * v["accuracy"], 2),
                       "label": ("recovered" if recovered else "unrecovered") if k.startswith("pruned")
                       else "teacher"}
                   for k, v in scores.items()},
        "score_data": f"{dev.source} ({len(dev)} rows, score_onnx: Predictor, one sentence at a time)",
        "quantization": "compressor quantize: onnxruntime dynamic INT8, preset auto",
        "timing": {**timing_config(args, dev, measured),
                   "timer": "bench.experiments.sparse_latency --time (harness build + interleaved_latency)"},
        "wall_time_s": round(time.perf_counter() - start, 1), "build_time_s": round(built_s, 1)})
    log(f"wrote {args.out} in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
