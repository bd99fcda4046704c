"""Distil SST-2 teachers into smaller students and record teacher, students and retention.

Each experiment writes bench/results/distill-<experiment>.json (compressor-results/1):
    python -m bench.experiments.distill_sst2 --teacher runs/teachers/minilm-l6-sst2 --data-dir $GLUE_DIR \
        --device cuda 3L 2L tinybert-4L312 bilstm
    python -m bench.experiments.distill_sst2 --data-dir $GLUE_DIR --device cuda --mpnet <MPNet folder> mpnet-teacher
    python -m bench.experiments.distill_sst2 --data-dir $GLUE_DIR --device cuda --minilm <MiniLM folder> mpnet-minilm
The students are checkpoints under --work; every row holds the full training record.
"""
from __future__ import annotations

import argparse
import os
import shlex
import sys

from compressor.core.settings import lift_flat_keys
from compressor.distill import DistillConfig, distill
from compressor.core.models import size_on_disk
from compressor.core.io import read_json
from compressor.core.results import row, write_results
from compressor.engine.train import TrainConfig, finetune

# The teacher's own settings (lr 5e-5, batch 32, 3 epochs, dev every 500 steps), so that a
# student trained on labels alone is the teacher's fine-tuning recipe applied to the student.
PLAIN = dict(epochs=3, lr=5e-5, batch_size=32, max_length=128, warmup=0.0, weight_decay=0.0,
             eval_every=500)
LABELS = {"task": 1}                                # no teacher: the fine-tuning baseline
KD = {"kd": {"weight": 1, "temperature": 2}}        # soft targets (cached teacher logits)
KD_HIDDEN = {**KD, "hidden": {"weight": 1, "mapping": "uniform"}}

EXPERIMENTS = {
    # same width, fewer layers, initialised from teacher layers 1,3,5 (DistilBERT's pick)
    "3L": [("3L-labels", {"num_layers": 3}, LABELS, {}),
           ("3L-kd", {"num_layers": 3}, KD, {}),
           ("3L-kd-hidden", {"num_layers": 3}, KD_HIDDEN, {})],
    "2L": [("2L-labels", {"num_layers": 2}, LABELS, {}),
           ("2L-kd", {"num_layers": 2}, KD, {}),
           ("2L-kd-hidden", {"num_layers": 2}, KD_HIDDEN, {})],
    # TinyBERT's shape, randomly initialised: layer losses first, then the prediction layer
    "tinybert-4L312": [
        ("4L312-labels", {"kind": "config", "num_layers": 4, "hidden_size": 312, "heads": 12,
                          "ffn_size": 1200}, LABELS, dict(lr=1e-4, warmup=0.1)),
        ("4L312-tinybert", {"kind": "config", "num_layers": 4, "hidden_size": 312, "heads": 12,
                            "ffn_size": 1200},
         {"kd": 1, "hidden": 1, "embedding": 1, "attention": 1},
         dict(lr=1e-4, warmup=0.1, intermediate_epochs=2, intermediate_lr=2e-4))],
    # Tang et al.: a BiLSTM over the teacher's word pieces, trained on the teacher's logits
    "bilstm": [("bilstm-labels", {"kind": "bilstm", "embedding_dim": 64, "hidden_size": 128},
                LABELS, dict(lr=2e-3, epochs=5, batch_size=64, weight_decay=0.01)),
               ("bilstm-kd", {"kind": "bilstm", "embedding_dim": 64, "hidden_size": 128},
                {"logits_mse": 1}, dict(lr=2e-3, epochs=5, batch_size=64, weight_decay=0.01))],
}


def teacher_row(path: str, name: str) -> dict:
    record = read_json(os.path.join(path, "metrics.json"))
    return row(name, "sst2", "accuracy", record["score"], record["score"],
               record.get("parameters"), size_on_disk(path), extra={"checkpoint": path})


