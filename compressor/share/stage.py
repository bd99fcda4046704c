"""Sharing as a recipe stage (``share``) and as one call (:func:`share`).

Both load the model, keep an unshared copy as the teacher of distillation recovery, score
it, share its layers and/or factorise its word embedding, recover (pruning's
``RecoveryJob.recover``), score the result and save it as an ordinary checkpoint: each shared
tensor once in ``model.safetensors``, the ties and the embedding rank in ``compressor.json``.
"""
from __future__ import annotations

from typing import Optional

import torch

from compressor.core.registry import register_stage
from compressor.engine.job import change_and_recover
from compressor.share.configs import ShareConfig
from compressor.core.sharing import factorise_embedding, share_layers


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
    return change_and_recover(model_dir, task, train_set, dev_set, config, out_dir, meta,
                              lambda job: apply_sharing(job.model, config), "sharing", "shared",
                              teacher_dir=teacher_dir, desc=desc)


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
    from compressor.engine.methods import on_checkpoint

    return on_checkpoint(model, out, ShareConfig, config, settings, "share", share_loaded,
                         task, data_dir, train_limit, dev_limit, overwrite, user_data)
