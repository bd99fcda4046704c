"""One trial's candidate: the teacher through the methods a trial chose, scored on held-out rows.

The steps are the methods' own calls, in the order a recipe would run them: keep ``layers`` of
the teacher's layers (prune, method layers), remove a share of every layer's heads and FFN
neurons by importance (prune, method structured, scope layer), cut the vocabulary (prune, method
vocab), drop tokens by fixed ratios (token_prune, by ratio), export, and quantise (quantize,
dynamic or static). None of them recovers: the held-out score after them is the cheap proxy the
search ranks on. Every step scores on the held-out rows (given as the methods' evaluation rows),
never on dev. The same steps as recipe stages (:func:`recipe_stages`) rebuild the pick.
"""
from __future__ import annotations

import os
import shutil
from typing import Callable, List, Optional

from compressor.core.errors import CompressorError


class ProxyTooLow(CompressorError):
    """The candidate's held-out score fell too far before it was even exported."""


def recipe_stages(params: dict, teacher_layers: int, importance_rows: int) -> List[dict]:
    """The recipe stages (``{stage: settings}``) that build the candidate of ``params``."""
    stages: List[dict] = []
    if params["layers"] < teacher_layers:
        stages.append({"prune": {"method": "layers", "rule": params["layer_rule"],
                                 "drop": teacher_layers - params["layers"],
                                 "importance_rows": importance_rows, "recover": {"mode": "none"}}})
    if params["heads"] or params["ffn"]:
        stages.append({"prune": {"method": "structured", "heads": params["heads"], "ffn": params["ffn"],
                                 "scope": "layer", "importance_rows": importance_rows,
                                 "recover": {"mode": "none"}}})
    if params["vocab"]:
        stages.append({"prune": {"method": "vocab", "recover": {"mode": "none"}}})
    if params["tokens"] < 1:
        stages.append({"token_prune": {"by": "ratio", "keep": params["tokens"], "learn": False,
                                       "hard_epochs": 0}})
    stages.append({"export": {}})
    if params["precision"] != "fp32":
        stages.append({"quantize": {"method": params["precision"]}})
    return stages


def build_candidate(teacher: str, task, train_set, held, params: dict, work: str, teacher_layers: int,
                    config, floor: Optional[float] = None, log: Callable = lambda msg: None) -> dict:
    """Build the candidate of ``params`` from ``teacher`` under ``work``; return its figures:
    ``score`` (held-out), ``folder`` (the ONNX export), ``layers`` [(heads, ffn)], ``size_bytes``,
    the score after each step. A score below ``floor`` after the PyTorch steps raises ProxyTooLow."""
    from compressor.core.loaders import read_meta
    from compressor.core.metrics import task_score
    from compressor.core.models import checkpoint_meta, size_on_disk
    from compressor.core.settings import config_from_dict
    from compressor.export.onnx import export_onnx, score_onnx

    os.makedirs(work, exist_ok=True)
    current, scores, shape = teacher, [], None
    stages = recipe_stages(params, teacher_layers, config.importance_rows)
    for i, stage in enumerate(stages):
        (name, settings), = stage.items()
        out = os.path.join(work, f"{i:02d}-{name}" + (f"-{settings['method']}" if "method" in settings else ""))
        shutil.rmtree(out, ignore_errors=True)   # a step a killed run left half-written
        meta = checkpoint_meta(task, config.max_length, f"auto:{name}", source=os.path.abspath(current))
        if name == "prune":
            from compressor.prune import PruneConfig, prune_loaded

            method = config_from_dict(PruneConfig, {**settings, "device": config.device,
                                                    "max_length": config.max_length}, what="prune")
            record = prune_loaded(current, task, train_set, held, method, out, meta)
            shape = read_meta(out).get("shape") or shape
        elif name == "token_prune":
            from compressor.tokens import TokenPruneConfig
            from compressor.tokens.api import token_prune_loaded

            method = config_from_dict(TokenPruneConfig, {**settings, "train": {
                "device": config.device, "max_length": config.max_length}}, what="token_prune")
            record = token_prune_loaded(current, task, train_set, held, method, out, meta)
        elif name == "export":
            if floor is not None and scores and scores[-1]["score"] < floor:
                raise ProxyTooLow(f"held-out score {scores[-1]['score']:.2f} after {scores[-1]['step']} "
                                  f"is below {floor:.2f}: not exported")
            export_onnx(current, out, parity=False)
            record = {"score": task_score(task, score_onnx(out, held))}
        else:
            from compressor.quantize import quantize, quantize_config

            extra = {"calibration_samples": min(128, len(train_set))} if settings["method"] == "static" else {}
            record = quantize(current, out, quantize_config(method=settings["method"], **extra),
                              dev_set=held, train_set=train_set)
        scores.append({"step": os.path.basename(out), "score": round(float(record["score"]), 4)})
        log(f"  {scores[-1]['step']}: held-out score {scores[-1]['score']:.2f}")
        current = out
    layers = _layers(shape, params["layers"], teacher)
    return {"folder": current, "score": scores[-1]["score"], "steps": scores, "layers": layers,
            "size_bytes": size_on_disk(current), "stages": stages}


def _layers(shape: Optional[dict], kept: int, teacher: str) -> List[tuple]:
    """(heads, ffn) of each layer: the last pruned checkpoint's shape, else the teacher's at ``kept`` layers."""
    if shape and shape.get("heads"):
        return [(int(h), int(f)) for h, f in zip(shape["heads"], shape["ffn"])]
    from compressor.core.arch import arch_of
    from compressor.core.models import load_config

    config = load_config(teacher)
    spec = arch_of(config)
    return [(spec.num_heads(config), spec.ffn_size(config))] * kept