def student_row(name: str, record: dict) -> dict:
    return row(name, "sst2", "accuracy", record["score"], record["teacher_score"],
               record["parameters"], record["size_bytes"],
               extra={"student": record["student"], "losses": record["config"]["losses"],
                      "train_time_s": record["train_time_s"], "best_step": record["best_step"],
                      "record": record})


def run_students(args, experiment: str, teacher: str, runs) -> list:
    rows = [teacher_row(teacher, "teacher")]
    for name, student, losses, settings in runs:
        if args.runs and name not in args.runs.split(","):
            continue
        values, _, _ = lift_flat_keys(DistillConfig, {**PLAIN, **settings, "seed": args.seed,
                                                      "device": args.device, "precision": args.precision})
        config = DistillConfig(**values, student=student, losses=losses)   # training keys under train
        record = distill(teacher, os.path.join(args.work, name), config=config,
                         data_dir=args.data_dir, overwrite=True, train_limit=args.train_limit,
                         dev_limit=args.dev_limit)
        rows.append(student_row(name, record))
        print(f"{experiment} {name}: {record['score']:.2f} (teacher {record['teacher_score']:.2f}, "
              f"retention {100 * record['retention']:.1f}%, {record['parameters']:,} parameters, "
              f"{record['train_time_s']:.0f} s)", flush=True)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--teacher", default="runs/teachers/minilm-l6-sst2")
    parser.add_argument("--mpnet", default=None, help="MPNet base folder (experiment mpnet-teacher)")
    parser.add_argument("--minilm", default="minilm-l6", help="MiniLM base (experiment mpnet-minilm)")
    parser.add_argument("--data-dir", default=os.environ.get("GLUE_DIR"))
    parser.add_argument("--results", default="bench/results")
    parser.add_argument("--work", default="runs/distill-sst2")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--runs", default=None, help="comma-separated run names: only these")
    parser.add_argument("--train-limit", type=int, default=None, help="smoke tests only")
    parser.add_argument("--dev-limit", type=int, default=None, help="smoke tests only")
    parser.add_argument("experiments", nargs="+",
                        choices=list(EXPERIMENTS) + ["mpnet-teacher", "mpnet-minilm"])
    args = parser.parse_args(argv)
    command = "python -m bench.experiments.distill_sst2 " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    mpnet_teacher = os.path.join(args.work, "mpnet-sst2")
    for experiment in args.experiments:
        if experiment == "mpnet-teacher":
            config = TrainConfig(epochs=2, lr=2e-5, batch_size=32, max_length=128, warmup=0.06,
                                 weight_decay=0.01, eval_every=500, seed=args.seed,
                                 device=args.device, precision=args.precision)
            finetune(args.mpnet, "sst2", mpnet_teacher, data_dir=args.data_dir, config=config,
                     overwrite=True, train_limit=args.train_limit, dev_limit=args.dev_limit)
            rows = [teacher_row(mpnet_teacher, "mpnet-teacher")]
            print(f"mpnet-teacher: {rows[0]['value']:.2f}", flush=True)
        elif experiment == "mpnet-minilm":
            # PD: the pre-trained MiniLM-L6 as the student, the fine-tuned MPNet as the teacher;
            # the MiniLM fine-tuned on labels alone with the same settings and seed is --teacher
            rows = run_students(args, experiment, mpnet_teacher, [
                ("minilm-l6-kd", {"kind": "pretrained", "model": args.minilm}, KD, {})])
            baseline = teacher_row(args.teacher, "minilm-l6-labels")
            baseline["teacher_value"] = rows[0]["value"]
            baseline["retention"] = round(baseline["value"] / rows[0]["value"], 4)
            rows.append(baseline)
        else:
            rows = run_students(args, experiment, args.teacher, EXPERIMENTS[experiment])
        path = os.path.join(args.results, f"distill-{experiment}.json")
        write_results(path, rows, command=command,
                      settings={"plain": PLAIN, "seed": args.seed, "precision": args.precision})
        print(f"written: {path}", flush=True)


if __name__ == "__main__":
    main()
