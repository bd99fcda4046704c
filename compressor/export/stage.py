"""Recipe stage ``export``: the current model as an ONNX folder, checked and scored."""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from typing import Optional

from compressor.core.registry import TRAINABLE, register_stage
from compressor.core.settings import at_least_one, setting

ONNX_KIND = "onnx"
# PyTorch model kinds of other methods that export as one graph: token pruning's (compressor.tokens),
# whose graph drops tokens between layers at run time
ONE_GRAPH_KINDS = ("token-prune",)
EXPORTERS = ("auto", "optimum", "torch")


@dataclass
class ExportConfig:
    opset: int = 17
    optimize: bool = True          # onnxruntime transformer fusions (Attention, SkipLayerNorm, ...)
    parity: bool = True            # compare with the PyTorch model on the dev split
    exporter: str = setting("auto", choices=EXPORTERS)   # auto (optimum, else torch.onnx), optimum, torch
    threads: Optional[int] = setting(None, check=at_least_one)  # onnxruntime threads for scoring


@register_stage("export", ExportConfig, accepts=(TRAINABLE, ONNX_KIND) + ONE_GRAPH_KINDS, produces=ONNX_KIND)
def export_stage(ctx, config: ExportConfig) -> dict:
    """Export the current model to ONNX (model.onnx, tokenizer, manifest, parity.json) and score it."""
    from compressor.core.metrics import task_score
    from compressor.core.models import count_parameters, load_for_task

    from compressor.export.onnx import export_onnx, is_export, read_manifest, score_onnx

    dev = ctx.split("dev")
    if is_export(ctx.model_dir):
        # already ONNX (a quantised graph, say): carry it over unchanged, then score it
        shutil.rmtree(ctx.out_dir)
        shutil.copytree(ctx.model_dir, ctx.out_dir)
        manifest = read_manifest(ctx.out_dir)
        parameters = None
    else:
        manifest = export_onnx(ctx.model_dir, ctx.out_dir, opset=config.opset, optimize=config.optimize,
                               parity=config.parity, exporter=config.exporter, examples=dev.examples)
        parameters = count_parameters(load_for_task(ctx.model_dir, ctx.task)[0])
    metrics = score_onnx(ctx.out_dir, dev, threads=config.threads)
    record = {"metrics": metrics, "score": task_score(ctx.task, metrics), "split": "dev",
              "examples": len(dev), "engine": "onnxruntime", "exporter": manifest.get("exporter"),
              "fusions": (manifest.get("optimization") or {}).get("fusions"),
              "parity": manifest.get("parity"), "precision": manifest.get("precision"),
              "size_bytes": os.path.getsize(os.path.join(ctx.out_dir, manifest.get("model_file", "model.onnx")))}
    if parameters is not None:
        record["parameters"] = parameters
    return record
