"""Idle threads that spin: what they cost a variant timed beside another, and what switching
spinning off costs a variant on its own (issue 15), at 1 and 2 threads.

The variants are the teacher (``--teacher``, a checkpoint) in PyTorch FP32, its fused ONNX
export and that export's dynamic INT8 (``compressor export``, ``compressor quantize``
dynamic, preset ``auto``; made under ``--work`` and reused).

1. ``spinning``: each variant with the libraries' defaults (onnxruntime's pool threads spin
   while idle, ``OMP_WAIT_POLICY`` unset) and with spinning off (onnxruntime
   ``session.intra_op.allow_spinning`` 0, ``OMP_WAIT_POLICY=PASSIVE`` for PyTorch), each in a
   process of its own (``compressor.bench.worker``); the two settings take turns block by
   block with a pause between (``compressor.bench.harness.rounds_latency``), so each runs as
   it would alone (the test suite checks that this timing matches a lone variant's within 15%).
2. ``interference``: the ONNX INT8 graph timed alone and interleaved sentence by sentence
   with the PyTorch teacher in one process (the harness before issue 15), and the same pair
   in processes of their own, in rounds (the harness after).

Writes ``compressor.core.results`` JSON: one row per variant, setting and thread count.

    flock -x /tmp/cpu.lock .venv/bin/python -m bench.experiments.spinning \\
        --teacher runs/demo-teacher --out bench/results/spinning-demo-teacher-cpu.json
"""
from __future__ import annotations

import argparse
import os
import sys
import time


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def build_variants(teacher: str, work: str, dev) -> dict:
    """name -> Spec of the teacher in PyTorch FP32, its fused ONNX export and its ONNX INT8."""
    from compressor.bench.harness import Spec
    from compressor.export import export_onnx
    from compressor.quantize import quantize
    from compressor.quantize.configs import quantize_config

    fp32, int8 = os.path.join(work, "onnx-fp32"), os.path.join(work, "onnx-int8")
    if not os.path.isfile(os.path.join(fp32, "manifest.json")):
        log(f"exporting {teacher}")
        export_onnx(teacher, fp32, parity=False, overwrite=True)
    if not os.path.isfile(os.path.join(int8, "quantize.json")):
        log("quantising (ORT dynamic INT8, preset auto)")
        quantize(fp32, int8, quantize_config(method="dynamic", preset="auto"), dev_set=dev, overwrite=True)
    return {"pytorch-fp32": Spec("pytorch-fp32", teacher, "pytorch"),
            "onnx-fp32": Spec("onnx-fp32", fp32, "onnxruntime"),
            "onnx-int8": Spec("onnx-int8", int8, "onnxruntime")}


def spinning_on_off(spec, texts, threads: int, config, repeats: int) -> dict:
    """Batch-1 seconds of ``spec`` with spinning on and off, each in a worker of its own, the two
    taking turns block by block (``repeats`` passes over ``texts``)."""
    from dataclasses import replace

    from compressor.bench.harness import load_sentences, rounds_latency
    from compressor.bench.worker import Workers

    specs = [replace(spec, name="on", spinning=True), replace(spec, name="off", spinning=False)]
    times = {"on": [], "off": []}
    with Workers(specs, threads) as workers:
        load_sentences(workers, texts, config.warmup)
        for _ in range(repeats):
            for name, t in rounds_latency(workers, len(texts), config.block, config.pause_s).items():
                times[name] += t
    return times


