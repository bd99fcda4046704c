"""Early exit as recipe stages (``early_exit``, ``early_exit_export``) and as Python calls
(:func:`early_exit`, :func:`export_exits`; :func:`early_exit_loaded` on data already loaded)."""
from __future__ import annotations

import os
import time
from dataclasses import replace
from typing import Optional

from compressor.core.errors import CompressorError
from compressor.core.models import count_parameters
from compressor.core.registry import TRAINABLE, register_stage
from compressor.exit.configs import EarlyExitConfig, ExitExportConfig
from compressor.exit.model import KIND, EarlyExitModel
from compressor.exit.loader import KIND as ONNX_KIND


def run_early_exit(model, tokenizer, train_set, dev_set, config: EarlyExitConfig,
                   desc: str = "early exit", calibration_set=None, recipe_teacher: Optional[str] = None):
    """Wrap the task ``model`` with exits, train them, calibrate the rule on held-out training
    rows (``calibrate.split: holdout``: on ``calibration_set``, the rows the teacher was fine-tuned
    without); return the :class:`EarlyExitModel` and the record (dev scored once, at the end).
    ``recipe_teacher``: the recipe's teacher folder (``teacher: recipe``)."""
    from compressor.core.device import resolve_device
    from compressor.engine.train import set_seed
    from compressor.exit.train import calibrate_model, exit_report, hold_out, train_exits

    from compressor.exit.rules import check_rule

    config.check()
    regression = model.config.num_labels == 1
    config = replace(config, rule=config.task_rule(regression))   # auto: the rule the task can use
    check_rule(config.rule, 1, regression)   # before any training
    set_seed(config.train.seed)
    device = resolve_device(config.train.device)
    start = time.perf_counter()
    parameters_before = count_parameters(model)
    before = None
    if config.training == "joint":   # the model changes too: score it as it came
        from compressor.core.metrics import task_score
        from compressor.engine.scoring import score

        model.to(device)
        before = score(model, tokenizer, dev_set, config.train.max_length, 64, device,
                       desc=f"{desc}: score the model as given")
        before = {"metrics": before, "score": task_score(dev_set.task, before)}
    net = EarlyExitModel(model, config.layers, config.dropout, tolerance=config.tolerance,
                         pooling=config.pooling)
    if not net.exit_layers:
        raise CompressorError(f"early exit: a model of {net.total_layers} layer(s) has no layer before its "
                              "last to exit after")
    if config.calibrate.split == "holdout":
        if calibration_set is None or not len(calibration_set):
            raise CompressorError("calibrate.split: holdout needs the rows the teacher was fine-tuned without")
        fit_set = train_set
        held = calibration_set.sample(config.calibrate.rows, config.train.seed)
    else:
        fit_set, held = hold_out(train_set, config.calibrate.rows, config.train.seed)
    teacher_logits = None
    if config.training == "self_distill":   # soft targets from another model than this one
        teacher_logits = exit_teacher_logits(config, tokenizer, fit_set, device, recipe_teacher)
    training = train_exits(net, tokenizer, fit_set, held, config, desc=desc, teacher_logits=teacher_logits)
    calibration = calibrate_model(net, tokenizer, held, config, device, desc=f"{desc}: calibrate")
    report = exit_report(net, tokenizer, dev_set, config.train.max_length, device, desc=f"{desc}: dev")
    net.to("cpu").eval()
    return net, {
        "metrics": report["metrics"], "score": report["score"], "split": "dev",
        # the model as given, and its own classifier after training (the same unless joint)
        "metrics_before": (before or {}).get("metrics", report["metrics_without_exits"]),
        "score_before": (before or {}).get("score", report["score_without_exits"]),
        "metrics_without_exits": report["metrics_without_exits"],
        "score_without_exits": report["score_without_exits"],
        "parameters": count_parameters(net), "parameters_before": parameters_before,
        "exit_layers": net.exit_layers, "layers": net.total_layers, "rule": net.rule,
        "threshold": net.threshold, "calibration": calibration, "dev": report,
        "training": training, "train_rows": len(fit_set), "calibration_rows": len(held),
        "calibration_split": held.split,
        "train_time_s": round(time.perf_counter() - start, 2)}


def exit_teacher_logits(config: EarlyExitConfig, tokenizer, train_set, device,
                        recipe_teacher: Optional[str] = None):
    """The soft targets of ``self_distill`` when ``config.teacher`` is not the model itself: the
    teacher's logits for every training row, keyed by the model's token ids (None for
    ``teacher: input``, whose targets are the model's own logits)."""
    from compressor.engine.distiller import teacher_logits_cache
    from compressor.engine.teacher import load_teacher, resolve_teacher

    if resolve_teacher(config.teacher, None, recipe_teacher) is None:
        return None
    teacher, teacher_tokenizer, _ = load_teacher(config.teacher, None, train_set.task, recipe_teacher)
    cache = teacher_logits_cache(teacher.to(device), teacher_tokenizer, tokenizer, train_set.examples,
                                 config.train.max_length, device)
    teacher.to("cpu")
    return cache


def early_exit_loaded(model_dir: str, task, train_set, dev_set, config: EarlyExitConfig, out_dir: str,
                      meta: dict, calibration_set=None, teacher_dir: Optional[str] = None) -> dict:
    """Add exits to the task checkpoint ``model_dir`` on data already loaded, train and calibrate
    them (``calibrate.split: holdout``: on ``calibration_set``), and save the early-exit checkpoint
    ``out_dir`` (kind ``early-exit``); return the record. The stage and ``compressor auto`` call it."""
    from compressor.engine.methods import model_to_model

    run = model_to_model(run_early_exit, "early exit")
    return run(model_dir, task, train_set, dev_set, config, out_dir, meta, calibration_set=calibration_set,
               recipe_teacher=teacher_dir)


