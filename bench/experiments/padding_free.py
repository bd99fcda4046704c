"""Padding-free batches: batch-32 throughput padded vs sorted/bucketed over each GLUE-5 dev set.

A batch of rows as they come is padded to its longest row, and the padding is computed and
thrown away; grouping rows of like token count first (``export.runtime.batch_groups``:
``sorted`` over the whole set, ``bucketed`` within windows of 8 batches) leaves almost none.
This times the three ways on every row of each GLUE-5 task's dev set (SST-2, CoLA single
sentences; MRPC, RTE, STS-B as pairs), 32 rows a batch, for an FP32 ONNX export and its
dynamic INT8 graph. ``padded`` is today's benchmark batch: the dev rows shuffled (seed 0, as
``compressor bench`` takes them), 32 consecutive rows padded to their longest.

MPNet-base (``--model``: a folder with its weights, e.g. a sentence-transformers MPNetModel)
gets an untrained 2-label head (seed 0: throughput and agreement only; every task uses that
one graph, pairs fed as pairs) and goes through the toolkit's export (``export_onnx``) and
ORT dynamic INT8 (``quantize``, preset auto). Each graph runs in its own process
(``compressor.bench.worker``, 2 threads); per task, every batch index is a round in which
each graph x way runs its batch in turn (the order rotating), after a pause and an untimed
batch-1 wake-up run, so drift and a neighbour's load hit every way alike. The logits of the
timed runs are kept and put back in input order: identical predictions means the same argmax
on every row as the padded batches; the first ``--reference`` rows are also run one at a time
(how the toolkit scores a graph) to show which way stays closer to that.

    flock -x /tmp/cpu.lock .venv/bin/python -m bench.experiments.padding_free --model /tmp/mpnet \\
        --work runs/padding-free-mpnet --limit 256 --ways padded,sorted \\
        --out bench/results/padding-free-mpnet-base-cpu.json

(``--limit 256``: the first 256 rows of each dev file, not a sample (STS-B's are its short
captions); on this loaded 2-core CPU they took 44 minutes; every dev row would take hours.
MiniLM-L6: ``--model minilm-l6``, every row.)
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

TASKS = ("sst2", "mrpc", "rte", "cola", "stsb")
THREADS = 2
BATCH = 32


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def build_models(model: str, work: str, data_dir: str) -> tuple:
    """{"fp32": export folder, "int8": quantized folder} (reused when already in ``work``) and
    what the export and quantisation reported."""
    from compressor.core.data import get_task, load_split
    from compressor.core.models import checkpoint_meta, save_checkpoint
    from compressor.export.onnx import export_onnx
    from compressor.quantize import OrtDynamicConfig, quantize

    ckpt, fp32, int8 = (os.path.join(work, n) for n in ("ckpt", "fp32", "int8"))
    if not os.path.isdir(ckpt):
        import torch
        import transformers

        from compressor.core.models import resolve_model

        model = resolve_model(model)   # an alias (minilm-l6) or a folder
        tokenizer = transformers.AutoTokenizer.from_pretrained(model)
        torch.manual_seed(0)   # the new, untrained head
        net = transformers.AutoModelForSequenceClassification.from_pretrained(model, num_labels=2)
        save_checkpoint(net, tokenizer, ckpt, checkpoint_meta(get_task("sst2"), 128, "padding-free"))
    if not os.path.isfile(os.path.join(fp32, "manifest.json")):
        log("export")
        export_onnx(ckpt, fp32, data_dir=data_dir, parity_limit=64, overwrite=True)
    if not os.path.isfile(os.path.join(int8, "quantize.json")):
        log("quantize")
        dev = load_split("sst2", "dev", data_dir=data_dir, limit=64)   # its score is not used here
        quantize(fp32, int8, OrtDynamicConfig(preset="auto"), dev_set=dev, overwrite=True)
    with open(os.path.join(fp32, "manifest.json")) as f:
        manifest = json.load(f)
    return {"fp32": fp32, "int8": int8}, {"optimization": manifest.get("optimization"),
                                            "parity": manifest.get("parity"),
                                            "parameters": manifest.get("parameters"),
                                            "max_length": manifest.get("max_length")}


def token_counts(folder: str, texts: list) -> list:
    """Each text's token count as the ``Predictor`` tokenises it (truncated at the export's max length)."""
    from tokenizers import Tokenizer

    with open(os.path.join(folder, "manifest.json")) as f:
        max_length = int(json.load(f).get("max_length", 128))
    tok = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(max_length)
    return [len(e.ids) for e in tok.encode_batch([t if isinstance(t, str) else tuple(t) for t in texts])]


def time_task(workers, task: str, texts: list, ways: list, pause_s: float, reference: int) -> dict:
    """Seconds and logits (input order) of every worker x way over all ``texts`` in batches of
    ``BATCH``, timed in rounds; and each worker's batch-1 logits of the first ``reference`` rows."""
    import numpy as np

    from compressor.bench.harness import OtherLoad

    jt = [t if isinstance(t, str) else list(t) for t in texts]
    rows, padding = {}, {}
    for w in workers:
        w.call("feeds", key="wake", texts=jt[:1], batch_size=1)
        for way in ways:
            fed = w.call("feeds", key=f"{task}-{way}", texts=jt, batch_size=BATCH, batching=way)
            rows[way] = fed["rows"]
            padding[way] = round(1 - fed["tokens"] / fed["padded_tokens"], 4)
            w.call("warm", key=f"{task}-{way}", indices=[0, len(fed["rows"]) - 1])
    pairs = [(w, way) for w in workers for way in ways]
    spent = {(w.name, way): 0.0 for w, way in pairs}
    logits = {(w.name, way): None for w, way in pairs}
    batches = len(rows[ways[0]])
    with OtherLoad([w.proc.pid for w in workers]) as load:
        for i in range(batches):
            for k in range(len(pairs)):
                w, way = pairs[(i + k) % len(pairs)]
                time.sleep(pause_s)
                got = w.call("time", key=f"{task}-{way}", indices=[i], wake=["wake", 0], outputs=True)
                spent[(w.name, way)] += got["times"][0]
                out = np.asarray(got["outputs"][0], dtype=np.float32)
                if logits[(w.name, way)] is None:
                    logits[(w.name, way)] = np.zeros((len(texts), out.shape[-1]), np.float32)
                logits[(w.name, way)][rows[way][i]] = out
    ref = {}
    for w in workers:
        if reference:
            ref[w.name] = np.asarray(w.call("logits", texts=jt[:reference], batch_size=1)["logits"], np.float32)
    return {"spent": spent, "logits": logits, "reference": ref, "padding": padding,
            "batches": batches, "other_cpu_share": load.share}


