"""One trial's candidate: the teacher (or the student the search compresses, ``--student``)
through the methods a trial chose, scored on held-out rows.

The steps are the methods' own public calls, in the order a recipe would run them: keep
``layers`` of its layers (prune, method layers), remove a share of every layer's heads
and FFN neurons by importance (prune, method structured, scope layer), cut the vocabulary (prune,
method vocab), drop tokens by fixed ratios (token_prune, by ratio), then either export and
quantise (quantize: dynamic, static, or ``mixed``: dynamic INT8 with the k units the held-out
score is most sensitive to kept FP32, ranked by quantize's mixed-precision sensitivity) or add
exits (early_exit: heads trained with the model fixed, the rule's threshold calibrated on the
held-out rows) and export them as segments (early_exit_export, INT8 unless FP32, the same k units
FP32 for mixed). While searching, the last pruning step recovers only as ``proxy_recover`` says
(none by default, or a short distillation from the teacher): the held-out score after the steps is
the cheap proxy the search ranks on; a candidate that may enter the front is rebuilt afterwards
with ``recover`` on its last pruning step (:mod:`compressor.auto.report`). Every step scores on the
held-out rows (given as the methods' evaluation rows), never on dev. The same steps as recipe
stages (the ``stages`` a build returns) rebuild the candidate.
"""
from __future__ import annotations

import copy
import os
import shutil
from typing import Callable, List, Optional

from compressor.core.errors import CompressorError


class ProxyTooLow(CompressorError):
    """The candidate's held-out score fell too far before it was even exported."""


class NotCombinable(CompressorError):
    """A point of the space whose methods do not combine (told to the study as pruned)."""


def check_combination(params: dict) -> None:
    """Raise NotCombinable for a point the methods cannot build together."""
    if params.get("exit", "none") == "none":
        return
    if params["layers"] < 2:
        raise NotCombinable("early exit needs two layers or more (an exit before the last)")
    if params["tokens"] < 1:
        raise NotCombinable("early exit and token pruning do not combine (the exit heads read every token)")
    if params["precision"] == "static":
        raise NotCombinable("early exit's segments are FP32 or dynamic INT8, not static INT8")


def recipe_stages(params: dict, teacher_layers: int, importance_rows: int, recover: Optional[dict] = None,
                  exit_epochs: float = 1.0) -> List[dict]:
    """The recipe stages (``{stage: settings}``) that build the candidate of ``params``. A mixed
    precision names how many units stay FP32 (``fp32_units: k``); the build resolves which.
    ``recover``: the recovery settings of the last pruning step (distillation from the recipe's
    teacher), None: no recovery (the search's proxy)."""
    stages: List[dict] = []
    none = {"mode": "none"}
    if params["layers"] < teacher_layers:
        stages.append({"prune": {"method": "layers", "rule": params["layer_rule"],
                                 "drop": teacher_layers - params["layers"],
                                 "importance_rows": importance_rows, "recover": none}})
    if params["heads"] or params["ffn"]:
        stages.append({"prune": {"method": "structured", "heads": params["heads"], "ffn": params["ffn"],
                                 "scope": "layer", "importance_rows": importance_rows,
                                 "recover": none}})
    if params["vocab"]:
        stages.append({"prune": {"method": "vocab", "recover": none}})
    if recover is not None:
        pruned = [s["prune"] for s in stages if "prune" in s]
        if pruned:
            pruned[-1].update(recover=copy.deepcopy(recover), teacher="recipe")
    if params["tokens"] < 1:
        stages.append({"token_prune": {"by": "ratio", "keep": params["tokens"], "learn": False,
                                       "hard_epochs": 0}})
    mixed = params["precision"] == "mixed"
    k = params.get("mixed_fp32", 1)
    if params.get("exit", "none") != "none":
        stages.append({"early_exit": {"rule": params["exit"], "train": {"epochs": exit_epochs},
                                      "calibrate": {"split": "holdout", "target": params["exit_target"]}}})
        stages.append({"early_exit_export": {"int8": params["precision"] != "fp32", "preset": "avx2",
                                             "parity": False, "fp32_units": k if mixed else []}})
        return stages
    stages.append({"export": {}})
    if mixed:
        stages.append({"quantize": {"method": "mixed", "fp32_units": k}})
    elif params["precision"] != "fp32":
        stages.append({"quantize": {"method": params["precision"]}})
    return stages


def recovers(stages: List[dict]) -> bool:
    """Whether the stages hold a pruning step that recovery would train."""
    return any("prune" in s for s in stages)


