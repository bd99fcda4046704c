"""Fine-tune a base encoder on each GLUE task at hand and record its dev scores.

Made bench/results/finetune-minilm-l6-*-seedN.json (GPU machine, see bench/README.md):
    python -m bench.experiments.finetune_glue --model minilm-l6 --data-dir $GLUE_DIR --seed N --device cuda
Each result holds the command, the settings and the full metrics record.
"""
from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from dataclasses import asdict

from compressor.core.results import training_row, write_results
from compressor.engine.train import TrainConfig, finetune

# The plain Hugging Face reference loop: lr 5e-5, batch 32, linear decay without warm-up
# or weight decay; SST-2 3 epochs, the small tasks 5 (smaller batches for the pair tasks).
PLAIN = dict(lr=5e-5, warmup=0.0, weight_decay=0.0, max_length=128)
SETTINGS = {
    "sst2": dict(PLAIN, epochs=3, batch_size=32, eval_every=500),
    "mrpc": dict(PLAIN, epochs=5, batch_size=16),
    "rte": dict(PLAIN, epochs=5, batch_size=16),
    "cola": dict(PLAIN, epochs=5, batch_size=32, max_length=64),
    "stsb": dict(PLAIN, epochs=5, batch_size=32),
}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="minilm-l6")
    parser.add_argument("--name", default="minilm-l6", help="name used in the result files")
    parser.add_argument("--data-dir", default=os.environ.get("GLUE_DIR"))
    parser.add_argument("--results", default="bench/results")
    parser.add_argument("--work", default="runs/finetune-glue", help="where checkpoints go")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("tasks", nargs="*", default=list(SETTINGS))
    args = parser.parse_args(argv)
    command = "python -m bench.experiments.finetune_glue " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    for task in args.tasks:
        config = TrainConfig(**SETTINGS[task], seed=args.seed, device=args.device)
        start = time.time()
        record = finetune(args.model, task, os.path.join(args.work, f"{task}-seed{args.seed}"),
                          data_dir=args.data_dir,
                          config=config, overwrite=True)
        name = f"{args.name}-seed{args.seed}"  # the task is the row's own column
        write_results(os.path.join(args.results, f"finetune-{args.name}-{task}-seed{args.seed}.json"),
                      [training_row(name, task, record)], command=command, settings=asdict(config))
        print(f"{task}: {record['metrics']} score {record['score']:.2f} "
              f"({time.time() - start:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
