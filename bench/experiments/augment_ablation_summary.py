"""Issue 32's augmentation ablation, from the records the GPU run brought back
(bench/experiments/augment_ablation_gpu.sh): per task, the teacher and each 6-layer student's dev
score (each scored once, at the end: nothing chosen on dev), its retention of the teacher, the
distillation's wall time and, for augmented runs, the rows it trained on.

    python -m bench.experiments.augment_ablation_summary bench/results/augment-ablation-h100
writes summary.json there and prints the table.
"""
from __future__ import annotations

import json
import os
import sys

VARIANTS = ("kd", "two-stage", "two-stage-augmented")
LABELS = {"kd": "soft targets, 6 epochs",
          "two-stage": "two stages (10 + 3 epochs)",
          "two-stage-augmented": "two stages on 10 augmented copies (4 + 3 epochs)"}


def _read(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def _stage(folder: str, kind: str) -> dict:
    for name in sorted(os.listdir(folder)):
        if name.endswith(f"-{kind}.json"):
            return _read(os.path.join(folder, name))
    return {}


def summarise(root: str) -> dict:
    tasks = {}
    for task in sorted(os.listdir(root)):
        folder = os.path.join(root, task)
        teacher_file = os.path.join(folder, f"teacher-{task}-metrics.json")
        if not os.path.isfile(teacher_file):
            continue
        teacher = _read(teacher_file)
        rows = {"teacher": {"score": round(teacher["score"], 2)}}
        for variant in VARIANTS:
            run = os.path.join(folder, variant)
            if not os.path.isdir(run):
                continue
            distill, evaluate = _stage(run, "distill"), _stage(run, "evaluate")
            augment = _stage(run, "augment")
            score = evaluate.get("score", distill.get("score"))
            rows[variant] = {"what": LABELS[variant], "score": round(score, 2),
                             "retention": round(100 * score / teacher["score"], 1),
                             "distill_wall_time_s": distill.get("wall_time_s"),
                             **({"augmented_rows": augment["rows"], "source_rows": augment["source_rows"],
                                 "replaced_share": augment["replaced_share"]} if augment else {})}
        tasks[task] = rows
    return tasks


def table(tasks: dict) -> str:
    lines = ["| task | teacher | " + " | ".join(VARIANTS) + " |", "|---|---|" + "---|" * len(VARIANTS)]
    for task, rows in tasks.items():
        cells = [f"{rows[v]['score']:.2f} ({rows[v]['retention']:.1f}%)" if v in rows else "-" for v in VARIANTS]
        lines.append(f"| {task} | {rows['teacher']['score']:.2f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> None:
    root = (argv or sys.argv[1:])[0]
    tasks = summarise(root)
    doc = {"command": "python -m bench.experiments.augment_ablation_summary " + root, "tasks": tasks}
    with open(os.path.join(root, "summary.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(table(tasks))


if __name__ == "__main__":
    main()
