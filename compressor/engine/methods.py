"""What every method that turns one task checkpoint into another shares as a Python call
(``prune``, ``share``, ``theseus``): the config from a mapping, the task, the data, the
output folder, and ``metrics.json`` beside the new checkpoint."""
from __future__ import annotations

import os
import time
from dataclasses import asdict
from typing import Callable, Optional


def on_checkpoint(model: str, out: str, config_cls: type, config, settings: dict, what: str,
                  run: Callable, task: Optional[str] = None, data_dir: Optional[str] = None,
                  train_limit: Optional[int] = None, dev_limit: Optional[int] = None,
                  overwrite: bool = False, user_data=None) -> dict:
    """Run ``run(path, task_spec, train_set, dev_set, config, out, meta) -> record`` on the task
    checkpoint ``model``, writing the new checkpoint to ``out`` (refused if ``out`` is a
    non-empty folder unless ``overwrite``); ``config`` is a ``config_cls`` or a mapping
    (``settings`` merged in). Writes ``out/metrics.json`` (the record, the task, the model,
    wall time, size, config, versions) and returns it."""
    from compressor.core.data import data_for, data_meta, holdout, load_data
    from compressor.core.io import check_output_dir, versions, write_json
    from compressor.core.models import checkpoint_meta, resolve_model, size_on_disk
    from compressor.engine.scoring import _task_for, chance_check
    from compressor.engine.train import TrackerLogs
    from compressor.core.settings import config_from_dict

    if config is None or isinstance(config, dict):
        config = config_from_dict(config_cls, {**(config or {}), **settings}, what=what)
    config.check()
    path = resolve_model(model)
    task_spec, _ = _task_for(path, task)
    check_output_dir(out, overwrite)
    # a model trained on the user's files: those its compressor.json records, unless given
    user_data = data_for(path, task_spec, user_data)
    # a model from a teacher fine-tuned with --holdout trains without the rows it held out
    train_set = holdout.training_rows(task_spec, data_dir, train_limit, user_data, path)
    dev_set = load_data(task_spec, "dev", data_dir, dev_limit, user_data)
    start = time.perf_counter()
    # the length the new model works at: the method's own, else its training run's
    max_length = getattr(config, "max_length", None) or config.train.max_length
    meta = checkpoint_meta(task_spec, max_length, what, **data_meta(user_data), **holdout.carried(path))
    with TrackerLogs() as logs:   # trackers' logs (report_to) end up in out/runs
        record = run(path, task_spec, train_set, dev_set, config, out, meta)
    record.update({"task": task_spec.name, "model": model,
                   "wall_time_s": round(time.perf_counter() - start, 2),
                   "size_bytes": size_on_disk(out), "config": asdict(config), "versions": versions()})
    chance_check(record, dev_set)   # a model at chance says so (stderr and metrics.json)
    write_json(os.path.join(out, "metrics.json"), record)
    logs.keep(out)
    return record


def model_to_model(method: Callable, label: str) -> Callable:
    """The ``run`` of :func:`on_checkpoint` for a method that takes a loaded model and returns
    a new one: ``method(net, tokenizer, train_set, dev_set, config, desc=...) -> (net, record)``;
    the checkpoint is loaded through the loader registry and the result saved to ``out``;
    keyword ``rows`` (early exit's ``calibration_set``, a recipe stage's ``recipe_teacher``) go
    on to ``method``."""

    def run(path, task_spec, train_set, dev_set, config, out, meta, **rows):
        from compressor.core.models import load_for_task, save_checkpoint

        net, tokenizer = load_for_task(path, task_spec)
        net, record = method(net, tokenizer, train_set, dev_set, config, desc=f"{label} {task_spec.name}",
                             **rows)
        save_checkpoint(net, tokenizer, out, meta)
        return record

    return run
