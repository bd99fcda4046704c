"""The summary a recipe run ends with: what each stage made and what it scores."""
from __future__ import annotations

import os

from ..io import write_text


def write_report(out: str, manifest: dict) -> str:
    """Write ``OUT/report.md`` from the manifest and return its path."""
    task = manifest["task"]
    lines = [f"# {manifest['recipe']}: {task}", "",
             "| stage | model | parameters | size (MB) | metrics | score | vs teacher | time (s) |",
             "|---|---|---:|---:|---|---:|---:|---:|"]
    for s in manifest["stages"]:
        metrics = ", ".join(f"{k} {v:.4f}" for k, v in (s.get("metrics") or {}).items())
        retention = s.get("retention")
        lines.append("| {dir} | {kind} | {params} | {size} | {metrics} | {score} | {ret} | {time} |".format(
            dir=s["dir"], kind=s.get("kind") or "",
            params=f"{s['parameters']:,}" if s.get("parameters") else "",
            size=f"{s['size_bytes'] / 1e6:.1f}" if s.get("size_bytes") else "",
            metrics=metrics, score=f"{s['score']:.2f}" if s.get("score") is not None else "",
            ret=f"{100 * retention:.1f}%" if retention is not None else "",
            time=f"{s['wall_time_s']:.0f}" if s.get("wall_time_s") is not None else ""))
    lines += ["", "Scores are the task's GLUE metric(s) on the dev split, x100 (a task with two "
              "metrics scores their mean). Each stage's full record is `NN-<stage>/record.json`.", ""]
    path = os.path.join(out, "report.md")
    write_text(path, "\n".join(lines))
    return path
