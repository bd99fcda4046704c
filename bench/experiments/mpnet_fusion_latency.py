"""Does fusing MPNet's attention (``export/mpnet_fusion.py``: one ``MultiHeadAttention`` per layer
with the relative position bias as ``attention_bias``) make MPNet-base faster on the CPU?

MPNet-base (``--model``: a folder with microsoft/mpnet-base's weights, in fp32) gets a fresh
2-label SST-2 head (seed 0, untrained: latency depends on the shapes only, so this measures
speed, not accuracy) and is exported twice by the toolkit's ``export_onnx``: ``unfused`` as
before the fusion existed (onnxruntime's optimizer alone, which fuses no MPNet attention:
``export.onnx._fuse_mpnet`` switched off for that export) and ``fused`` (the export as it
now is). Both are quantised with ``compressor quantize`` (onnxruntime dynamic INT8, preset
auto), which checks each INT8 graph against its FP32 source. The four graphs are timed at
batch 1 on real SST-2 dev sentences with 1 and 2 intra-op threads, each variant in its own
process per round (``--time``: the harness's ``build`` and timer on one ``Predictor``), the
order rotating from round to round so drift on this shared machine hits every variant alike.
Speed of fused against unfused is also taken round by round (``speed_vs_unfused_paired``).
Writes ``compressor.core.results`` JSON.

    flock -x /tmp/cpu.lock .venv/bin/python -m bench.experiments.mpnet_fusion_latency \\
        --model /tmp/mpnet-base-fp32 --out bench/results/mpnet-fusion-latency.json
    # inputs of 128 tokens (dev sentences joined), where attention is a larger share
    flock -x /tmp/cpu.lock .venv/bin/python -m bench.experiments.mpnet_fusion_latency \\
        --model /tmp/mpnet-base-fp32 --long 120 --sentences 30 --rounds 3 \\
        --out bench/results/mpnet-fusion-latency-long.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

THREADS = (1, 2)


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def build_models(model: str, work: str, data_dir: str, dev) -> tuple:
    """{variant: export folder} for unfused/fused x fp32/int8 (reused when already in ``work``),
    and what each export and quantisation reported."""
    import torch
    import transformers

    from compressor.core.data import get_task
    from compressor.export import onnx as onnx_export
    from compressor.core.models import checkpoint_meta, save_checkpoint
    from compressor.quantize import OrtDynamicConfig, quantize

    ckpt = os.path.join(work, "ckpt")
    if not os.path.isdir(ckpt):
        tokenizer = transformers.AutoTokenizer.from_pretrained(model)
        torch.manual_seed(0)
        net = transformers.AutoModelForSequenceClassification.from_pretrained(model, num_labels=2)
        save_checkpoint(net, tokenizer, ckpt, checkpoint_meta(get_task("sst2"), 128, "mpnet-fusion-latency"))
    folders, record = {}, {}
    for variant in ("unfused", "fused"):
        fp32 = os.path.join(work, f"{variant}-fp32")
        if not os.path.isfile(os.path.join(fp32, "manifest.json")):
            saved = onnx_export._fuse_mpnet
            if variant == "unfused":
                onnx_export._fuse_mpnet = lambda *args: None
            try:
                log(f"export {variant}")
                onnx_export.export_onnx(ckpt, fp32, data_dir=data_dir, parity_limit=64, overwrite=True)
            finally:
                onnx_export._fuse_mpnet = saved
        int8 = os.path.join(work, f"{variant}-int8")
        if not os.path.isfile(os.path.join(int8, "quantize.json")):
            log(f"quantize {variant}")
            quantize(fp32, int8, OrtDynamicConfig(preset="auto"), dev_set=dev, overwrite=True)
        with open(os.path.join(fp32, "manifest.json")) as f:
            manifest = json.load(f)
        with open(os.path.join(int8, "quantize.json")) as f:
            quantized = json.load(f)
        record[variant] = {"optimization": manifest["optimization"], "parity": manifest.get("parity"),
                           "int8_parity_vs_fp32": quantized.get("parity_vs_fp32"),
                           "parameters": manifest.get("parameters")}
        folders[f"{variant}-fp32"], folders[f"{variant}-int8"] = fp32, int8
    return folders, record


def time_one(folder: str, name: str, data_dir: str, sentences: int, warmup: int, threads: int,
             long: int = 0) -> list:
    """Batch-1 seconds of one export folder on ``sentences`` dev sentences, in this process;
    ``long``: each input is dev sentences joined to at least ``long`` words (the tokenizer then
    cuts it at the export's max length, 128 tokens)."""
    from compressor.bench.harness import Spec, build, interleaved_latency, sample_texts
    from compressor.core.data import load_split

    dev = load_split("sst2", "dev", data_dir=data_dir)
    texts = sample_texts(dev.examples, sentences * (8 if long else 1), 0)
    if long:
        joined, current = [], []
        for text in texts:
            current.append(text)
            if len(" ".join(current).split()) >= long:
                joined.append(" ".join(current))
                current = []
        texts = joined[:sentences]
    runner = build(Spec(name, folder, "onnxruntime", device="cpu"), threads=threads)
    return interleaved_latency([runner], texts, warmup)[name]


def timed_rounds(folders: dict, args) -> dict:
    """(name, threads) -> [seconds of each round], a fresh process per variant and round."""
    from bench.experiments.sparse_latency import process_rounds

    jobs = {(name, t): (["--time", folders[name], "--name", name, "--threads", str(t), "--data-dir",
                         args.data_dir, "--sentences", str(args.sentences), "--warmup", str(args.warmup),
                         "--long", str(args.long)], t, f"{name:13s} {t} thread(s)")
            for t in args.thread_counts for name in folders}
    return process_rounds("bench.experiments.mpnet_fusion_latency", jobs, args.rounds)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", help="MPNet-base folder (fp32 weights)")
    ap.add_argument("--out", help="results JSON to write")
    ap.add_argument("--work", default="runs/mpnet-fusion-latency", help="checkpoint and exports (reused)")
    ap.add_argument("--data-dir", default=os.environ.get("GLUE_DIR") or "../shared/glue_data")
    ap.add_argument("--sentences", type=int, default=100, help="dev sentences timed per round")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--thread-counts", type=lambda v: [int(x) for x in v.split(",")], default=list(THREADS),
                    help="intra-op thread counts to time, comma-separated (default 1,2)")
    ap.add_argument("--long", type=int, default=0,
                    help="time inputs of dev sentences joined to at least this many words (cut at 128 tokens)")
    ap.add_argument("--build-only", action="store_true", help="export and quantise, time nothing")
    ap.add_argument("--time", help=argparse.SUPPRESS)    # child: time this export folder, print JSON
    ap.add_argument("--name", help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.time:
        print(json.dumps(time_one(args.time, args.name, args.data_dir, args.sentences, args.warmup,
                                  args.threads, args.long)))
        return
    if not args.model or not (args.out or args.build_only):
        ap.error("--model and --out are required")

    import numpy as np

    from compressor.bench.harness import fingerprint, percentiles
    from compressor.core.data import load_split
    from compressor.core.results import command_line, row, shown_path, write_results

    start = time.perf_counter()
    dev = load_split("sst2", "dev", data_dir=args.data_dir)
    folders, record = build_models(args.model, args.work, args.data_dir, dev)
    built_s = time.perf_counter() - start
    if args.build_only:
        log(json.dumps(record, indent=1))
        return
    load_before = os.getloadavg()
    times = timed_rounds(folders, args)
    load_after = os.getloadavg()
    p50 = {k: float(np.median(sum(v, []))) for k, v in times.items()}
    rows = []
    for (name, threads), rounds in times.items():
        variant, precision = name.split("-")
        ref = (f"unfused-{precision}", threads)
        paired = float(np.median([np.median(a) / np.median(b) for a, b in zip(times[ref], rounds)]))
        size = os.path.getsize(os.path.join(folders[name], "model.onnx"))
        rows.append(row(
            f"{name}-t{threads}" + (f"-long{args.long}" if args.long else ""), "sst2", "accuracy", None, None,
            parameters=record[variant]["parameters"], size_bytes=size, engine="onnxruntime", device="cpu",
            threads=threads, batch_size=1, latency_ms=percentiles(sum(rounds, [])), extra={
                "variant": variant, "precision": precision, "path": shown_path(folders[name]),
                "speed_vs_unfused": round(p50[ref] / p50[name, threads], 3),
                "speed_vs_unfused_paired": round(paired, 3),
                "round_p50_ms": [round(1000 * float(np.median(r)), 3) for r in rounds],
                "sentences": sum(len(r) for r in rounds),
                "attention": record[variant]["optimization"].get("attention"),
                "fusions": record[variant]["optimization"].get("fusions"),
                "parity": record[variant]["parity"] if precision == "fp32"
                else record[variant]["int8_parity_vs_fp32"],
                "note": "value is None: the classification head is untrained (latency depends on shape only)"}))
    for r in rows:
        x = r["extra"]
        log(f"{r['name']:18s} p50 {r['latency_ms']['p50']:7.3f} ms  x{x['speed_vs_unfused']:.3f} vs unfused "
            f"(paired x{x['speed_vs_unfused_paired']:.3f})")
    write_results(args.out, rows, command=command_line(), fingerprint_info=fingerprint(), config={
        "model": "microsoft/mpnet-base (fp32) + untrained 2-label SST-2 head, seed 0",
        "variants": {"unfused": "export_onnx with onnxruntime's optimizer alone (no MPNet attention fusion)",
                     "fused": "export_onnx as it is: export/mpnet_fusion.py, one MultiHeadAttention per layer"},
        "quantization": "compressor quantize: onnxruntime dynamic INT8, preset auto",
        "timing": {"sentences_per_round": args.sentences, "rounds": args.rounds, "warmup": args.warmup,
                   "threads": args.thread_counts, "batch_size": 1,
                   "inputs": (f"dev sentences joined to >= {args.long} words, cut at 128 tokens" if args.long
                              else "single dev sentences at their real lengths"), "process_per_variant_and_round": True,
                   "order": "rotating per round", "data": dev.source,
                   "load_average_before": [round(v, 2) for v in load_before],
                   "load_average_after": [round(v, 2) for v in load_after]},
        "wall_time_s": round(time.perf_counter() - start, 1), "build_time_s": round(built_s, 1)})
    log(f"wrote {args.out} in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
