"""The figures of ``bench/experiments/prune_minilm_gpu.sh`` as a results file.

    python -m bench.experiments.prune_minilm_summary bench/results/prune-minilm-sst2-h100 \\
        bench/results/prune-minilm-sst2-h100.json

Reads the folder's ``teacher-metrics.json``, ``pruned-metrics.json`` and ``commands.txt``
(copied back from the GPU machine) and writes one row for the teacher and one per pruning
step, before and after its recovery. Scores after recovery are the best of the recovery's
dev evaluations (every 500 steps): a best-of-dev figure.
"""
import json
import os
import sys

WHAT = ("MiniLM-L6 SST-2 teacher; half of all attention heads (gradient importance) and half of "
        "all FFN neurons (Taylor importance) removed in two steps, each recovered by 2 epochs of "
        "distillation (soft targets T=2 + hidden states) from the unpruned teacher; dev accuracy "
        "before and after each recovery. After-recovery figures are best-of-dev (the checkpoint "
        "kept is the best of the recovery's dev evaluations)")


def main(folder: str, out: str) -> dict:
    from compressor.core.results import row, write_results

    teacher = json.load(open(os.path.join(folder, "teacher-metrics.json")))
    pruned = json.load(open(os.path.join(folder, "pruned-metrics.json")))
    t_score = round(100 * teacher["metrics"]["accuracy"], 2)
    rows = [row("minilm-l6-teacher", "sst2", "accuracy", t_score, parameters=teacher["parameters"],
                size_bytes=None, device="cuda",
                extra={"best_step": teacher["best_step"], "wall_time_s": teacher["wall_time_s"],
                       "selection": "best of dev evaluations every 500 steps"})]
    record = pruned["pruning"]
    for step in record["steps"]:
        share = round(100 * step["heads_removed"])
        common = {"heads_removed": round(step["heads_removed"], 4),
                  "ffn_removed": round(step["ffn_removed"], 4),
                  "heads_after": step["heads"], "ffn_after": step["ffn"], "step": step["step"]}
        rows.append(row(f"pruned-{share}-before-recovery", "sst2", "accuracy",
                        round(step["pruned"]["score"], 2), t_score, parameters=None, size_bytes=None,
                        device="cuda", extra={**common, "recovered": False}))
        if "recovered" in step:
            last = step is record["steps"][-1]
            rows.append(row(f"pruned-{share}-recovered" if not last else "minilm-l6-heads50-ffn50-distilled",
                            "sst2", "accuracy", round(step["recovered"]["score"], 2), t_score,
                            parameters=pruned["parameters"] if last else None, size_bytes=None,
                            device="cuda", extra={**common, "recovered": True,
                                                  "best_step": step["recovered"]["best_step"],
                                                  "steps": step["recovered"]["steps"],
                                                  "selection": "best-of-dev"}))
    commands = open(os.path.join(folder, "commands.txt")).read().splitlines()
    info = {"versions": pruned["versions"]}
    return write_results(out, rows, command=" && ".join(commands), fingerprint_info=info, what=WHAT,
                         parameters_before=pruned["parameters_before"],
                         prune_wall_time_s=pruned["wall_time_s"])


if __name__ == "__main__":
    main(*sys.argv[1:3])
