"""Low-rank factorisation as a recipe stage (``lowrank``) and as one call (:func:`lowrank`).

Both load the model, keep an unfactorised copy as the teacher of distillation recovery,
score it, factorise its chosen Linears (:func:`compressor.lowrank.api.factorise_`), recover
(``RecoveryJob.recover``), score the result and save it as an ordinary checkpoint whose
``compressor.json`` shape records each factorised Linear's rank (``linear_rank``).
"""
from __future__ import annotations

import time
from typing import Optional

from compressor.core.device import resolve_device
from compressor.core.models import count_parameters, save_checkpoint
from compressor.core.registry import register_stage
from compressor.engine.job import RecoveryJob, load_with_teacher
from compressor.engine.train import set_seed
from compressor.lowrank.api import factorise_
from compressor.lowrank.config import LowRankConfig


def lowrank_loaded(model_dir: str, task, train_set, dev_set, config: LowRankConfig, out_dir: str,
                   meta: dict, teacher_dir: Optional[str] = None, desc: str = "lowrank") -> dict:
    """Factorise the checkpoint ``model_dir`` into ``out_dir``; return the stage record."""
    config.check()
    set_seed(config.seed)
    device = resolve_device(config.device)
    model, tokenizer, teacher, teacher_tok = load_with_teacher(model_dir, task, config, teacher_dir)
    job = RecoveryJob(model=model.to(device), tokenizer=tokenizer, train_set=train_set,
                      dev_set=dev_set, config=config, device=device, teacher=teacher,
                      teacher_tokenizer=teacher_tok)
    start = time.perf_counter()
    parameters_before = count_parameters(model)
    before = job.evaluate(desc="score dense")
    batches = list(job.batches()) if config.rule() == "sensitivity" else None
    record = factorise_(job.model, config, batches=batches)
    factorised = job.evaluate(desc="score factorised")
    recovery = job.recover(desc=desc)
    after = job.evaluate(desc="score recovered") if recovery else factorised
    job.model.to("cpu")
    size = save_checkpoint(job.model, job.tokenizer, out_dir, meta)
    return {"metrics": after["metrics"], "score": after["score"], "split": "dev",
            "parameters": count_parameters(job.model), "parameters_before": parameters_before,
            "score_before": before["score"], "metrics_before": before["metrics"],
            "score_factorised": factorised["score"], "lowrank": record, "recovery": recovery,
            "size_bytes": size, "train_time_s": round(time.perf_counter() - start, 2)}


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
