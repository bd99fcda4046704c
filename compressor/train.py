"""The training loop every method shares, and teacher fine-tuning built on it.

``fit`` takes a loss function of ``(model, batch)``: fine-tuning uses the task
loss; distillation passes one that also runs the teacher. Everything else
(schedule, precision, accumulation, best-checkpoint choice, progress, seeding)
is the same for both.
"""
from __future__ import annotations

import math
import os
import random
import time
from dataclasses import asdict, dataclass, replace
from typing import Callable, Optional

import numpy as np
import torch

from .batches import encode, iter_batches, to_device
from .data import UserData, get_task, load_data
from .device import PRECISIONS, autocast, check_precision, resolve_device
from .errors import CompressorError
from .settings import check_fields, not_negative, positive, setting
from .settings import device as device_setting
from .scoring import score
from .io import check_output_dir, versions
from .metrics import task_score
from .models import checkpoint_meta, count_parameters, load_for_task, save_checkpoint
from .progress import progress


@dataclass
class TrainConfig:
    """Settings of one training run; the names are the recipe keys and CLI options."""

    epochs: float = setting(3.0, check=lambda v, name, c: _epochs(v, c))
    lr: float = setting(5e-5, check=positive)
    batch_size: int = setting(32, check=positive)
    max_length: int = setting(128, check=positive)
    seed: int = 42
    warmup: float = setting(0.1, check=lambda v, name, c: None if 0 <= v < 1 else  # share of the steps
                            f"warmup is a share of the steps in [0, 1), got {v}")   # spent warming up the lr
    weight_decay: float = 0.01
    grad_accum: int = setting(1, check=positive)
    max_grad_norm: float = 1.0
    eval_every: int = setting(0, check=not_negative)   # optimiser steps between dev evaluations; 0 = once per epoch
    max_steps: int = setting(0, check=not_negative)    # stop after this many optimiser steps; 0 = no limit
    device: str = setting("auto", check=device_setting)
    precision: str = setting("fp32", choices=PRECISIONS)   # fp32, bf16 or fp16 (fp16 needs CUDA)

    def check(self) -> None:
        check_fields(self)


def _epochs(value, config) -> Optional[str]:
    if value <= 0 and (config is None or config.max_steps <= 0):
        return "epochs must be positive (or set max_steps)"
    return None


def set_seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)


def task_loss(model, batch):
    return model(**batch).loss


def fit(model, tokenizer, train_set, dev_set, config: TrainConfig,
        loss_fn: Callable = task_loss, desc: str = "train") -> dict:
    """Train ``model`` in place and leave it holding its best dev-scoring weights.

    Returns the history: one entry per evaluation, plus the best one.
    """
    config.check()
    device = resolve_device(config.device)
    check_precision(config.precision, device)
    task = train_set.task
    model.to(device)
    items = encode(tokenizer, train_set.examples, config.max_length, model.config)
    if not items:
        raise CompressorError(f"{train_set.source}: no training rows")
    pad_id = tokenizer.pad_token_id or 0
    batches_per_epoch = math.ceil(len(items) / config.batch_size)
    steps_per_epoch = max(1, batches_per_epoch // config.grad_accum)
    total_steps = math.ceil(config.epochs * steps_per_epoch)
    if config.max_steps:
        total_steps = min(total_steps, config.max_steps) if config.epochs > 0 else config.max_steps
    eval_every = config.eval_every or steps_per_epoch

    no_decay = ("bias", "LayerNorm.weight", "layer_norm.weight", "norm.weight")
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for n, p in model.named_parameters() if p.requires_grad and not n.endswith(no_decay)]
    rest = [p for n, p in model.named_parameters() if p.requires_grad and n.endswith(no_decay)]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": config.weight_decay},
                                   {"params": rest, "weight_decay": 0.0}], lr=config.lr)
    warmup_steps = int(config.warmup * total_steps)

    def schedule(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / (warmup_steps + 1)
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    weight_limit = max(WEIGHT_LIMIT, 100 * _largest_weight(model))
    scaler = torch.amp.GradScaler("cuda") if config.precision == "fp16" else None
    generator = torch.Generator().manual_seed(config.seed)

    history, best, best_state = [], None, None
    step, micro = 0, 0
    start = time.perf_counter()
    bar = progress(total=total_steps, desc=desc, unit="step")
    model.train()
    while step < total_steps:
        for batch in iter_batches(items, config.batch_size, pad_id, task.is_regression, generator):
            with autocast(device, config.precision):
                loss = loss_fn(model, to_device(batch, device)) / config.grad_accum
            if not torch.isfinite(loss):
                raise CompressorError(f"training diverged at step {step} (loss {loss.item()}); "
                                      "lower the learning rate")
            (scaler.scale(loss) if scaler else loss).backward()
            micro += 1
            if micro % config.grad_accum:
                continue
            if scaler:
                scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm)
            if scaler:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            scheduler.step()
            step += 1
            bar.update(1)
            bar.set_postfix(loss=f"{loss.item() * config.grad_accum:.4f}", refresh=False)
            if step % eval_every == 0 or step == total_steps:
                _check_weights(model, step, config, weight_limit)
                entry = _evaluate(model, tokenizer, dev_set, config, device, step, start)
                history.append(entry)
                if best is None or entry["score"] > best["score"]:
                    best = entry
                    best_state = {k: v.detach().to("cpu", copy=True)
                                  for k, v in model.state_dict().items()}
                model.train()
            if step >= total_steps:
                break
    bar.close()
    if best_state is not None:
        model.load_state_dict(best_state)
    model.eval()
    return {"history": history, "best": best, "steps": step,
            "train_time_s": round(time.perf_counter() - start, 2)}


