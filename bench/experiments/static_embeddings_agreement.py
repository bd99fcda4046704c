"""What storing the word-embedding table INT8 does to a static INT8 graph's predictions (issue 32's
deployable graph): two static INT8 graphs of one trained export, the table FP32 (``--no-embeddings-int8``,
as static INT8 was built before) and INT8 (one scale per row, the default), scored on a task's dev
rows one sentence at a time, with how many rows change label between them and the largest logit
difference. Sizes come from the files.

The graphs of the committed result: MPNet-base fine-tuned on this 2-core CPU on SST-2's first 2,000
training rows (91.40 dev), exported, then static INT8 twice:

    compressor finetune /tmp/mpnet --task sst2 --data-dir $GLUE_DIR --train-limit 2000 --epochs 1 \\
        --batch-size 32 --lr 5e-5 --max-length 64 --group-by-length --eval-every 1000000 --out runs/emb/mpnet-sst2
    compressor export runs/emb/mpnet-sst2 --out runs/emb/onnx
    compressor quantize runs/emb/onnx --method static --preset auto --task sst2 --data-dir $GLUE_DIR \\
        --threads 2 --no-embeddings-int8 --out runs/emb/table-fp32     # and --embeddings-int8: table-int8
    GLUE_DIR=../shared/glue_data .venv/bin/python -m bench.experiments.static_embeddings_agreement \\
        --fp32-table runs/emb/table-fp32 --int8-table runs/emb/table-int8 --fp32 runs/emb/onnx --task sst2 \\
        --out bench/results/static-embeddings-agreement-mpnet-sst2.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np


def main(argv=None) -> dict:
    from compressor.core.data import get_task
    from compressor.core.data.readers import load_split
    from compressor.core.results import row, write_results
    from compressor.core.metrics import compute_metrics
    from compressor.export.onnx import example_texts
    from compressor.export.runtime import Predictor

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fp32-table", required=True, help="static INT8 export folder, word table FP32")
    ap.add_argument("--int8-table", required=True, help="static INT8 export folder, word table INT8")
    ap.add_argument("--fp32", help="the FP32 export both were made from: each graph's rows changing label against it")
    ap.add_argument("--task", required=True)
    ap.add_argument("--data-dir", default=os.environ.get("GLUE_DIR"))
    ap.add_argument("--limit", type=int, default=None, help="first N dev rows (default: all)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    task = get_task(args.task)
    dev = load_split(task, "dev", args.data_dir, limit=args.limit)
    texts = example_texts(dev.examples)
    labels = [ex.label for ex in dev.examples]
    command = "python -m bench.experiments.static_embeddings_agreement " + " ".join(argv or sys.argv[1:])
    logits, scores, sizes = {}, {}, {}
    graphs = (("table-fp32", args.fp32_table), ("table-int8", args.int8_table))
    for name, folder in graphs + ((("fp32", args.fp32),) if args.fp32 else ()):
        logits[name] = Predictor(folder, threads=1).logits(texts, batch_size=1)
        preds = logits[name][:, 0] if task.is_regression else logits[name].argmax(-1)
        scores[name] = compute_metrics(task, preds, labels)
        sizes[name] = os.path.getsize(os.path.join(folder, "model.onnx"))
    a, b = logits["table-fp32"], logits["table-int8"]
    between = {"max_abs_logit_difference": round(float(np.abs(a - b).max()), 6)}
    if not task.is_regression:
        between["rows_changing_label"] = int((a.argmax(-1) != b.argmax(-1)).sum())
    reference = scores.get("fp32")
    rows = []
    for name, folder in graphs + ((("fp32", args.fp32),) if args.fp32 else ()):
        extra = {"folder": folder, "metrics": {k: round(float(v), 6) for k, v in scores[name].items()}}
        if args.fp32 and not task.is_regression and name != "fp32":
            extra["rows_changing_label_against_fp32"] = int((logits[name].argmax(-1) != logits["fp32"].argmax(-1)).sum())
        main_score = float(np.mean(list(scores[name].values()))) * 100
        rows.append(row(name, task.name, "+".join(scores[name]), round(main_score, 4),
                        round(float(np.mean(list(reference.values()))) * 100, 4) if reference else None,
                        size_bytes=sizes[name], engine="onnxruntime", extra=extra))
    write_results(args.out, rows, command=command, rows_compared=len(texts), between_static_graphs=between)
    out = {"rows": rows, "between_static_graphs": between}
    print(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
