"""Low-rank factorisation as a recipe stage (``lowrank``) and as one call (:func:`lowrank`).

Both load the model, keep an unfactorised copy as the teacher of distillation recovery,
score it, factorise its chosen Linears (:func:`compressor.lowrank.api.factorise_`), recover
(``RecoveryJob.recover``), score the result and save it as an ordinary checkpoint whose
``compressor.json`` shape records each factorised Linear's rank (``linear_rank``).
"""
from __future__ import annotations

from typing import Optional

from compressor.core.registry import register_stage
from compressor.engine.job import change_and_recover
from compressor.lowrank.api import factorise_
from compressor.lowrank.config import LowRankConfig


def lowrank_loaded(model_dir: str, task, train_set, dev_set, config: LowRankConfig, out_dir: str,
                   meta: dict, teacher_dir: Optional[str] = None, desc: str = "lowrank") -> dict:
    """Factorise the checkpoint ``model_dir`` into ``out_dir``; return the stage record
    (``lowrank``: the factorisation's record, ``score_factorised``: before recovery)."""

    def change(job) -> dict:
        batches = list(job.batches()) if config.rule() == "sensitivity" else None
        return factorise_(job.model, config, batches=batches)

    return change_and_recover(model_dir, task, train_set, dev_set, config, out_dir, meta, change,
                              "lowrank", "factorised", teacher_dir=teacher_dir, desc=desc)


@register_stage("lowrank", LowRankConfig)
def lowrank_stage(ctx, config: LowRankConfig) -> dict:
    """Factorise Linear layers into two smaller ones (truncated SVD), then recover."""
    return lowrank_loaded(ctx.model_dir, ctx.task, ctx.split("train"), ctx.split("dev"), config,
                          ctx.out_dir, ctx.meta("lowrank", config.max_length),
                          teacher_dir=ctx.teacher_dir, desc=f"lowrank {ctx.task.name}")


def lowrank(model: str, out: str, config=None, task: Optional[str] = None,
            data_dir: Optional[str] = None, train_limit: Optional[int] = None,
            dev_limit: Optional[int] = None, overwrite: bool = False, user_data=None,
            **settings) -> dict:
    """Factorise the Linears of the task checkpoint ``model`` into a new checkpoint ``out``.

    ``config`` is a :class:`LowRankConfig` (or a mapping such as
    ``{"linears": "ffn", "energy": 0.9, "recover": {"mode": "distill"}}``); keyword
    ``settings`` are merged into a mapping. Writes ``out/metrics.json`` with the scores
    before and after, and returns that record.
    """
    from compressor.engine.methods import on_checkpoint

    return on_checkpoint(model, out, LowRankConfig, config, settings, "lowrank", lowrank_loaded,
                         task, data_dir, train_limit, dev_limit, overwrite, user_data)
