"""Why static INT8 of MPNet-base lost 12-53 points, and the static INT8 that keeps it (issue 32
item 3). A diagnosis and an agreement/latency measurement on this CPU, not a GLUE score.

Models: MPNet-base's real weights (``--mpnet``, all-mpnet-base-v2 fp32) with a random 2-label
head (``--layers 12``), and the chain's 6-layer shape (every other layer, heads and FFN halved by
``prune``, as ``token_prune_latency.build_model`` makes it; ``--layers 6``), exported by the
toolkit; or any export folder (``--export``: a trained MiniLM, where static INT8 already worked). Nothing is trained, so no task score is claimed: every INT8 graph is compared with its
FP32 graph on the first ``--rows`` dev rows of ``--task``, one row at a time, by

* the cosine and relative error (||x - x_fp32|| / ||x_fp32||) of each layer's output, the
  classifier's pooled vector and the logits (the layer outputs are exposed as extra graph outputs
  in a scratch copy);
* the share of rows whose argmax is FP32's (with a random head the logits are small and close,
  so this is a coarse view; the hidden states are the finer one).

Variants: dynamic INT8 (the preset's); ``static-qout`` (static QDQ as it was: ONNX Runtime also
quantises every MatMul's output); ``static`` (MatMul inputs only, the fix); ``static-sqA``
(that plus SmoothQuant with alpha A, ``--alpha``). All calibrated on ``--calibration`` training
rows drawn with seed 42 (``quantize``'s default), preset ``avx512_vnni``. Latency: batch 1,
1 thread, the same dev rows, every graph in one process timed interleaved in turns of 10 rows
(``compressor.quantize.sensitivity.latencies_ms``, as ``auto`` times its candidates), ``--rounds``.

    GLUE_DIR=../shared/glue_data .venv/bin/python -m bench.experiments.static_int8_mpnet \\
        --mpnet /tmp/mpnet --work /tmp/s3I/exp --layers 12 --task rte --rows 64 --alpha 0.8 \\
        --out bench/results/static-int8-mpnet/mpnet12-rte-cpu.json
"""
import argparse
import json
import os
import platform
import random
import sys
import time

import numpy as np


def build(mpnet: str, work: str, layers: int) -> str:
    """The export folder of the model with ``layers`` layers (12: MPNet-base; 6: the chain's shape)."""
    import torch
    import transformers

    from compressor.core.data import get_task
    from compressor.core.models import checkpoint_meta, save_checkpoint
    from compressor.export.onnx import export_onnx

    out = os.path.join(work, f"mpnet{layers}-onnx")
    if os.path.isdir(out):
        return out
    if layers == 12:
        torch.manual_seed(0)
        model = transformers.AutoModelForSequenceClassification.from_pretrained(
            mpnet, num_labels=2, attn_implementation="eager")
        ckpt = os.path.join(work, "mpnet12")
        save_checkpoint(model.eval(), transformers.AutoTokenizer.from_pretrained(mpnet), ckpt,
                        checkpoint_meta(get_task("rte"), 128, "static_int8_mpnet"))
    elif layers == 6:
        from bench.experiments.token_prune_latency import build_model

        ckpt = build_model(mpnet, work)
    else:
        raise SystemExit("--layers is 12 or 6")
    export_onnx(ckpt, out, parity_limit=16)
    return out


def quantise(folder: str, work: str, task: str, rows: int, alphas) -> dict:
    from compressor.core.data import get_task, load_data
    from compressor.core.presets import PRESETS
    from compressor.export import int8 as ox
    from compressor.export.runtime import Predictor

    preset = PRESETS["avx512_vnni"]
    src = os.path.abspath(ox.onnx_file(folder))
    predictor = Predictor(folder)
    train = load_data(get_task(task), "train", os.environ.get("GLUE_DIR"))
    feeds = ox.calibration_feeds(predictor, train.examples, rows, 42)
    tag = os.path.basename(folder)
    paths, info = {"fp32": src}, {}
    plans = {"dynamic": None, "static-qout": dict(quantize_outputs=True), "static": {},
             **{f"static-sq{alpha}": dict(smoothquant_alpha=alpha) for alpha in alphas}}
    for name, kw in plans.items():
        path = os.path.join(work, f"{tag}-{task}-{name}.onnx")
        if not os.path.isfile(path):
            begin = time.time()
            if kw is None:
                ox.quantize_dynamic_onnx(src, path, preset)
                done = {}
            else:
                done = ox.quantize_static_onnx(src, path, preset, feeds, pad_id=predictor.pad_id, **kw)
            info[name] = {"seconds": round(time.time() - begin, 1), **done}
        paths[name] = path
    return paths, info, [ex for ex in train.examples
                         if id(ex) not in {id(e) for e in random.Random(42).sample(
                             list(train.examples), min(rows, len(train.examples)))}]


