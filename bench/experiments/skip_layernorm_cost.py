"""What onnxruntime's fused SkipLayerNormalization costs on the CPU, against the Add + LayerNormalization
it stands for (``compressor.export.onnx.split_skip_layernorm``, which the export now applies).

Two parts, one JSON:
- ``kernel``: one node on random tensors of width 768, fused against split, at 8, 44 and 128
  tokens and 1 and 2 threads (each session alone, 1,000 runs after 50 untimed).
- ``graphs`` (``--checkpoint TASK=FOLDER``, repeatable): a checkpoint exported twice, fused
  (``split_skip_layernorms=False``) and split, each then dynamic INT8 with this CPU's preset;
  the four graphs timed interleaved at batch 1 over the task's first ``--rows`` dev rows
  (``quantize.sensitivity.latencies_ms``: each in turn, ten rows a turn), with the largest output
  difference, the share of rows with the same label between fused and split, each graph's
  agreement with the fused FP32 graph and each one's dev score (meaningful for a trained checkpoint).

    GLUE_DIR=../shared/glue_data flock -x /tmp/cpu.lock .venv/bin/python -m \\
        bench.experiments.skip_layernorm_cost --checkpoint mrpc=runs/chain-latency-same-shape/mrpc/chain-hf \\
        --out bench/results/skip-layernorm-cpu/skip-layernorm-cpu.json
    # a trained checkpoint (MPNet-base on SST-2, bench/experiments/static_embeddings_agreement.py):
    #   --checkpoint sst2=runs/emb/mpnet-sst2 --rows 872 --out .../skip-layernorm-mpnet-sst2.json
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

WIDTH = 768


def _node_graph(kind: str, rng) -> bytes:
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(rng.standard_normal(WIDTH).astype(np.float32), name)
             for name in ("gamma", "beta", "bias")]
    io = [helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, None, WIDTH]) for name in ("x", "s", "y")]
    node = helper.make_node("SkipLayerNormalization", ["x", "s", "gamma", "beta", "bias"], ["y"],
                            domain="com.microsoft", epsilon=1e-5)
    model = helper.make_model(helper.make_graph([node], kind, io[:2], io[2:], inits), ir_version=8,
                              opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    if kind == "split":
        from compressor.export.onnx import split_skip_layernorm

        split_skip_layernorm(model)
    return model.SerializeToString()


def kernel_rows(work: str, lengths=(8, 44, 128), threads=(1, 2), runs: int = 1000) -> list:
    from compressor.export.runtime import Predictor

    rows = []
    for n_threads in threads:
        for length in lengths:
            rng = np.random.default_rng(0)
            graphs = {kind: _node_graph(kind, np.random.default_rng(1)) for kind in ("fused", "split")}
            feed = {"x": rng.standard_normal((1, length, WIDTH)).astype(np.float32),
                    "s": rng.standard_normal((1, length, WIDTH)).astype(np.float32)}
            row = {"tokens": length, "threads": n_threads}
            outs = {}
            for kind, graph in graphs.items():
                path = os.path.join(work, f"{kind}.onnx")
                with open(path, "wb") as f:
                    f.write(graph)
                # the runtime's CPU session: onnxruntime's load-time SkipLayerNormFusion off
                session = Predictor._session(path, n_threads, None)
                for _ in range(50):
                    session.run(None, feed)
                start = time.perf_counter()
                for _ in range(runs):
                    outs[kind] = session.run(None, feed)[0]
                row[f"{kind}_us"] = round((time.perf_counter() - start) / runs * 1e6, 1)
                del session
            row["fused_over_split"] = round(row["fused_us"] / row["split_us"], 2)
            row["max_abs_diff"] = float(np.abs(outs["fused"] - outs["split"]).max())
            rows.append(row)
            print(f"kernel: {length} tokens, {n_threads} thread(s): fused {row['fused_us']} us, "
                  f"split {row['split_us']} us ({row['fused_over_split']}x)")
    return rows


def graph_row(task: str, checkpoint: str, data_dir: str, rows: int, work: str) -> dict:
    from compressor.core.data import get_task, load_data
    from compressor.core.metrics import compute_metrics, task_score
    from compressor.export import int8 as ox
    from compressor.export.onnx import example_texts, export_onnx
    from compressor.export.runtime import Predictor
    from compressor.core.presets import resolve_preset
    from compressor.quantize.sensitivity import latencies_ms

    spec = get_task(task)
    dev = load_data(spec, "dev", data_dir, rows)
    preset = resolve_preset("auto")
    folders = {}
    for kind, split in (("fused", False), ("split", True)):
        out = os.path.join(work, f"{task}-{kind}")
        export_onnx(checkpoint, out, task=task, data_dir=data_dir, parity=False, overwrite=True,
                    split_skip_layernorms=split)
        ox.quantize_dynamic_onnx(ox.onnx_file(out), os.path.join(out, "int8.onnx"), preset)
        folders[kind] = out
    paths = {f"{kind}-{precision}": os.path.join(folders[kind], name)
             for kind in folders for precision, name in (("fp32", "model.onnx"), ("int8", "int8.onnx"))}
    predictor = Predictor(folders["fused"], threads=1)
    feeds = [predictor.encode([text]) for text in example_texts(dev.examples)]
    ms = latencies_ms(folders["fused"], paths, feeds, threads=1, rounds=2)
    row = {"task": task, "checkpoint": checkpoint, "dev_rows": len(feeds), "preset": preset.name,
           "p50_ms": {name: round(v, 3) for name, v in ms.items()}}
    outputs = {}
    for name, path in paths.items():
        session = Predictor(folders[name.split("-")[0]], threads=1, model_file=path).session
        outputs[name] = np.concatenate([session.run(None, f)[0] for f in feeds])
    gold = [ex.label for ex in dev.examples]
    row["dev_score"] = {name: round(task_score(spec, compute_metrics(
        spec, out[:, 0] if spec.is_regression else out.argmax(-1), gold)), 2) for name, out in outputs.items()}
    for precision in ("fp32", "int8"):
        a, b = outputs[f"fused-{precision}"], outputs[f"split-{precision}"]
        labels = None if spec.is_regression else {name: out.argmax(-1) for name, out in outputs.items()}
        row[precision] = {"fused_over_split": round(ms[f"fused-{precision}"] / ms[f"split-{precision}"], 3),
                          "max_abs_output_diff": float(np.abs(a - b).max()),
                          "same_label": None if labels is None else float(np.mean(
                              labels[f"fused-{precision}"] == labels[f"split-{precision}"])),
                          # each graph's agreement with the fused FP32 graph: INT8's own rounding
                          "agreement_with_fused_fp32": None if labels is None else {
                              kind: float(np.mean(labels[f"{kind}-{precision}"] == labels["fused-fp32"]))
                              for kind in ("fused", "split")}}
        print(f"{task} {precision}: fused {ms[f'fused-{precision}']:.2f} ms, split {ms[f'split-{precision}']:.2f} ms "
              f"({row[precision]['fused_over_split']}x), max output diff {row[precision]['max_abs_output_diff']:.2e}")
    return row


def main(argv=None) -> int:
    from compressor.core.io import write_json
    from compressor.core.results import command_line, fingerprint

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", action="append", default=[], metavar="TASK=FOLDER")
    ap.add_argument("--data-dir", default=os.environ.get("GLUE_DIR"))
    ap.add_argument("--rows", type=int, default=100)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    doc = {"command": command_line(["python", "-m", "bench.experiments.skip_layernorm_cost"]
                                   + list(argv if argv is not None else sys.argv[1:])),
           "fingerprint": fingerprint(), "graphs": []}
    with tempfile.TemporaryDirectory(prefix="skip-layernorm-") as work:
        doc["kernel"] = kernel_rows(work)
        for spec in args.checkpoint:
            task, _, folder = spec.partition("=")
            if not task or not os.path.isdir(folder):
                raise SystemExit(f"--checkpoint {spec!r}: give TASK=FOLDER")
            doc["graphs"].append(graph_row(task, folder, args.data_dir, args.rows, work))
    write_json(args.out, doc)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