# No encoder's weights come near this; the first step at a learning rate like 1e6 sets them to ~1e6.
WEIGHT_LIMIT = 1e4


def _largest_weight(model) -> float:
    return max((p.detach().abs().max().item() for p in model.parameters() if p.numel()), default=0.0)


def _check_weights(model, step: int, config, limit: float) -> None:
    """Refuse weights that are not finite or have blown up, before they are scored or saved."""
    for name, p in model.named_parameters():
        if p.numel() and not torch.isfinite(p).all():
            raise CompressorError(f"training diverged at step {step} ({name} is not finite); "
                                  f"the learning rate {config.lr:g} is probably too high")
    largest = _largest_weight(model)
    if largest > limit:
        raise CompressorError(f"training diverged at step {step} (a weight reached {largest:.3g}); "
                              f"the learning rate {config.lr:g} is probably too high")


def _evaluate(model, tokenizer, dev_set, config, device, step, start) -> dict:
    metrics = score(model, tokenizer, dev_set, config.max_length, max(64, config.batch_size), device)
    return {"step": step, "metrics": metrics, "score": task_score(dev_set.task, metrics),
            "elapsed_s": round(time.perf_counter() - start, 2)}


def finetune(model: str, task: Optional[str], out: str, data_dir: Optional[str] = None,
             train_limit: Optional[int] = None, dev_limit: Optional[int] = None,
             config: Optional[TrainConfig] = None, overwrite: bool = False,
             user_data: Optional[UserData] = None) -> dict:
    """Fine-tune ``model`` on ``task`` and write a checkpoint plus ``metrics.json`` to ``out``.

    With ``user_data`` the task comes from the user's files (``task`` then only names it).
    """
    config = config or TrainConfig()
    config.check()
    if user_data is not None:
        task_spec = (replace(user_data, name=task) if task else user_data).task()
    elif task:
        task_spec = get_task(task)
    else:
        raise CompressorError("give a GLUE task (--task) or your own files (--train-file, --dev-file)")
    check_output_dir(out, overwrite)
    resolve_device(config.device)
    train_set = load_data(task_spec, "train", data_dir, train_limit, user_data)
    dev_set = load_data(task_spec, "dev", data_dir, dev_limit, user_data)
    set_seed(config.seed)  # the new classifier head is drawn from this seed too
    net, tokenizer = load_for_task(model, task_spec)
    start = time.perf_counter()
    result = fit(net, tokenizer, train_set, dev_set, config, desc=f"finetune {task_spec.name}")
    record = {
        "task": task_spec.name, "split": "dev",
        "metrics": result["best"]["metrics"], "score": result["best"]["score"],
        "examples": len(dev_set), "train_examples": len(train_set),
        "data": train_set.source, "seed": config.seed, "base_model": model,
        "parameters": count_parameters(net), "best_step": result["best"]["step"],
        "steps": result["steps"], "history": result["history"],
        "wall_time_s": round(time.perf_counter() - start, 2),
        "config": asdict(config), "versions": versions(),
    }
    meta = checkpoint_meta(task_spec, config.max_length, "finetune")
    net.to("cpu")
    record["size_bytes"] = save_checkpoint(net, tokenizer, out, meta, {"metrics.json": record})
    return record