def build_candidate(source: str, task, train_set, held, params: dict, work: str, source_layers: int,
                    config, floor: Optional[float] = None, log: Callable = lambda msg: None,
                    recover: Optional[dict] = None, teacher: Optional[str] = None) -> dict:
    """Build the candidate of ``params`` from ``source`` (the teacher, or the student the search
    compresses; ``source_layers`` its depth) under ``work``; ``teacher`` (default ``source``) is
    what recovery distils from. ``recover``: the last pruning step's recovery (the proxy's short
    one while searching, the full one for the front's candidates), None: none. Return its figures:
    ``score`` (held-out), ``folder`` (the ONNX export), ``layers`` [(heads, ffn)], each layer's
    precision and the share of rows that compute it (``reach``, below 1 after an exit),
    ``prunes_tokens`` (the graph drops tokens between its layers: the latency table adds what
    that costs), ``size_bytes``, the score and seconds of each step, the resolved recipe ``stages``
    and ``recovery`` (the optimiser steps and seconds of the recovery, or None). A score below
    ``floor`` after the PyTorch steps raises ProxyTooLow."""
    import time

    from compressor.core.loaders import read_meta
    from compressor.core.metrics import task_score
    from compressor.core.models import checkpoint_meta, size_on_disk
    from compressor.core.settings import config_from_dict
    from compressor.export.onnx import export_onnx, score_onnx

    check_combination(params)
    os.makedirs(work, exist_ok=True)
    teacher = teacher or source
    current, scores, shape, checkpoint = source, [], read_meta(source).get("shape"), source
    fp32_units: List[str] = []
    reach, exits = None, None
    stages = recipe_stages(params, source_layers, config.importance_rows, recover, config.exit_epochs)
    recovery = None
    train = {"device": config.device, "max_length": config.max_length}

    def floor_check():
        if floor is not None and scores and scores[-1]["score"] < floor:
            raise ProxyTooLow(f"held-out score {scores[-1]['score']:.2f} after {scores[-1]['step']} "
                              f"is below {floor:.2f}: not exported")

    for i, stage in enumerate(stages):
        (name, settings), = stage.items()
        out = os.path.join(work, f"{i:02d}-{name}" + (f"-{settings['method']}" if "method" in settings else ""))
        shutil.rmtree(out, ignore_errors=True)   # a step a killed run left half-written
        meta = checkpoint_meta(task, config.max_length, f"auto:{name}", source=os.path.abspath(current))
        started = time.perf_counter()
        if name == "prune":
            from compressor.prune import PruneConfig, prune_loaded

            method = config_from_dict(PruneConfig, {**settings, "device": config.device,
                                                    "max_length": config.max_length}, what="prune")
            record = prune_loaded(current, task, train_set, held, method, out, meta, teacher_dir=teacher)
            shape = read_meta(out).get("shape") or shape
            if settings["recover"].get("mode", "distill") != "none":
                recovery = _recovery_of(record, time.perf_counter() - started)
        elif name == "token_prune":
            from compressor.tokens import TokenPruneConfig
            from compressor.tokens.api import token_prune_loaded

            method = config_from_dict(TokenPruneConfig, {**settings, "train": train}, what="token_prune")
            record = token_prune_loaded(current, task, train_set, held, method, out, meta)
        elif name == "early_exit":
            from compressor.exit import EarlyExitConfig, early_exit_loaded

            floor_check()
            method = config_from_dict(EarlyExitConfig, {
                **settings, "train": {**settings["train"], **train},
                "calibrate": {**settings["calibrate"], "rows": len(held)}}, what="early_exit")
            record = early_exit_loaded(current, task, train_set, held, method, out, meta, calibration_set=held)
        elif name == "early_exit_export":
            from compressor.exit import ExitExportConfig, export_segments, score_segments

            if settings["int8"] and isinstance(settings["fp32_units"], int):
                fp32_units, _ = _sensitive_units(checkpoint, settings["fp32_units"], held, train_set,
                                                 os.path.join(work, f"{i:02d}-sensitivity"), log)
                settings["fp32_units"] = fp32_units
            export_segments(current, out, config_from_dict(ExitExportConfig, settings, what="early_exit_export"),
                            examples=held.examples)
            record = score_segments(out, held)
            exits = {"histogram": record["exit_histogram"], "mean_exit_layer": record["mean_exit_layer"]}
        elif name == "export":
            floor_check()
            export_onnx(current, out, parity=False)
            record = {"score": task_score(task, score_onnx(out, held))}
        else:
            from compressor.quantize import quantize, quantize_config

            method = settings["method"]
            extra = {"calibration_samples": min(128, len(train_set))} if method == "static" else {}
            if method == "mixed":   # the k most sensitive units FP32, the rest dynamic INT8
                fp32_units, nodes = _sensitive_units(current, settings["fp32_units"], held, train_set,
                                                     os.path.join(work, f"{i:02d}-sensitivity"), log)
                stage["quantize"] = settings = {"method": "dynamic", "exclude": nodes}
                extra = {"exclude": nodes}
                method = "dynamic"
            record = quantize(current, out, quantize_config(method=method, **extra),
                              dev_set=held, train_set=train_set)
        scores.append({"step": os.path.basename(out), "score": round(float(record["score"]), 4),
                       "seconds": round(time.perf_counter() - started, 2)})
        log(f"  {scores[-1]['step']}: held-out score {scores[-1]['score']:.2f}")
        current = out
        if name in ("prune", "token_prune"):
            checkpoint = out
    layers = _layers(shape, params["layers"], source)
    int8 = "fp32" if params["precision"] == "fp32" else ("static" if params["precision"] == "static" else "dynamic")
    precisions = ["fp32" if f"layer.{i}" in fp32_units else int8 for i in range(len(layers))]
    rest = "fp32" if any(not u.startswith("layer.") for u in fp32_units) else int8
    if exits is not None:
        reach = _reach(exits["histogram"], len(layers))
    return {"folder": current, "score": scores[-1]["score"], "steps": scores, "layers": layers,
            "precisions": precisions, "overhead_precision": rest, "fp32_units": fp32_units,
            "reach": reach, "exits": exits, "prunes_tokens": any("token_prune" in s for s in stages),
            "size_bytes": size_on_disk(current), "stages": stages, "recovery": recovery}


