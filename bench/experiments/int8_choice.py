"""Issue 32 item 3: the accuracy-aware INT8 choice before and after it judged agreement with FP32.

On a teacher fine-tuned with ``--holdout N``, its ONNX export is quantised with ``method: auto,
search_on: holdout, max_drop: 0.3`` (as the MPNet recipes do) twice: by the code before the
criterion (a copy of the ``compressor`` package at an earlier commit, ``--before``, run in its own
process: the drop on the held-out rows alone) and by the code here (drop bound and
``min_agreement``). For each choice, and for every candidate graph built again the same way
(static with the same calibration rows, dynamic per-channel and per-tensor), the held-out
agreement with FP32 and the dev score and dev agreement are recorded. Dev is only reported,
never used to choose.

    compressor finetune minilm-l6 --task sst2 --data-dir embedded --train-limit 2400 --holdout 300 \\
        --epochs 1 --max-length 64 --lr 1e-4 --batch-size 32 --device cpu --out /tmp/int8choice/teacher-sst2
    git archive <commit before> compressor | tar -x -C /tmp/int8choice/before
    python -m bench.experiments.int8_choice --teacher /tmp/int8choice/teacher-sst2 --task sst2 \\
        --data-dir embedded --before /tmp/int8choice/before --work /tmp/int8choice/work \\
        --out bench/results/int8-choice/minilm-l6-sst2-cpu.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import replace


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--teacher", required=True, help="a checkpoint fine-tuned with --holdout N")
    parser.add_argument("--task", default="sst2")
    parser.add_argument("--data-dir", default=os.environ.get("GLUE_DIR", "embedded"))
    parser.add_argument("--before", help="a folder holding the compressor package before the criterion")
    parser.add_argument("--work", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--max-drop", type=float, default=0.3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)

    from compressor.core.data import get_task, holdout, load_data
    from compressor.core.presets import resolve_preset
    from compressor.export import int8 as ox
    from compressor.export.onnx import export_onnx
    from compressor.export.runtime import Predictor
    from compressor.quantize import OrtAutoConfig, quantize
    from compressor.quantize import sensitivity as sens

    start = time.perf_counter()
    os.makedirs(args.work, exist_ok=True)
    task = get_task(args.task)
    onnx_dir = os.path.join(args.work, "onnx")
    if not os.path.isdir(onnx_dir):
        export_onnx(args.teacher, onnx_dir, data_dir=args.data_dir)
    held = holdout.held_rows(args.teacher, task, args.data_dir, needs="this experiment")
    dev = load_data(task, "dev", args.data_dir)
    train = load_data(task, "train", args.data_dir)
    settings = dict(preset="auto", max_drop=args.max_drop, search_on="holdout", threads=args.threads)
    out = {"task": task.name, "teacher": os.path.abspath(args.teacher), "holdout_rows": len(held),
           "dev_rows": len(dev), "settings": settings, "cpu": cpu_model(),
           "preset": resolve_preset("auto").name, "commands": [" ".join(["python", "-m",
                                                                         "bench.experiments.int8_choice"] + (argv or sys.argv[1:]))]}

    runs = {}
    if args.before:   # the earlier code, in its own process, on the same export and rows
        folder = os.path.join(args.work, "before")
        if not os.path.isdir(folder):
            code = ("import sys; sys.path.insert(0, sys.argv[1]); from compressor.cli import main; "
                    "main(sys.argv[2:])")
            command = [sys.executable, "-c", code, args.before, "quantize", onnx_dir, "--out", folder,
                       "--method", "auto", "--preset", "auto", "--max-drop", str(args.max_drop),
                       "--search-on", "holdout", "--threads", str(args.threads), "--data-dir", args.data_dir]
            subprocess.run(command, check=True)
        with open(os.path.join(args.before, "COMMIT")) as f:
            out["before_commit"] = f.read().strip()
        runs["before"] = folder
    folder = os.path.join(args.work, "after")
    if not os.path.isdir(folder):
        quantize(onnx_dir, folder, OrtAutoConfig(**settings), data_dir=args.data_dir, train_set=train,
                 dev_set=dev, holdout_set=held)
    runs["after"] = folder

    # every graph against FP32, on the held-out rows (what the search saw) and on dev (reported only)
    fp32 = {name: sens.graph_outputs(onnx_dir, rows, threads=args.threads) for name, rows in
            (("holdout", held), ("dev", dev))}
    labels = {"holdout": [e.label for e in held.examples], "dev": [e.label for e in dev.examples]}

    def compare(model_file):
        row = {}
        for split, rows in (("holdout", held), ("dev", dev)):
            outputs = sens.graph_outputs(onnx_dir, rows, model_file, args.threads)
            row[split] = {"score": round(sens.score_outputs(task, outputs, labels[split]), 3),
                          **{k: (round(v, 6) if isinstance(v, float) else v)
                             for k, v in sens.agreement(task, outputs, fp32[split], labels[split]).items()}}
        return row

    src = ox.onnx_file(onnx_dir)
    preset = resolve_preset("auto")
    predictor = Predictor(onnx_dir, threads=args.threads)
    graphs = {"fp32": src}
    feeds = ox.calibration_feeds(predictor, train.examples, 128, 42)   # auto's defaults
    graphs["static-int8"] = os.path.join(args.work, "static.onnx")
    ox.quantize_static_onnx(src, graphs["static-int8"], preset, feeds, "minmax", 99.999, pad_id=predictor.pad_id)
    graphs["dynamic-int8"] = os.path.join(args.work, "dynamic.onnx")
    ox.quantize_dynamic_onnx(src, graphs["dynamic-int8"], preset)
    graphs["dynamic-int8-per-tensor"] = os.path.join(args.work, "dynamic-per-tensor.onnx")
    ox.quantize_dynamic_onnx(src, graphs["dynamic-int8-per-tensor"], replace(preset, per_channel=False))
    out["candidates"] = {name: compare(path) for name, path in graphs.items()}

    for name, folder in runs.items():
        with open(os.path.join(folder, "quantize.json")) as f:
            record = json.load(f)
        search = record["search"]
        out[name] = {"chosen": search["chosen"], "dev_score": round(record["score"], 3),
                     "tried": search["tried"], "criterion": search.get("criterion"),
                     "mixed_fp32_units": search.get("mixed", {}).get("fp32_units"),
                     "chosen_graph": compare(os.path.join(folder, "model.onnx"))}
    out["fp32_dev_score"] = out["candidates"]["fp32"]["dev"]["score"]
    out["wall_time_s"] = round(time.perf_counter() - start, 1)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out + ".tmp", "w") as f:
        json.dump(out, f, indent=1)
    os.replace(args.out + ".tmp", args.out)
    for name in runs:
        r = out[name]
        print(f"{name}: chose {r['chosen']}; dev {r['dev_score']} (FP32 {out['fp32_dev_score']}); held-out "
              f"agreement {r['chosen_graph']['holdout']['agreement']}, dev agreement {r['chosen_graph']['dev']['agreement']}")
    for name, row in out["candidates"].items():
        print(f"  {name}: held-out {row['holdout']['score']} agree {row['holdout']['agreement']} | "
              f"dev {row['dev']['score']} agree {row['dev']['agreement']} flips {row['dev']['flips']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
