"""Quantised variants of the MiniLM-L6 SST-2 teacher against FP32 and ONNX Runtime's own O2 + INT8.

Builds every variant with ``compressor.quantize`` (reusing folders already
built under ``--work``), scores each on the full SST-2 dev set, then times
them all in this one process at batch 1 over real dev sentences (no padding),
interleaved, with ``--threads`` threads. Writes ``compressor.core.results`` JSON.

    flock /tmp/compressor-cpu.lock python -m bench.experiments.quant_sst2 \
        --teacher runs/teachers/minilm-l6-sst2 --data-dir $GLUE_DIR \
        --qat-parts /path/to/gpu/output --out bench/results/quant-sst2-cpu.json
"""
from __future__ import annotations

import argparse
import glob
import os
import sys
import time

import numpy as np


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def build_variants(teacher, work, data_dir, qat_parts, only=None):
    """name -> (folder, description); every folder made by compressor.quantize."""
    from compressor.core.data import load_split
    from compressor.quantize import quantize, quantize_config
    from compressor.export import export_onnx

    train = load_split("sst2", "train", data_dir=data_dir)
    dev = load_split("sst2", "dev", data_dir=data_dir)
    fp32 = os.path.join(work, "teacher-onnx")
    if not os.path.isdir(fp32):
        export_onnx(teacher, fp32, data_dir=data_dir, parity_limit=200)
    plan = {
        "ort-int8-dynamic-avx2": (fp32, quantize_config(method="dynamic", preset="avx2")),
        "ort-int8-dynamic-vnni": (fp32, quantize_config(method="dynamic", preset="avx512_vnni")),
        "ort-int8-dynamic-vnni-per-tensor": (fp32, quantize_config(method="dynamic", preset="avx512_vnni",
                                                                   per_channel=False)),
        "ort-int8-static-minmax": (fp32, quantize_config(method="static", preset="avx512_vnni",
                                                         calibration="minmax")),
        "ort-int8-static-entropy": (fp32, quantize_config(method="static", preset="avx512_vnni",
                                                          calibration="entropy")),
        "ort-int8-static-percentile": (fp32, quantize_config(method="static", preset="avx512_vnni",
                                                             calibration="percentile")),
        "torchao-int8-dynamic": (teacher, quantize_config(backend="torchao", method="dynamic")),
        "inc-int8-static": (teacher, quantize_config(backend="inc", method="static")),
        "inc-int8-smoothquant": (teacher, quantize_config(backend="inc", method="static",
                                                          smoothquant_alpha=0.5)),
    }
    if qat_parts:
        plan["ort-int8-qat-distill-avx2"] = (_join_qat(teacher, qat_parts, "qat-distill", work),
                                             quantize_config(method="dynamic", preset="avx2"))
    out = {"ort-fp32": fp32}
    for name, (src, config) in plan.items():
        if only and name not in only:
            continue
        folder = os.path.join(work, name)
        if not os.path.isfile(os.path.join(folder, "quantize.json")):
            log(f"building {name}")
            start = time.perf_counter()
            record = quantize(src, folder, config, train_set=train, dev_set=dev)
            log(f"  {name}: dev {record.get('score')} in {time.perf_counter() - start:.0f} s")
        out[name] = folder
    return out


def _join_qat(teacher, parts_dir, name, work):
    """The QAT-trained checkpoint from the GPU run's fp16 parts (see bench/experiments/quant_qat_gpu.py)."""
    import torch
    from safetensors.torch import load

    from compressor.core.models import load_for_task, read_meta, save_checkpoint

    folder = os.path.join(work, f"{name}-checkpoint")
    if os.path.isdir(folder):
        return folder
    parts = sorted(glob.glob(os.path.join(parts_dir, f"{name}.part.*")), key=lambda p: int(p.rsplit(".", 1)[1]))
    state = load(b"".join(open(p, "rb").read() for p in parts))
    net, tok = load_for_task(teacher)
    net.load_state_dict({k: v.to(torch.float32) for k, v in state.items()})
    save_checkpoint(net, tok, folder, {**read_meta(teacher), "made_by": "quantize:qat (GPU run)"})
    return folder