def compare(a, b) -> dict:
    """Same argmax on every row?  How many rows differ, and the largest logit difference."""
    import numpy as np

    differ = int(np.count_nonzero(a.argmax(-1) != b.argmax(-1)))
    return {"identical_predictions": differ == 0, "rows_predicted_differently": differ,
            "max_abs_logit_diff": float(np.abs(a - b).max())}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="results JSON to write")
    ap.add_argument("--model", default="/tmp/mpnet", help="an encoder folder (MPNet-base) or a toolkit alias")
    ap.add_argument("--work", default=None, help="checkpoint and exports, reused [runs/padding-free-<model name>]")
    ap.add_argument("--data-dir", default=os.environ.get("GLUE_DIR") or "../shared/glue_data")
    ap.add_argument("--tasks", default=",".join(TASKS))
    ap.add_argument("--ways", default="padded,sorted,bucketed", help="batchings timed; padded first")
    ap.add_argument("--graphs", default="fp32,int8")
    ap.add_argument("--limit", type=int, default=None, help="dev rows per task (default: all)")
    ap.add_argument("--pause", type=float, default=0.05, help="seconds before each timed batch")
    ap.add_argument("--reference", type=int, default=64, help="rows per task also run at batch 1")
    args = ap.parse_args()

    from compressor.bench.harness import Spec, fingerprint, sample_texts
    from compressor.bench.worker import Workers
    from compressor.core.data import load_split
    from compressor.core.results import command_line, row, shown_path, write_results

    start = time.perf_counter()
    ways = [w.strip() for w in args.ways.split(",") if w.strip()]
    assert ways[0] == "padded", "padded is the baseline: name it first"
    work = args.work or os.path.join("runs", "padding-free-" + os.path.basename(os.path.normpath(args.model)))
    folders, built = build_models(args.model, work, args.data_dir)
    folders = {g: folders[g] for g in args.graphs.split(",")}
    built_s = time.perf_counter() - start
    load_before = os.getloadavg()
    specs = [Spec(g, folder, "onnxruntime", device="cpu") for g, folder in folders.items()]
    out_rows, summary = [], {g: {} for g in folders}
    with Workers(specs, THREADS) as workers:
        for task in args.tasks.split(","):
            dev = load_split(task, "dev", data_dir=args.data_dir, limit=args.limit)
            # the rows in the order the benchmark's throughput batches take them (shuffled, seed 0)
            texts = sample_texts(dev.examples, len(dev.examples), 0)
            counts = token_counts(folders[specs[0].name], texts)
            t0 = time.perf_counter()
            got = time_task(workers, task, texts, ways, args.pause, min(args.reference, len(texts)))
            log(f"{task}: {len(texts)} rows, mean {sum(counts) / len(counts):.1f} tokens, "
                f"timed in {time.perf_counter() - t0:.0f} s (other CPU share {got['other_cpu_share']})")
            for g in folders:
                base = got["logits"][(g, "padded")]
                padded_rate = len(texts) / got["spent"][(g, "padded")]
                for way in ways:
                    rate = len(texts) / got["spent"][(g, way)]
                    logits = got["logits"][(g, way)]
                    extra = {"graph": g, "batching": way, "path": shown_path(folders[g]),
                             "rows": len(texts), "batches": got["batches"], "pairs": len(dev.examples[0].texts) == 2,
                             "mean_tokens": round(sum(counts) / len(counts), 1), "max_tokens": max(counts),
                             "padding_share": got["padding"][way],
                             "speedup_vs_padded": round(rate / padded_rate, 3),
                             "vs_padded": compare(logits, base),
                             "other_cpu_share": got["other_cpu_share"]}
                    ref = got["reference"].get(g)
                    if ref is not None:
                        extra["vs_batch1_first_rows"] = {"rows": len(ref), **compare(logits[:len(ref)], ref)}
                    out_rows.append(row(f"{g}-{way}", task, "throughput", None, None, engine="onnxruntime",
                                        device="cpu", threads=THREADS, batch_size=BATCH,
                                        throughput=round(rate, 2), extra=extra))
                    summary[g].setdefault(way, []).append(rate / padded_rate)
                    log(f"  {g:5s} {way:9s} {rate:7.2f} rows/s  x{rate / padded_rate:.3f}  "
                        f"padding {100 * got['padding'][way]:.1f}%  "
                        f"identical {extra['vs_padded']['identical_predictions']} "
                        f"(max diff {extra['vs_padded']['max_abs_logit_diff']:.2e})")
    glue5 = {g: {way: round(sum(v) / len(v), 3) for way, v in by.items()} for g, by in summary.items()}
    log(f"GLUE-5 mean speed-up vs padded: {glue5}")
    write_results(args.out, out_rows, command=command_line(), fingerprint_info=fingerprint(), config={
        "model": f"{args.model} + untrained 2-label head, seed 0 (one graph for every task; pairs as pairs)",
        "export": built, "quantization": "compressor quantize: onnxruntime dynamic INT8, preset auto",
        "batch_size": BATCH, "threads": THREADS, "ways": ways, "bucket_window_batches": 8,
        "glue5_mean_speedup_vs_padded": glue5,
        "timing": {"process_per_graph": True, "order": "rounds: every graph x way runs batch i in turn, "
                   "the order rotating per batch", "pause_s": args.pause, "wake_runs_per_turn": 1,
                   "rows": "every dev row" if args.limit is None else f"first {args.limit} dev rows",
                   "load_average_before": [round(v, 2) for v in load_before],
                   "load_average_after": [round(v, 2) for v in os.getloadavg()]},
        "wall_time_s": round(time.perf_counter() - start, 1), "build_time_s": round(built_s, 1)})
    log(f"wrote {args.out} in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
