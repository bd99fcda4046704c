"""A small CPU check that token pruning works end to end (not a target): MiniLM-L6 with a random
SST-2 head (no fine-tuning, so no score is claimed), fixed keep ratios (no training), exported
by the toolkit; batch-1 ONNX Runtime latency at 1 thread over SST-2 dev sentences, with and
without token pruning, and the mean share of tokens each layer computed on.

    GLUE_DIR=../shared/glue_data .venv/bin/python -m bench.experiments.token_prune_cpu --rows 200 \
        --out bench/results/token-prune/minilm-l6-ratio-cpu.json
"""
import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument("--keep", type=float, default=0.7)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    import torch
    import transformers

    from compressor.core.data import get_task, load_data
    from compressor.core.models import checkpoint_meta, resolve_model, save_checkpoint
    from compressor.export.onnx import example_texts, export_onnx
    from compressor.export.runtime import Predictor
    from compressor.tokens.stage import token_prune

    task = get_task("sst2")
    dev = load_data(task, "dev", os.environ.get("GLUE_DIR"), args.rows)
    texts = example_texts(dev.examples)
    root = tempfile.mkdtemp()
    base = resolve_model("minilm-l6")
    torch.manual_seed(0)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(base, num_labels=2)
    tokenizer = transformers.AutoTokenizer.from_pretrained(base)
    source = os.path.join(root, "model")
    save_checkpoint(model, tokenizer, source, checkpoint_meta(task, 128, "token_prune_cpu"))
    pruned = os.path.join(root, "tokens")
    record = token_prune(source, pruned, {"by": "ratio", "keep": args.keep, "learn": False,
                                          "hard_epochs": 0}, dev_limit=args.rows, train_limit=8)
    results = {}
    for name, folder in (("unpruned", source), ("token-pruned", pruned)):
        onnx_dir = os.path.join(root, name + "-onnx")
        manifest = export_onnx(folder, onnx_dir, parity_limit=args.rows)
        predictor = Predictor(onnx_dir, threads=1)
        feeds = [predictor.encode([t]) for t in texts]
        for feed in feeds[:20]:
            predictor.run(feed)
        times = []
        for feed in feeds:
            start = time.perf_counter()
            predictor.run(feed)
            times.append((time.perf_counter() - start) * 1000)
        results[name] = {"mean_ms": round(float(np.mean(times)), 3), "p50_ms": round(float(np.median(times)), 3),
                         "fusions": (manifest.get("optimization") or {}).get("fusions"),
                         "parity": {k: manifest["parity"][k] for k in ("max_abs_logit_diff", "identical_predictions")}}
    out = {"command": "python -m bench.experiments.token_prune_cpu " + " ".join(argv or sys.argv[1:]),
           "model": "MiniLM-L6, random SST-2 head (untrained: no score claimed)", "rows": len(texts),
           "rule": {"by": "ratio", "keep": args.keep}, "threads": 1, "batch": 1,
           "kept_tokens": record["kept_tokens"], "latency": results,
           "speedup_mean": round(results["unpruned"]["mean_ms"] / results["token-pruned"]["mean_ms"], 3),
           "speedup_p50": round(results["unpruned"]["p50_ms"] / results["token-pruned"]["p50_ms"], 3)}
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
