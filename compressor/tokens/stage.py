"""Token pruning as a recipe stage (``token_prune``) and as one call (:func:`token_prune`).

The stage takes a trainable checkpoint (after distillation and pruning) and writes a folder of
kind ``token-prune``; ``export`` turns it into one ONNX graph that drops tokens at run time, and
``quantize`` makes that INT8.
"""
from __future__ import annotations

from typing import Optional

from compressor.core.registry import TRAINABLE, register_stage
from compressor.tokens.api import token_prune_loaded
from compressor.tokens.config import TokenPruneConfig
from compressor.tokens.model import KIND


@register_stage("token_prune", TokenPruneConfig, accepts=(TRAINABLE,), produces=KIND)
def token_prune_stage(ctx, config: TokenPruneConfig) -> dict:
    """Drop tokens between layers by attention importance (LTP thresholds or fixed keep ratios)."""
    held = ctx.split("holdout") if config.search_on == "holdout" else None
    return token_prune_loaded(ctx.model_dir, ctx.task, ctx.split("train"), ctx.split("dev"), config,
                              ctx.out_dir, ctx.meta("token_prune", config.max_length),
                              teacher_dir=ctx.teacher_dir, desc=f"token prune {ctx.task.name}",
                              holdout_set=held)


def token_prune(model: str, out: str, config=None, task: Optional[str] = None,
                data_dir: Optional[str] = None, train_limit: Optional[int] = None,
                dev_limit: Optional[int] = None, overwrite: bool = False, user_data=None,
                **settings) -> dict:
    """Make the task checkpoint ``model`` drop tokens between layers, into a new folder ``out``.

    ``config`` is a :class:`TokenPruneConfig` (or a mapping such as ``{"by": "ratio",
    "keep": 0.7, "hard_epochs": 0}``); keyword ``settings`` are merged into a mapping. With
    ``search_on: holdout`` the values are chosen on the rows the teacher of ``model``'s line was
    fine-tuned without (its ``compressor.json`` records them). Writes
    ``out/metrics.json`` with the scores before and after and the kept tokens per layer, and
    returns that record.
    """
    from compressor.engine.methods import on_checkpoint

    def run(path, task_spec, train_set, dev_set, config, out_dir, meta):
        held = None
        if config.search_on == "holdout":   # the rows the teacher (of this model's line) was fine-tuned without
            from compressor.core.data import data_for, holdout

            held = holdout.held_rows(path, task_spec, data_dir, data_for(path, task_spec, user_data),
                                     needs="token_prune search_on: holdout")
        return token_prune_loaded(path, task_spec, train_set, dev_set, config, out_dir, meta,
                                  holdout_set=held)

    return on_checkpoint(model, out, TokenPruneConfig, config, settings, "token_prune",
                         run, task, data_dir, train_limit, dev_limit, overwrite, user_data)