def interference(a, b, texts, threads: int, config, repeats: int) -> dict:
    """``a``'s batch-1 seconds alone and beside ``b``: in one process interleaved sentence by
    sentence (as the harness timed before), and in processes of their own, in rounds. Alone
    and beside alternate block by block."""
    import torch

    from compressor.bench.harness import build, interleaved_latency, load_sentences, rounds_latency
    from compressor.bench.worker import Workers

    out = {k: [] for k in ("one_process_alone", "one_process_beside", "own_process_alone",
                           "own_process_beside")}
    torch.set_num_threads(threads)
    runners = [build(a, threads=threads), build(b, threads=threads)]
    for r in runners:
        interleaved_latency([r], texts[:config.warmup], config.warmup)
    for _ in range(repeats):
        for start in range(0, len(texts), config.block):
            block = texts[start:start + config.block]
            out["one_process_alone"] += interleaved_latency(runners[:1], block, 0)[a.name]
            out["one_process_beside"] += interleaved_latency(runners, block, 0)[a.name]
    del runners
    with Workers([a, b], threads) as workers:
        load_sentences(workers, texts, config.warmup)
        for _ in range(repeats):
            for start in range(0, len(texts), config.block):
                block = range(start, min(start + config.block, len(texts)))
                out["own_process_alone"] += rounds_latency(workers[:1], block, config.block, config.pause_s)[a.name]
                out["own_process_beside"] += rounds_latency(workers.items, block, config.block,
                                                            config.pause_s)[a.name]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--teacher", required=True, help="a checkpoint folder")
    ap.add_argument("--out", required=True, help="results JSON to write")
    ap.add_argument("--work", default="runs/spinning", help="the export and INT8 graphs (reused)")
    ap.add_argument("--data-dir", default=os.environ.get("GLUE_DIR") or "../shared/glue_data")
    ap.add_argument("--sentences", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=2, help="passes over the sentences per setting")
    ap.add_argument("--threads", default="1,2")
    args = ap.parse_args()

    from compressor.bench.harness import BenchConfig, fingerprint, percentiles, sample_texts, timing_policy
    from compressor.core.data import load_split
    from compressor.core.models import read_meta
    from compressor.core.results import command_line, row, shown_path, write_results

    start = time.perf_counter()
    task = read_meta(args.teacher).get("task", "sst2")
    dev = load_split(task, "dev", data_dir=args.data_dir)
    specs = build_variants(args.teacher, args.work, dev)
    texts = sample_texts(dev.examples, args.sentences, 0)
    metric = "+".join(dev.task.metrics)   # no score here: speed only
    config = BenchConfig(sentences=args.sentences)
    threads = [int(t) for t in args.threads.split(",")]
    load_before = os.getloadavg()
    rows = []
    for t in threads:
        for name, spec in specs.items():
            log(f"{name}, {t} thread(s): spinning on and off")
            times = spinning_on_off(spec, texts, t, config, args.repeats)
            on, off = percentiles(times["on"]), percentiles(times["off"])
            for setting, lat in (("on", on), ("off", off)):
                rows.append(row(f"{name} spinning {setting}", task, metric, None, parameters=None,
                                size_bytes=None, engine=spec.engine, device="cpu", threads=t, batch_size=1,
                                latency_ms=lat, sentences=len(times[setting]), extra={
                                    "experiment": "spinning", "variant": name, "spinning": setting == "on",
                                    "path": shown_path(spec.path),
                                    "off_vs_on_p50": round(off["p50"] / on["p50"], 3)}))
            log(f"  p50 on {on['p50']:.2f} ms, off {off['p50']:.2f} ms (x{off['p50'] / on['p50']:.2f})")
        log(f"onnx-int8 beside pytorch-fp32, {t} thread(s): one process, then processes of their own")
        measured = interference(specs["onnx-int8"], specs["pytorch-fp32"], texts, t, config, args.repeats)
        base = {how: percentiles(measured[f"{how}_alone"])["p50"] for how in ("one_process", "own_process")}
        for key, seconds in measured.items():
            how = key.rsplit("_", 1)[0]
            lat = percentiles(seconds)
            rows.append(row(f"onnx-int8 {key.replace('_', ' ')}", task, metric, None, engine="onnxruntime",
                            device="cpu", threads=t, batch_size=1, latency_ms=lat, sentences=len(seconds),
                            extra={"experiment": "interference", "variant": "onnx-int8",
                                   "beside": "pytorch-fp32" if key.endswith("beside") else None,
                                   "timing": how.replace("_", " "),
                                   "vs_alone_p50": round(lat["p50"] / base[how], 3)}))
            log(f"  {key:20s} p50 {lat['p50']:.2f} ms (x{lat['p50'] / base[how]:.2f} of alone)")
    write_results(args.out, rows, command=command_line(), fingerprint_info=fingerprint(), config={
        "teacher": shown_path(args.teacher), "sentences": args.sentences, "repeats": args.repeats,
        "threads": threads, "data": dev.source, "timing": timing_policy(config),
        "spinning_off": "onnxruntime session.intra_op/inter_op.allow_spinning 0; OMP_WAIT_POLICY=PASSIVE",
        "load_average_before": [round(v, 2) for v in load_before],
        "load_average_after": [round(v, 2) for v in os.getloadavg()],
        "wall_time_s": round(time.perf_counter() - start, 1)})
    log(f"wrote {args.out} in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
