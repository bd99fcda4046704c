"""Pruning as a recipe stage (``prune``) and as one call (:func:`prune`).

Both load the model, keep an unpruned copy as the teacher of distillation recovery,
score it, run the configured method (which prunes and recovers), score the result and
save it as an ordinary checkpoint whose ``compressor.json`` records its per-layer shape.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from typing import Optional

from ..data import load_data
from ..device import resolve_device
from ..errors import CompressorError
from ..io import check_output_dir, versions
from ..models import (checkpoint_meta, count_parameters, load_for_task, resolve_model,
                      save_checkpoint, size_on_disk)
from ..recipe.registry import register_stage
from ..settings import config_from_dict
from ..train import set_seed
from .configs import PruneConfig, pruner_for
from .job import PruneJob, frozen_copy


def prune_loaded(model_dir: str, task, train_set, dev_set, config: PruneConfig, out_dir: str,
                 meta: dict, teacher_dir: Optional[str] = None, desc: str = "prune") -> dict:
    """Prune the checkpoint ``model_dir`` into ``out_dir``; return the stage record."""
    config.check()
    set_seed(config.seed)
    device = resolve_device(config.device)
    losses = config.recover.losses if config.recover.mode == "distill" else None
    attn = "eager" if losses is not None and losses.needs_attentions else None
    model, tokenizer = load_for_task(model_dir, task, attn_implementation=attn)
    teacher = teacher_tok = None
    if config.recover.mode == "distill":
        if config.teacher == "input":
            teacher, teacher_tok = frozen_copy(model), tokenizer
        else:
            source = teacher_dir if config.teacher == "recipe" else resolve_model(config.teacher)
            if not source:
                raise CompressorError("prune: teacher 'recipe' has no recipe teacher here; use "
                                      "teacher: input or a folder")
            teacher, teacher_tok = load_for_task(source, task, attn_implementation=attn)
    scratch = tempfile.mkdtemp(prefix=".prune-report-")
    try:
        job = PruneJob(model=model.to(device), tokenizer=tokenizer, train_set=train_set,
                       dev_set=dev_set, config=config, device=device, teacher=teacher,
                       teacher_tokenizer=teacher_tok, out_dir=scratch)
        start = time.perf_counter()
        parameters_before = count_parameters(model)
        before = job.evaluate(desc="score unpruned")
        record = pruner_for(config)(job, config)
        after = job.evaluate(desc="score pruned")
        job.model.to("cpu")
        files = [os.path.join(scratch, f) for f in sorted(os.listdir(scratch))]
        save_checkpoint(job.model, job.tokenizer, out_dir, meta, files=files)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {"metrics": after["metrics"], "score": after["score"], "split": "dev",
            "parameters": count_parameters(job.model), "parameters_before": parameters_before,
            "score_before": before["score"], "metrics_before": before["metrics"],
            "method": config.method, "pruning": record,
            "train_time_s": round(time.perf_counter() - start, 2)}


@register_stage("prune", PruneConfig)
def prune_stage(ctx, config: PruneConfig) -> dict:
    """Remove heads, FFN neurons, layers, word pieces or single weights, then recover."""
    return prune_loaded(ctx.model_dir, ctx.task, ctx.split("train"), ctx.split("dev"), config,
                        ctx.out_dir, ctx.meta("prune", config.max_length),
                        teacher_dir=ctx.teacher_dir, desc=f"prune {ctx.task.name}")


def prune(model: str, out: str, config=None, task: Optional[str] = None,
          data_dir: Optional[str] = None, train_limit: Optional[int] = None,
          dev_limit: Optional[int] = None, overwrite: bool = False, user_data=None,
          **settings) -> dict:
    """Prune the task checkpoint ``model`` into a new checkpoint ``out``.

    ``config`` is a :class:`PruneConfig` (or a mapping such as
    ``{"method": "structured", "heads": 0.5, "recover": {"mode": "distill"}}``);
    keyword ``settings`` are merged into a mapping. Writes ``out/metrics.json`` with
    the scores before and after, and returns that record.
    """
    from ..io import write_json
    from ..scoring import _task_for

    if config is None or isinstance(config, dict):
        config = config_from_dict(PruneConfig, {**(config or {}), **settings}, what="prune")
    path = resolve_model(model)
    task_spec, _ = _task_for(path, task)
    check_output_dir(out, overwrite)
    train_set = load_data(task_spec, "train", data_dir, train_limit, user_data)
    dev_set = load_data(task_spec, "dev", data_dir, dev_limit, user_data)
    start = time.perf_counter()
    meta = checkpoint_meta(task_spec, config.max_length, "prune")
    record = prune_loaded(path, task_spec, train_set, dev_set, config, out, meta)
    record.update({"task": task_spec.name, "model": model, "wall_time_s":
                   round(time.perf_counter() - start, 2), "size_bytes": size_on_disk(out),
                   "config": _plain(config), "versions": versions()})
    write_json(os.path.join(out, "metrics.json"), record)
    return record


def _plain(config) -> dict:
    from dataclasses import asdict

    return asdict(config)