def torch_runner(name, folder):
    """A harness Runner for a torch-quantized folder."""
    import torch

    from compressor.bench.harness import Runner, Spec
    from compressor.core.batches import collate, encode
    from compressor.core.data import Example
    from compressor.core.models import read_meta, size_on_disk
    from compressor.quantize import load_quantized

    net, tok = load_quantized(folder)
    max_length = read_meta(folder).get("max_length", 128)
    pad = tok.pad_token_id or 0

    def enc(texts):
        examples = [Example((t,) if isinstance(t, str) else tuple(t), None, str(i)) for i, t in enumerate(texts)]
        batch = collate(encode(tok, examples, max_length, net.config), pad, False)
        return {k: v for k, v in batch.items()}

    def run(feed):
        with torch.inference_mode():
            return net(**feed).logits

    spec = Spec(name, folder, "pytorch", "int8", group="ours", size_bytes=size_on_disk(folder))
    return Runner(spec, enc, run, model=net)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--teacher", required=True)
    ap.add_argument("--data-dir", default=os.environ.get("GLUE_DIR"))
    ap.add_argument("--work", default="runs/quant")
    ap.add_argument("--qat-parts", default=None)
    ap.add_argument("--out", required=True)
    ap.add_argument("--sentences", type=int, default=300)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--only", nargs="*", default=None, help="build/time only these variants (and the baselines)")
    ap.add_argument("--skip-torch", action="store_true", help="leave torchao/INC variants out of the timing")
    args = ap.parse_args()

    import torch

    from compressor.bench.harness import Spec, build, fingerprint, interleaved_latency, percentiles, sample_texts, score
    from compressor.bench.peers import peer_specs
    from compressor.core.data import load_split
    from compressor.core.metrics import task_score
    from compressor.core.models import count_parameters, load_for_task
    from compressor.core.results import command_line, row, write_results

    torch.set_num_threads(args.threads)
    folders = build_variants(args.teacher, args.work, args.data_dir, args.qat_parts, args.only)
    dev = load_split("sst2", "dev", data_dir=args.data_dir)
    params = count_parameters(load_for_task(args.teacher)[0])
    runners = [build(Spec("pytorch-fp32", args.teacher, "pytorch", "fp32", group="teacher"), threads=args.threads)]
    runners += [build(s, threads=args.threads) for s in
                peer_specs(args.teacher, os.path.join(args.work, "peers"), ["ort-o2-int8"], preset="auto")]
    for name, folder in folders.items():
        if name.startswith(("torchao", "inc")):
            if not args.skip_torch:
                runners.append(torch_runner(name, folder))
        else:
            runners.append(build(Spec(name, folder, "onnxruntime", "int8", group="ours"), threads=args.threads))
    scores = {}
    for r in runners:
        log(f"scoring {r.spec.name}")
        # one sentence at a time: dynamic INT8's ranges would otherwise include other rows' padding
        metrics = score(r, dev.task, dev, batch_size=1)
        scores[r.spec.name] = (metrics, task_score(dev.task, metrics))
    timed = sample_texts(dev.examples, args.sentences, seed=0)
    log(f"timing {len(runners)} variants x {len(timed)} sentences, batch 1, {args.threads} thread(s), interleaved")
    times = interleaved_latency(runners, timed, warmup=20)
    base = np.median(times["pytorch-fp32"])
    peer = np.median(times["ort-o2-int8"])
    teacher_value = scores["pytorch-fp32"][1]
    rows = []
    for r in runners:
        name = r.spec.name
        folder = folders.get(name, r.spec.path)
        size = _size(folder)
        lat = percentiles(times[name])
        rows.append(row(name, "sst2", "accuracy", scores[name][1], teacher_value, parameters=params,
                        size_bytes=size, engine=r.spec.engine, device="cpu", threads=args.threads, batch_size=1,
                        latency_ms=lat, extra={
                            "metrics": scores[name][0], "path": folder,
                            "speedup_vs_pytorch_fp32": round(float(base / np.median(times[name])), 3),
                            "speed_vs_ort_o2_int8": round(float(peer / np.median(times[name])), 3),
                            "quantization": _quant_info(folder)}))
        log(f"{name:34s} acc {scores[name][1]:6.2f}  p50 {lat['p50']:7.3f} ms  "
            f"x{base / np.median(times[name]):.2f} vs torch fp32, x{peer / np.median(times[name]):.2f} vs ort-o2-int8")
    write_results(args.out, rows, command=command_line(), fingerprint_info=fingerprint(),
                  config={"sentences": len(timed), "threads": args.threads, "batch_size": 1, "interleaved": True,
                          "dev_examples": len(dev), "data": dev.source})


def _size(path):
    from compressor.core.models import size_on_disk

    if os.path.isdir(path) and os.path.isfile(os.path.join(path, "model.onnx")):
        return os.path.getsize(os.path.join(path, "model.onnx"))
    return size_on_disk(path)


def _quant_info(folder):
    from compressor.core.io import read_json

    file = os.path.join(folder, "quantize.json") if os.path.isdir(folder) else ""
    if not os.path.isfile(file):
        return None
    rec = read_json(file)
    return {k: rec.get(k) for k in ("method", "backend", "preset", "wall_time_s")} | \
        {"calibration": rec["config"].get("calibration") if rec.get("method") == "static" else None}


if __name__ == "__main__":
    main()