def compare(folder: str, paths: dict, texts: list) -> dict:
    """Per variant: cosine and relative error of each layer's output, pooled vector and logits
    against FP32, and the argmax agreement."""
    import onnx

    from compressor.export.runtime import Predictor

    ref = onnx.load(paths["fp32"], load_external_data=False)
    watch = [n.output[0] for n in ref.graph.node if n.op_type in ("SkipLayerNormalization", "LayerNormalization")
             and ("output/LayerNorm" in n.output[0] or "embeddings" in n.output[0])]
    pooled = [n.output[0] for n in ref.graph.node if n.op_type == "Tanh"]
    watch += pooled
    predictor = Predictor(folder)
    encoded = [predictor.encode([t]) for t in texts]
    runs = {}
    for name, path in paths.items():
        model = onnx.load(path)
        have = {o.name for o in model.graph.output}
        for t in watch:
            if t not in have:
                model.graph.output.append(onnx.helper.make_tensor_value_info(t, onnx.TensorProto.FLOAT, None))
        scratch = path + ".watch.onnx"
        onnx.save(model, scratch)
        session = Predictor._session(scratch, 2, None)
        outs = [o.name for o in session.get_outputs()]
        runs[name] = [dict(zip(outs, session.run(None, feed))) for feed in encoded]
        del session
        os.remove(scratch)
    logits_name = "logits"
    result = {}
    for name in paths:
        if name == "fp32":
            continue
        per = {}
        for t in watch + [logits_name]:
            cos, rel = [], []
            for a, b in zip(runs["fp32"], runs[name]):
                x, y = a[t].ravel().astype(np.float64), b[t].ravel().astype(np.float64)
                cos.append(float(x @ y / (np.linalg.norm(x) * np.linalg.norm(y) + 1e-30)))
                rel.append(float(np.linalg.norm(x - y) / (np.linalg.norm(x) + 1e-30)))
            label = "logits" if t == logits_name else ("pooled" if t in pooled else
                                                       t.split("/")[3] if "encoder" in t else "embeddings")
            per[label] = {"cosine": round(float(np.mean(cos)), 5), "cosine_min": round(float(np.min(cos)), 5),
                          "relative_error": round(float(np.mean(rel)), 5)}
        agree = np.mean([a[logits_name].argmax() == b[logits_name].argmax()
                         for a, b in zip(runs["fp32"], runs[name])])
        result[name] = {"agreement": round(float(agree), 4), "tensors": per}
    return result


def profile(folder: str, path: str, feeds: list, work: str) -> dict:
    """Share of kernel time per operator type, and ms per row, at 1 thread (after 5 untimed rows)."""
    import collections

    from compressor.export.runtime import Predictor

    predictor = Predictor(folder, threads=1, model_file=path,
                          profile=os.path.join(work, "profile-" + os.path.basename(path)))
    for feed in feeds[:5]:
        predictor.run(feed)
    for feed in feeds:
        predictor.run(feed)
    events = json.load(open(predictor.session.end_profiling()))
    spent = collections.Counter()
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            spent[e["args"]["op_name"]] += e["dur"]
    total = sum(spent.values())
    return {"kernel_ms_per_row": round(total / 1e3 / (len(feeds) + 5), 3),
            "share": {op: round(us / total, 4) for op, us in spent.most_common(10)}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mpnet", help="all-mpnet-base-v2 folder (to build --layers 12 or 6)")
    ap.add_argument("--export", help="an export folder to compare instead (a trained MiniLM, say)")
    ap.add_argument("--work", required=True)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--task", default="rte")
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--calibration", type=int, default=128)
    ap.add_argument("--alpha", type=float, nargs="+", default=[0.8])
    ap.add_argument("--split", choices=("dev", "train"), default="dev",
                    help="compare on the first --rows dev rows, or on --rows training rows drawn with "
                         "seed 7 from those not used for calibration")
    ap.add_argument("--no-latency", action="store_true")
    ap.add_argument("--profile", action="store_true",
                    help="also onnxruntime's per-operator time of each graph (1 thread, the same rows)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)

    from compressor.core.data import get_task, load_data
    from compressor.export.onnx import example_texts
    from compressor.quantize.sensitivity import latencies_ms

    os.makedirs(args.work, exist_ok=True)
    folder = args.export or build(args.mpnet, args.work, args.layers)
    paths, info, unused = quantise(folder, args.work, args.task, args.calibration, args.alpha)
    rows = (random.Random(7).sample(unused, args.rows) if args.split == "train" else
            load_data(get_task(args.task), "dev", os.environ.get("GLUE_DIR"), args.rows).examples)
    texts = example_texts(rows)
    load_before = os.getloadavg()
    result = compare(folder, paths, texts)
    from compressor.export.runtime import Predictor

    feeds = [Predictor(folder).encode([t]) for t in texts]
    latency = {} if args.no_latency else latencies_ms(folder, paths, feeds, threads=1, rounds=args.rounds)
    for name, ms in latency.items():
        result.setdefault(name, {})["p50_ms"] = round(ms, 3)
        result[name]["x_fp32"] = round(latency["fp32"] / ms, 3)
    for name, path in paths.items():
        result.setdefault(name, {})["onnx_mb"] = round(os.path.getsize(path) / 2 ** 20, 1)
    if args.profile:
        for name, path in paths.items():
            result.setdefault(name, {})["profile"] = profile(folder, path, feeds, args.work)
    record = {"command": "python -m bench.experiments.static_int8_mpnet " + " ".join(argv or sys.argv[1:]),
              "model": {"export": args.export} if args.export else
              {"layers": args.layers, "weights": "all-mpnet-base-v2 (random 2-label head)"},
              "task": args.task, "split": args.split, "rows": len(texts), "calibration_rows": args.calibration,
              "preset": "avx512_vnni", "latency": {"batch": 1, "threads": 1, "rounds": args.rounds,
                                                   "how": "interleaved in turns of 10 rows, one process"},
              "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                          "load_before": [round(x, 2) for x in load_before],
                          "load_after": [round(x, 2) for x in os.getloadavg()]},
              "quantisation": info, "variants": result}
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(record, f, indent=1)
    os.replace(tmp, args.out)
    for name, r in result.items():
        t = r.get("tensors", {})
        print(f"{name:18s} agree {r.get('agreement', 1.0)} last-layer cos "
              f"{[v['cosine'] for k, v in t.items() if k.startswith('layer')][-1:] } pooled "
              f"{t.get('pooled', {}).get('cosine')} p50 {r.get('p50_ms')} ms x{r.get('x_fp32')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
