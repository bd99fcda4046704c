"""Q8BERT-style QAT of the MiniLM-L6 SST-2 teacher on the GPU machine, with and without distillation.

Run there (see bench/README.md): it writes ``$OUT/quant-qat-gpu.json`` and the
trained weights of each variant as fp16 safetensors split into <16 MB parts
(``$OUT/qat-<variant>.part.N``), which ``bench.quant_qat_finish`` joins here,
quantises for real (ONNX Runtime dynamic INT8, same preset) and scores.
"""
import argparse
import os
import time

import torch
from safetensors.torch import save

from compressor.core.data import load_split
from compressor.core.presets import resolve_preset
from compressor.quantize.qat import qat_train
from compressor.core.results import command_line, row, write_results
from compressor.engine.train import TrainConfig

PART = 15 * 2 ** 20


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--teacher", required=True)
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--preset", default="avx2")
    ap.add_argument("--epochs", type=float, default=1.0)
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--train-limit", type=int, default=None)
    ap.add_argument("--dev-limit", type=int, default=None)
    ap.add_argument("--eval-every", type=int, default=500)
    args = ap.parse_args()
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    preset = resolve_preset(args.preset)
    train = load_split("sst2", "train", args.data_dir, limit=args.train_limit)
    dev = load_split("sst2", "dev", args.data_dir, limit=args.dev_limit)
    tok = AutoTokenizer.from_pretrained(args.teacher)
    results = {"preset": preset.to_dict(), "train_rows": len(train), "dev_rows": len(dev), "runs": {}}
    for name, alpha in (("qat", 0.0), ("qat-distill", 0.5)):
        model = AutoModelForSequenceClassification.from_pretrained(args.teacher, dtype=torch.float32)
        config = TrainConfig(epochs=args.epochs, lr=args.lr, batch_size=32, max_length=128, warmup=0.1,
                             weight_decay=0.0, eval_every=args.eval_every, seed=42, device=args.device)
        start = time.perf_counter()
        result = qat_train(model, tok, train, dev, config, preset.per_channel, preset.reduce_range,
                           distill_alpha=alpha, desc=name)
        result["wall_time_s"] = round(time.perf_counter() - start, 1)
        result["config"] = vars(config)
        result["distill_alpha"] = alpha
        results["runs"][name] = result
        print(name, "before", result["before"]["score"], "best", result["best"], flush=True)
        blob = save({k: v.detach().to(torch.float16).contiguous() for k, v in model.state_dict().items()})
        for i in range(0, len(blob), PART):
            with open(os.path.join(args.out, f"{name}.part.{i // PART}"), "wb") as f:
                f.write(blob[i:i + PART])
    results["versions"] = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0)
                           if torch.cuda.is_available() else None}
    write_results(os.path.join(args.out, "quant-qat-gpu.json"), qat_rows(results),
                  command=command_line(), preset=results["preset"], train_rows=results["train_rows"],
                  dev_rows=results["dev_rows"])


def qat_rows(results: dict) -> list:
    """One row per QAT run (the fake-quantised model's best dev score; the run under ``extra``)."""
    return [row(name, "sst2", "accuracy", run["best"]["score"], None,
                extra={"run": run, "versions": results.get("versions")})
            for name, run in results["runs"].items()]


if __name__ == "__main__":
    main()
