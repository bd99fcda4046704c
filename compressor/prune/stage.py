"""Pruning as a recipe stage (``prune``); the calls it makes are :mod:`compressor.prune.api`'s."""
from __future__ import annotations

from compressor.core.registry import register_stage
from compressor.prune.api import prune, prune_loaded  # noqa: F401  (also reached as compressor.prune.stage.prune)
from compressor.prune.configs import PruneConfig


@register_stage("prune", PruneConfig)
def prune_stage(ctx, config: PruneConfig) -> dict:
    """Remove heads, FFN neurons, layers, word pieces or single weights, then recover."""
    return prune_loaded(ctx.model_dir, ctx.task, ctx.split("train"), ctx.split("dev"), config,
                        ctx.out_dir, ctx.meta("prune", config.max_length),
                        teacher_dir=ctx.teacher_dir)