@register_stage("early_exit", EarlyExitConfig, accepts=(TRAINABLE,), produces=KIND)
def early_exit_stage(ctx, config: EarlyExitConfig) -> dict:
    """Exit heads after the layers, trained and calibrated (entropy, patience or max probability)."""
    held = ctx.split("holdout") if config.calibrate.split == "holdout" else None
    return early_exit_loaded(ctx.model_dir, ctx.task, ctx.split("train"), ctx.split("dev"), config, ctx.out_dir,
                             ctx.meta("early_exit", config.train.max_length), calibration_set=held,
                             teacher_dir=ctx.teacher_dir)


@register_stage("early_exit_export", ExitExportConfig, accepts=(KIND,), produces=ONNX_KIND)
def early_exit_export_stage(ctx, config: ExitExportConfig) -> dict:
    """The early-exit model as chained ONNX segments (fused, INT8 by default), checked and scored."""
    import shutil

    from compressor.exit.segments import export_segments

    dev = ctx.split("dev")
    shutil.rmtree(ctx.out_dir, ignore_errors=True)
    manifest = export_segments(ctx.model_dir, ctx.out_dir, config, examples=dev.examples,
                               overwrite=True)
    return {**score_segments(ctx.out_dir, dev, config.threads), "parity": manifest.get("parity"),
            "precision": manifest["precision"], "size_bytes": manifest["onnx_size_bytes"],
            "fp32_units": (manifest.get("quantization") or {}).get("fp32_units", []),
            "segments": [{k: s[k] for k in ("file", "layers")} |
                         {"fusions": (s.get("optimization") or {}).get("fusions")}
                         for s in manifest["segments"]]}


def score_segments(folder: str, dataset, threads: Optional[int] = None) -> dict:
    """Dev metrics of the chained segments one sentence at a time, and where rows exited."""
    import numpy as np

    from compressor.export.onnx import example_texts

    from compressor.core.metrics import compute_metrics, task_score
    from compressor.exit.runtime import SegmentChain

    chain = SegmentChain(folder, threads=threads)
    logits, where = chain.logits(example_texts(dataset.examples), batch_size=1, exits=True)
    preds = logits[:, 0] if chain.regression else logits.argmax(-1)
    metrics = compute_metrics(dataset.task, preds, [ex.label for ex in dataset.examples])
    return {"metrics": metrics, "score": task_score(dataset.task, metrics), "split": "dev",
            "examples": len(dataset), "engine": "onnxruntime (segments)",
            "exit_histogram": {str(layer): int((where == k).sum()) for k, layer in enumerate(chain.exits)},
            "mean_exit_layer": round(float(np.mean([chain.exits[k] for k in where])), 4) if len(where) else None}


def early_exit(model: str, out: str, config=None, task: Optional[str] = None,
               data_dir: Optional[str] = None, train_limit: Optional[int] = None,
               dev_limit: Optional[int] = None, overwrite: bool = False, user_data=None,
               **settings) -> dict:
    """Add exits to the task checkpoint ``model``, train and calibrate them, and write the
    early-exit checkpoint ``out`` (kind ``early-exit``) and ``out/metrics.json``.

    ``config`` is an :class:`EarlyExitConfig` or a mapping such as ``{"training": "self_distill",
    "rule": "patience", "calibrate": {"target": 0.99}}``; keyword ``settings`` are merged in.
    """
    from compressor.core.data import data_for, holdout
    from compressor.engine.methods import model_to_model, on_checkpoint

    exits = model_to_model(run_early_exit, "early exit")

    def run(path, task_spec, train_set, dev_set, config, out, meta):
        held = holdout.held_rows(path, task_spec, data_dir, data_for(path, task_spec, user_data),
                                 needs="calibrate.split: holdout") \
            if config.calibrate.split == "holdout" else None
        return exits(path, task_spec, train_set, dev_set, config, out, meta, calibration_set=held)

    return on_checkpoint(model, out, EarlyExitConfig, config, settings, "early_exit", run,
                         task, data_dir, train_limit, dev_limit, overwrite, user_data)


def export_exits(model: str, out: str, config=None, task: Optional[str] = None,
                 data_dir: Optional[str] = None, dev_limit: Optional[int] = None,
                 overwrite: bool = False, **settings) -> dict:
    """Export the early-exit checkpoint ``model`` as chained ONNX segments in ``out``, score them on
    dev (one sentence at a time) and return the manifest with that score."""
    from compressor.core.data import load_for_model
    from compressor.core.io import write_json
    from compressor.engine.scoring import _task_for
    from compressor.core.settings import config_from_dict
    from compressor.exit.segments import export_segments

    if config is None or isinstance(config, dict):
        config = config_from_dict(ExitExportConfig, {**(config or {}), **settings},
                                  what="early_exit_export")
    task_spec, _ = _task_for(model, task)
    dev = load_for_model(model, task_spec, "dev", data_dir, dev_limit)
    manifest = export_segments(model, out, config, task=task, examples=dev.examples,
                               overwrite=overwrite)
    manifest["dev"] = score_segments(out, dev, config.threads)
    write_json(os.path.join(out, "manifest.json"), manifest)
    return manifest
