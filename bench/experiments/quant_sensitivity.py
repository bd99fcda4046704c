"""Sensitivity table, mixed precision and the accuracy-aware choice for one model.

Runs ``compressor quantize --method auto`` (reusing ``--work`` when it already
holds a finished run) and writes its tries as ``compressor.core.results`` rows, plus
the table and plot beside the JSON.

    flock /tmp/compressor-cpu.lock python -m bench.experiments.quant_sensitivity --export runs/quant/teacher-onnx \
        --data-dir $GLUE_DIR --out bench/results/quant-sensitivity-minilm-l6-sst2.json
"""
from __future__ import annotations

import argparse
import os


def main():
    from compressor.core.io import read_json
    from compressor.quantize import quantize, quantize_config
    from compressor.export.int8 import quantizable_units
    from compressor.quantize.sensitivity import plot, table
    from compressor.core.results import command_line, row, write_results

    ap = argparse.ArgumentParser()
    ap.add_argument("--export", required=True, help="FP32 ONNX export folder")
    ap.add_argument("--data-dir", default=os.environ.get("GLUE_DIR"))
    ap.add_argument("--work", default="runs/quant/auto-avx2-per-tensor")
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-drop", type=float, default=0.5)
    args = ap.parse_args()
    # the avx2 preset per tensor: the setting where all-INT8 loses accuracy, so there is something to choose
    config = quantize_config(method="auto", preset="avx2", per_channel=False, granularity="matrix",
                             max_drop=args.max_drop)
    record_file = os.path.join(args.work, "quantize.json")
    if not (os.path.isfile(record_file) and read_json(record_file)["config"] == read_json_config(config)):
        quantize(args.export, args.work, config, data_dir=args.data_dir)
    record = read_json(record_file)
    search = record["search"]
    report = search["sensitivity"]
    order = list(quantizable_units(os.path.join(args.export, "model.onnx"), "matrix"))
    for unit in report["units"]:
        unit.setdefault("position", order.index(unit["unit"]))
    base = os.path.splitext(args.out)[0]
    with open(base + ".md", "w") as f:
        f.write(table(report, "accuracy"))
    plot(report, base + ".png", "accuracy")
    fp32 = report["fp32_score"]
    rows = [row(t["name"], "sst2", "accuracy", t["score"], fp32, size_bytes=None, engine="onnxruntime",
                threads=1, batch_size=1, extra={"drop": t["drop"], "meets_tolerance": t["meets"],
                                                "chosen": t["name"] == search["chosen"],
                                                "quick_latency_p50_ms": t["latency_ms"]})
            for t in search["tried"]]
    write_results(args.out, rows, command=command_line(), max_drop=args.max_drop, chosen=search["chosen"],
                  fp32_units=search.get("fp32_units"), mixed_steps=search["mixed"]["tried"],
                  sensitivity=[{k: u[k] for k in ("unit", "score", "drop")} for u in report["units"]],
                  all_int8_score=report["all_int8_score"], fp32_score=fp32, preset=record["preset"],
                  wall_time_s=record["wall_time_s"])


def read_json_config(config):
    import json
    from dataclasses import asdict

    return json.loads(json.dumps(asdict(config)))


if __name__ == "__main__":
    main()
