"""Token positions computed per training epoch: random batches vs ``group_by_length``.

A count, not a timing (valid on a busy machine): for each GLUE-5 task's training rows, plus
the augmented copies the accuracy-first recipes train on (``--copies``: chain-augmented.yaml's
20 on CoLA, MRPC, RTE and STS-B; chain-augmented-sst2.yaml's 2 on SST-2), every row is
tokenised as training does (``compressor.core.batches.encode``, MPNet-base's tokenizer, cut at
128 tokens) and one epoch's batches are drawn with the training loop's own function
(``compressor.core.batches.shuffled_groups``, seeds 42, 43, 44), random and length-grouped.
Per epoch it counts the token positions computed (each batch's rows x its width: what the
embeddings, FFN and projections cost) and the sum over rows of the width squared (what the
attention scores, and TinyBERT's attention-score loss, cost), against the rows' own tokens.

The copies are made as the augment stage makes them (``compressor.augment.api.augment_rows``:
TinyBERT's rule, each word replaced with probability 0.4 by one of its 15 nearest whole words
in the model's word-piece embeddings, rows sharing a sentence with dev left out); only their
lengths matter here, so the teacher does not label them.

    .venv/bin/python -m bench.experiments.group_by_length --model /tmp/mpnet \\
        --out bench/results/group-by-length/positions-mpnet-base.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

TASKS = ("cola", "rte", "mrpc", "stsb", "sst2")
COPIES = {"cola": 20, "rte": 20, "mrpc": 20, "stsb": 20, "sst2": 2}   # the recipes' augment.copies
SEEDS = (42, 43, 44)


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def epoch_cost(lengths, batch_size: int, seed: int, by_length: bool) -> dict:
    """Token positions and squared widths one epoch of training batches computes."""
    import torch

    from compressor.core.batches import shuffled_groups

    groups = shuffled_groups(lengths, batch_size, torch.Generator().manual_seed(seed), by_length)
    widths = [max(lengths[i] for i in g) for g in groups]
    return {"positions": sum(len(g) * w for g, w in zip(groups, widths)),
            "squared": sum(len(g) * w * w for g, w in zip(groups, widths)),
            "batches": len(groups), "first_width": widths[0]}


def measure(lengths, batch_size: int) -> dict:
    tokens = sum(lengths)
    squared = sum(n * n for n in lengths)
    out = {"rows": len(lengths), "tokens": tokens, "mean_length": round(tokens / len(lengths), 2),
           "max_length": max(lengths), "tokens_squared": squared}
    for name, grouped in (("random", False), ("grouped", True)):
        runs = [epoch_cost(lengths, batch_size, seed, grouped) for seed in SEEDS]
        out[name] = {"positions": [r["positions"] for r in runs], "squared": [r["squared"] for r in runs],
                     "positions_per_token": round(sum(r["positions"] for r in runs) / len(runs) / tokens, 3),
                     "squared_per_token_squared": round(sum(r["squared"] for r in runs) / len(runs) / squared, 3)}
    rand, grp = out["random"], out["grouped"]
    out["positions_saved"] = round(1 - sum(grp["positions"]) / sum(rand["positions"]), 3)
    out["squared_saved"] = round(1 - sum(grp["squared"]) / sum(rand["squared"]), 3)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="a folder with the tokenizer and word-piece embeddings")
    parser.add_argument("--out", required=True)
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--no-copies", action="store_true", help="the real training rows only")
    args = parser.parse_args(argv)

    import transformers

    from compressor.augment.api import augment_rows
    from compressor.augment.candidates import EmbeddingNeighbours
    from compressor.augment.config import AugmentConfig
    from compressor.core.batches import encode
    from compressor.core.data import load_split

    data_dir = os.environ.get("GLUE_DIR")
    tokenizer = transformers.AutoTokenizer.from_pretrained(args.model)
    config = transformers.AutoConfig.from_pretrained(args.model)
    neighbours = None
    if not args.no_copies:
        model = transformers.AutoModel.from_pretrained(args.model)
        neighbours = EmbeddingNeighbours(model, tokenizer, 15)
        del model
    results = {}
    for task in args.tasks.split(","):
        start = time.perf_counter()
        train = load_split(task, "train", data_dir)
        real = [len(it["input_ids"]) for it in encode(tokenizer, train.examples, args.max_length, config)]
        entry = {"train": measure(real, args.batch_size)}
        if neighbours is not None:
            dev = load_split(task, "dev", data_dir)
            copies, _, counts = augment_rows(train, neighbours, AugmentConfig(copies=COPIES[task]), (dev,))
            made = [len(it["input_ids"]) for it in encode(tokenizer, copies, args.max_length, config)]
            entry["train_and_copies"] = {"copies": COPIES[task], "copy_rows": counts["rows"],
                                         **measure(real + made, args.batch_size)}
        results[task] = entry
        log(f"{task}: " + "; ".join(f"{k} {v['rows']} rows, positions -{100 * v['positions_saved']:.1f}%, "
                                     f"squared -{100 * v['squared_saved']:.1f}%" for k, v in entry.items())
            + f" ({time.perf_counter() - start:.0f} s)")
    record = {"what": "token positions (rows x batch width) and squared widths (rows x width^2, the "
                      "attention's cost) one training epoch computes, random vs group_by_length batches; "
                      "mean over seeds " + ", ".join(map(str, SEEDS)),
              "model": os.path.basename(os.path.normpath(args.model)), "batch_size": args.batch_size,
              "max_length": args.max_length, "group_window_batches": _window(),
              "command": "python -m bench.experiments.group_by_length " + " ".join(argv or sys.argv[1:]),
              "tasks": results}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(record, f, indent=1)
    os.replace(tmp, args.out)
    return 0


def _window() -> int:
    from compressor.core.batches import GROUP_WINDOW

    return GROUP_WINDOW


if __name__ == "__main__":
    sys.exit(main())