def _recovery_of(record: dict, seconds: float) -> dict:
    """The optimiser steps and training seconds of a pruning step's recovery (found in its
    record, wherever its method keeps it), and the whole step's seconds."""
    found = []

    def walk(value):
        if isinstance(value, dict):
            if "best_step" in value and "steps" in value:
                found.append(value)
            for inner in value.values():
                walk(inner)
        elif isinstance(value, list):
            for inner in value:
                walk(inner)

    walk(record.get("pruning"))
    steps = sum(int(r["steps"]) for r in found)
    train = [r["train_time_s"] for r in found if r.get("train_time_s") is not None]
    return {"steps": steps, "train_time_s": round(sum(train), 2) if train else None,
            "step_seconds": round(seconds, 2)}


def _sensitive_units(folder: str, k: int, held, train_set, work: str, log) -> tuple:
    """The ``k`` units (layers, or the rest: embeddings, classifier) the held-out score is most
    sensitive to, as quantize's mixed-precision search ranks them (each unit INT8 alone against the
    FP32 graph, by divergence), and their ONNX nodes. ``folder``: a checkpoint or an FP32 export."""
    from compressor.quantize import quantize, quantize_config

    shutil.rmtree(work, ignore_errors=True)
    # the criterion never asks for more FP32 units: only the measured order is used
    record = quantize(folder, work, quantize_config(method="mixed", search_on="holdout", granularity="layer",
                                                    max_drop=100.0, min_agreement=0.0, confidence=0.0),
                      dev_set=held, train_set=train_set, holdout_set=held)
    ranked = record["search"]["sensitivity"]["units"][:k]
    shutil.rmtree(work, ignore_errors=True)
    names = [u["unit"] for u in ranked]
    log(f"  most sensitive on the held-out rows: {', '.join(names)} (kept FP32)")
    return names, [n for u in ranked for n in u["nodes"]]


def _reach(histogram: dict, layers: int) -> List[float]:
    """The share of rows that compute each layer, from how many rows left after each (1-based) layer."""
    total = sum(histogram.values()) or 1
    left = {int(layer): count for layer, count in histogram.items()}
    return [round(sum(c for layer, c in left.items() if layer >= i + 1) / total, 4) for i in range(layers)]


def _layers(shape: Optional[dict], kept: int, source: str) -> List[tuple]:
    """(heads, ffn) of each layer: the last pruned checkpoint's shape, else the source model's
    (the teacher's, or the student's) at ``kept`` layers."""
    if shape and shape.get("heads"):
        return [(int(h), int(f)) for h, f in zip(shape["heads"], shape["ffn"])]
    from compressor.core.arch import arch_of
    from compressor.core.models import load_config

    config = load_config(source)
    spec = arch_of(config)
    return [(spec.num_heads(config), spec.ffn_size(config))] * kept
