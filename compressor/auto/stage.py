"""Recipe stage ``auto``: the search from the stage's input model, whose pick is the stage's output.

The search's folder (study, trials, report) is ``search/`` inside the stage's folder; the stage's
folder itself is the pick's ONNX export, so ``bench`` or ``serve`` can follow it.

``student: recipe`` searches from the stage's input (the previous stage's output: a distilled
student, say) with the recipe's teacher as the reference; ``student: FOLDER`` from that folder
with the stage's input as the teacher; no ``student``: from the stage's input alone.
"""
from __future__ import annotations

import dataclasses
import os
import shutil

from compressor.auto.config import AutoConfig
from compressor.core.errors import CompressorError
from compressor.core.registry import TRAINABLE, register_stage

ONNX_KIND = "onnx"   # what the export stage produces: the pick is such a folder


@register_stage("auto", AutoConfig, accepts=(TRAINABLE,), produces=ONNX_KIND)
def auto_stage(ctx, config: AutoConfig) -> dict:
    """Search across the methods for the fastest model within max_drop of the input (an ONNX folder)."""
    from compressor.auto.study import run_auto

    search = os.path.join(ctx.out_dir, "search")
    teacher = ctx.model_dir
    if config.student == "recipe":   # the input is the student, the recipe's teacher the reference
        teacher, config = ctx.teacher_dir, dataclasses.replace(config, student=ctx.model_dir)
    report = run_auto(teacher, search, config, task=ctx.task.name, data_dir=ctx.data_dir,
                      train_limit=ctx.recipe.train_limit, dev_limit=ctx.recipe.dev_limit)
    pick = report.get("pick")
    if not pick:
        raise CompressorError(f"auto: no candidate within {config.max_drop} points of the input on the "
                              f"held-out rows; see {search}/report.md")
    for name in os.listdir(pick["folder"]):
        shutil.copy2(os.path.join(pick["folder"], name), os.path.join(ctx.out_dir, name))
    return {"metrics": pick["dev_metrics"], "score": pick["dev_score"], "split": "dev", "examples": pick["dev_examples"],
            "held_out_score": pick["score"], "latency_ms": pick["latency_ms"], "size_bytes": pick["size_bytes"],
            "trial": pick["trial"], "params": pick["params"], "front": report["front"],
            "table_error": report.get("table_error"), "report": os.path.join("search", "report.md")}
