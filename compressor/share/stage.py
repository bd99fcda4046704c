"""Sharing as a recipe stage (``share``) and as one call (:func:`share`).

Both load the model, keep an unshared copy as the teacher of distillation recovery, score
it, share its layers and/or factorise its word embedding, recover (pruning's
``PruneJob.recover``), score the result and save it as an ordinary checkpoint: each shared
tensor once in ``model.safetensors``, the ties and the embedding rank in ``compressor.json``.
"""
from __future__ import annotations

import os
import time
from dataclasses import asdict
from typing import Optional

import torch

from ..data import load_data
from ..device import resolve_device
from ..errors import CompressorError
from ..io import check_output_dir, versions, write_json
from ..models import (checkpoint_meta, count_parameters, load_for_task, resolve_model,
                      save_checkpoint, size_on_disk)
from ..prune.job import PruneJob, frozen_copy
from ..recipe.registry import register_stage
from ..settings import config_from_dict
from ..train import set_seed
from .configs import ShareConfig
from .layers import factorise_embedding, share_layers


def apply_sharing(model: torch.nn.Module, config: ShareConfig) -> dict:
    """Share ``model``'s layers and factorise its embedding as ``config`` says, in place (no training)."""
    record = {}
    if config.share != "none":
        record["layers"] = share_layers(model, config.share, config.group, config.init, config.index,
                                       config.adapter_rank)
    if config.embedding_rank:
        record["embedding"] = factorise_embedding(model, config.embedding_rank)
    return record


def share_loaded(model_dir: str, task, train_set, dev_set, config: ShareConfig, out_dir: str,
                 meta: dict, teacher_dir: Optional[str] = None, desc: str = "share") -> dict:
    """Share the checkpoint ``model_dir`` into ``out_dir``; return the stage record."""
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
                raise CompressorError("share: teacher 'recipe' has no recipe teacher here; use "
                                      "teacher: input or a folder")
            teacher, teacher_tok = load_for_task(source, task, attn_implementation=attn)
    job = PruneJob(model=model.to(device), tokenizer=tokenizer, train_set=train_set,
                   dev_set=dev_set, config=config, device=device, teacher=teacher,
                   teacher_tokenizer=teacher_tok)
    start = time.perf_counter()
    parameters_before = count_parameters(model)
    before = job.evaluate(desc="score unshared")
    record = apply_sharing(job.model, config)
    shared = job.evaluate(desc="score shared")
    recovery = job.recover(desc=desc)
    after = job.evaluate(desc="score recovered") if recovery else shared
    job.model.to("cpu")
    size = save_checkpoint(job.model, job.tokenizer, out_dir, meta)
    return {"metrics": after["metrics"], "score": after["score"], "split": "dev",
            "parameters": count_parameters(job.model), "parameters_before": parameters_before,
            "score_before": before["score"], "metrics_before": before["metrics"],
            "score_shared": shared["score"], "sharing": record, "recovery": recovery,
            "size_bytes": size, "train_time_s": round(time.perf_counter() - start, 2)}


@register_stage("share", ShareConfig)
def share_stage(ctx, config: ShareConfig) -> dict:
    """Share layer weights across layers (ALBERT) and/or factorise the word embedding, then recover."""
    return share_loaded(ctx.model_dir, ctx.task, ctx.split("train"), ctx.split("dev"), config,
                        ctx.out_dir, ctx.meta("share", config.max_length),
                        teacher_dir=ctx.teacher_dir, desc=f"share {ctx.task.name}")


def share(model: str, out: str, config=None, task: Optional[str] = None,
          data_dir: Optional[str] = None, train_limit: Optional[int] = None,
          dev_limit: Optional[int] = None, overwrite: bool = False, user_data=None,
          **settings) -> dict:
    """Share the layers of the task checkpoint ``model`` into a new checkpoint ``out``.

    ``config`` is a :class:`ShareConfig` (or a mapping such as
    ``{"share": "all", "group": 2, "init": "mean", "recover": {"mode": "distill"}}``);
    keyword ``settings`` are merged into a mapping. Writes ``out/metrics.json`` with
    the scores before and after, and returns that record.
    """
    from ..scoring import _task_for

    if config is None or isinstance(config, dict):
        config = config_from_dict(ShareConfig, {**(config or {}), **settings}, what="share")
    path = resolve_model(model)
    task_spec, _ = _task_for(path, task)
    check_output_dir(out, overwrite)
    train_set = load_data(task_spec, "train", data_dir, train_limit, user_data)
    dev_set = load_data(task_spec, "dev", data_dir, dev_limit, user_data)
    start = time.perf_counter()
    meta = checkpoint_meta(task_spec, config.max_length, "share")
    record = share_loaded(path, task_spec, train_set, dev_set, config, out, meta)
    record.update({"task": task_spec.name, "model": model, "wall_time_s":
                   round(time.perf_counter() - start, 2), "size_bytes": size_on_disk(out),
                   "config": asdict(config), "versions": versions()})
    write_json(os.path.join(out, "metrics.json"), record)
    return record
