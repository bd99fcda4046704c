"""The GLUE-5 teachers' figures (``mpnet_glue5_teachers.sh``) as a results file: each task's
dev metrics and score (``compressor.core.metrics.task_score``: the mean of a task's metrics, as
the GLUE leaderboard averages F1/accuracy and Pearson/Spearman) and the GLUE-5 score, the
mean over SST-2, MRPC, STS-B, RTE and CoLA.

    python -m bench.experiments.glue5_summary RUNS_DIR OUT_JSON "COMMAND" [SUFFIX]

With SUFFIX (e.g. ``-6L``) the models are ``{task}SUFFIX-metrics.json``, students of the
teachers in ``{task}-metrics.json`` beside them, and each row carries its retention.
"""
import json
import os
import sys

TASKS = ("sst2", "mrpc", "stsb", "rte", "cola")


def main(runs: str, out: str, command: str, suffix: str = "") -> dict:
    from compressor.core.results import row, write_results

    rows, scores, teachers = [], {}, {}
    for task in TASKS:
        path = os.path.join(runs, f"{task}{suffix}-metrics.json")
        if not os.path.exists(path):
            continue
        record = json.load(open(path))
        scores[task] = record["score"]
        teacher = None
        if suffix:
            teacher = round(json.load(open(os.path.join(runs, f"{task}-metrics.json")))["score"], 2)
            teachers[task] = teacher
        rows.append(row(f"mpnet-base-{task}{suffix}", task, "+".join(sorted(record["metrics"])),
                        round(record["score"], 2), teacher, parameters=record.get("parameters"),
                        size_bytes=record.get("size_bytes"),
                        extra={"metrics": {k: round(100 * v, 2) for k, v in record["metrics"].items()},
                               "epochs": record.get("config", {}).get("epochs"),
                               "selection": "none (last weights, one dev evaluation)",
                               "wall_time_s": record.get("wall_time_s")}))
    complete = len(scores) == len(TASKS)
    glue5 = round(sum(scores.values()) / len(scores), 2) if complete else None
    extra = {}
    if suffix and complete:
        teacher5 = sum(teachers.values()) / len(teachers)
        extra = {"teacher_glue5_score": round(teacher5, 2), "glue5_retention": round(glue5 / teacher5, 4)}
    return write_results(out, rows, command=command,
                         fingerprint_info={"machine": "one NVIDIA GPU (device tool), bf16 autocast"},
                         what=(f"students ({suffix.strip('-')}) of the MPNet-base GLUE-5 teachers" if suffix
                               else "MPNet-base fine-tuned on five GLUE tasks, the headline's teachers"),
                         glue5_score=glue5, tasks_done=sorted(scores), **extra)


if __name__ == "__main__":
    main(*sys.argv[1:5])
