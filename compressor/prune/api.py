"""Pruning's public calls: :func:`prune` (a task checkpoint folder to a pruned one) and
:func:`prune_loaded` (the same on data already loaded: the recipe stage and ``compressor auto``
call it).

Both load the model, keep an unpruned copy as the teacher of distillation recovery, score it,
run the configured method (which prunes and recovers), score the result and save it as an
ordinary checkpoint whose ``compressor.json`` records its per-layer shape.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from typing import Optional

from compressor.core.device import resolve_device
from compressor.core.models import count_parameters, save_checkpoint
from compressor.engine.job import RecoveryJob, load_with_teacher
from compressor.engine.train import set_seed
from compressor.prune.configs import PruneConfig, pruner_for


def prune_loaded(model_dir: str, task, train_set, dev_set, config: PruneConfig, out_dir: str,
                 meta: dict, teacher_dir: Optional[str] = None) -> dict:
    """Prune the checkpoint ``model_dir`` into ``out_dir``; return the stage record."""
    config.check()
    set_seed(config.seed)
    device = resolve_device(config.device)
    model, tokenizer, teacher, teacher_tok, teacher_path = load_with_teacher(model_dir, task, config, teacher_dir)
    scratch = tempfile.mkdtemp(prefix=".prune-report-")
    try:
        job = RecoveryJob(model=model.to(device), tokenizer=tokenizer, train_set=train_set,
                       dev_set=dev_set, config=config, device=device, teacher=teacher,
                       teacher_tokenizer=teacher_tok, teacher_path=teacher_path, out_dir=scratch)
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
    from compressor.engine.methods import on_checkpoint

    return on_checkpoint(model, out, PruneConfig, config, settings, "prune", prune_loaded,
                         task, data_dir, train_limit, dev_limit, overwrite, user_data)
