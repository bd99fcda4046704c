"""The training loop every method shares, and teacher fine-tuning built on it.

``fit`` takes a loss function of ``(model, batch)``: fine-tuning uses the task
loss; distillation passes one that also runs the teacher. Everything else
(schedule, precision, accumulation, best-checkpoint choice, progress, seeding)
is the same for both.
"""
from __future__ import annotations

import contextvars
import dataclasses
import math
import os
import random
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np
import torch

from compressor.core import distributed
from compressor.core.batches import collate, encode, iter_batches, to_device
from compressor.core.data import UserData, data_meta, get_task, load_data
from compressor.core.device import check_precision, resolve_device
from compressor.core.errors import CompressorError
from compressor.engine.train_config import TrainConfig, trackers  # noqa: F401  (TrainConfig: re-exported)
from compressor.engine.scoring import chance_check, predict_logits, predictions_from_logits
from compressor.core.io import check_output_dir, versions
from compressor.core.metrics import compute_metrics, task_score
from compressor.core.models import as_float32, checkpoint_meta, count_parameters, load_for_task, save_checkpoint
from compressor.core.progress import progress


def set_seed(seed: int) -> None:
    """Seed every generator a training job draws from; with ``COMPRESSOR_DETERMINISTIC=1`` also
    make PyTorch take deterministic kernels (``use_deterministic_algorithms``, warning where an
    operator has none). On a GPU the same seed does not repeat a run without it: MRPC fine-tuned
    twice on an H200 gave two sets of weights, CoLA the same ones; with it, MRPC's were the same
    (docs/training.md). cuBLAS needs ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` from the process's start
    for that: it is set here when missing, which is in time only if no cuBLAS call came before."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)
    if os.environ.get("COMPRESSOR_DETERMINISTIC") == "1":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=True)


def task_loss(model, batch):
    return model(**batch).loss


class Callback:
    """Hooks into ``fit``: override the ones a method needs (pruning schedules and masks,
    Theseus replacement rates, exit heads). Each runs on every rank, in the order given,
    with the :class:`TrainState`; what they change must be the same on every rank."""

    def on_train_begin(self, state: "TrainState") -> None:
        pass

    def on_epoch_begin(self, state: "TrainState") -> None:
        pass

    def on_step_begin(self, state: "TrainState") -> None:
        """Before the batches of optimiser step ``state.step + 1`` run forward."""

    def on_optimizer_step(self, state: "TrainState") -> None:
        """Right after the optimiser changed the weights (``state.step`` counts it)."""

    def on_epoch_end(self, state: "TrainState") -> None:
        pass

    def on_evaluate(self, state: "TrainState", entry: dict) -> None:
        pass

    def may_keep(self, state: "TrainState", entry: dict) -> bool:
        """The checkpoint rule: whether the weights just scored may become the kept ("best")
        ones. A pruning schedule says no until its target sparsity is reached."""
        return True

    def on_train_end(self, state: "TrainState") -> None:
        pass


@dataclass
class TrainState:
    """What callbacks see (and may change) while ``fit`` runs."""

    model: torch.nn.Module        # the model being trained, unwrapped (one copy per rank)
    optimizer: torch.optim.Optimizer
    config: TrainConfig
    total_steps: int
    steps_per_epoch: int
    step: int = 0                 # optimiser steps done
    epoch: int = 0                # epochs begun
    history: list = field(default_factory=list)
    stop: bool = False            # set by a callback: training ends after this step
    world_size: int = 1


def unwrap(model):
    """The module inside a data-parallel wrapper (or ``model`` itself)."""
    return model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model


def _accelerator(config: TrainConfig, device: torch.device, log_dir: Optional[str] = None):
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState
    from accelerate.utils import DistributedDataParallelKwargs

    alone = distributed.world_size() <= 1
    # accelerate keeps one global state; each fit sets its own precision and accumulation
    AcceleratorState._reset_state(reset_partial_state=alone)
    GradientState._reset_state()
    if not alone:
        distributed.init(config.device)
    precision = {"fp32": "no"}.get(config.precision, config.precision)
    # gradients live in the all-reduce buckets (no copy per step)
    ddp = DistributedDataParallelKwargs(gradient_as_bucket_view=True)
    # trackers (report_to) log under log_dir; None when the config names none
    tracking = {"log_with": trackers(config.report_to), "project_dir": log_dir} if log_dir else {}
    return Accelerator(cpu=device.type == "cpu", mixed_precision=precision,
                       gradient_accumulation_steps=config.grad_accum, device_placement=False,
                       kwargs_handlers=[ddp], **tracking)


def _my_rows(rows: int) -> range:
    """This rank's rows of a global batch of ``rows`` (one that counts for nothing when there
    are fewer rows than ranks: every rank must take part in each gradient exchange)."""
    mine = distributed.shard(range(rows))
    return mine if len(mine) else range(1)


def _rank_weight(batch: dict, world: int) -> float:
    """The weight that makes the ranks' averaged gradients those of the whole global batch."""
    mine = len(distributed.shard(range(batch["global_rows"])))
    return world * mine / batch["global_rows"]


def _local_rows(batch: dict, world: int):
    """This rank's rows of a collated global batch and their weight. Every rank keeps the
    batch's padded width: ranks that wait for the slowest at each gradient exchange should
    all take equally long."""
    rows = len(batch["input_ids"])
    mine = _my_rows(rows)
    local = {k: v[mine.start:mine.stop] for k, v in batch.items()}
    return local, _rank_weight({"global_rows": rows}, world)


def _freeze_unused(model, loss_fn, accelerator, batch: dict, device) -> list:
    """Freeze the trainable weights the loss gives no gradient (a classifier while only layer
    losses train, say), as one process leaves them be: data parallel waits for every
    gradient it was given. One probing step finds them; the random state is put back."""
    cpu_rng = torch.get_rng_state()
    cuda_rng = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    local, _ = _local_rows(batch, distributed.world_size())
    with accelerator.autocast():
        loss = loss_fn(model, to_device(local, device))
    loss.backward()
    unused = {n for n, p in model.named_parameters() if p.requires_grad and p.grad is None}
    model.zero_grad(set_to_none=True)
    torch.set_rng_state(cpu_rng)
    if cuda_rng is not None:
        torch.cuda.set_rng_state(cuda_rng, device)
    unused = distributed.broadcast(unused)
    frozen = [p for n, p in model.named_parameters() if n in unused]
    for p in frozen:
        p.requires_grad_(False)
    return frozen


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def fit(model, tokenizer, train_set, dev_set, config: TrainConfig,
        loss_fn: Callable = task_loss, desc: str = "train",
        callbacks: Sequence[Callback] = ()) -> dict:
    """Train ``model`` in place and leave it holding the best-scoring dev weights that every
    callback's ``may_keep`` allows (the last weights when none were allowed).

    Runs on ``accelerate``: under torchrun each process trains on its share of every batch
    (the global batch is ``batch_size``, as in one process) and evaluation is gathered.
    ``loss_fn(model, batch)`` gets the wrapped model: it must call it, not a submodule, so
    that data parallel sees the forward (``unwrap`` reaches the model's own attributes).
    Returns the history (one entry per evaluation), the best entry, and throughput.
    """
    config.check()
    if not dev_set.labelled:
        raise CompressorError(f"{dev_set.source} has no labels ({dev_set.split} split): "
                              "training scores the dev split")
    world = distributed.world_size()
    device = resolve_device(config.device)
    check_precision(config.precision, device)
    log_dir = _tracker_dir(config)   # None unless report_to names trackers (rank 0 only)
    accelerator = _accelerator(config, device, log_dir)
    task = train_set.task
    # FP32 master weights whatever dtype the model came in (a checkpoint stored in fp16, say):
    # the optimiser updates float32 weights; --precision bf16/fp16 runs the steps in autocast
    as_float32(model)
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

    frozen = _freeze_unused(model, loss_fn, accelerator, collate(
        items[:config.batch_size], pad_id, task.is_regression), device) if world > 1 else []
    no_decay = ("bias", "LayerNorm.weight", "layer_norm.weight", "norm.weight")
    # a model may train some parameters at another learning rate (token pruning's thresholds):
    # ``lr_scales()`` -> {parameter name: multiple of lr}; those are not decayed, and their
    # gradients are clipped apart from the weights' (a few scalars would otherwise set the norm)
    scales = getattr(model, "lr_scales", lambda: {})()
    params = [p for n, p in model.named_parameters() if p.requires_grad and n not in scales]
    decay = [p for n, p in model.named_parameters()
             if p.requires_grad and not n.endswith(no_decay) and n not in scales]
    rest = [p for n, p in model.named_parameters()
            if p.requires_grad and n.endswith(no_decay) and n not in scales]
    scaled = [{"params": [p], "weight_decay": 0.0, "lr": config.lr * scales[n]}
              for n, p in model.named_parameters() if p.requires_grad and n in scales]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": config.weight_decay},
                                   {"params": rest, "weight_decay": 0.0}] + scaled, lr=config.lr,
                                  fused=device.type == "cuda" or None)   # one kernel per step
    warmup_steps = int(config.warmup * total_steps)

    def schedule(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / (warmup_steps + 1)
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))

    # not prepared: accelerate would step it once per process, and the global batch is fixed
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    weight_limit = max(WEIGHT_LIMIT, 100 * _largest_weight(model))
    wrapped, optimizer = accelerator.prepare(model, optimizer)
    # mixed precision covers the training step (below); evaluation runs as the model is used
    accelerator.unwrap_model(wrapped, keep_fp32_wrapper=False)
    tracking = _Tracking(accelerator, config, desc, log_dir, optimizer)
    generator = torch.Generator().manual_seed(config.seed)
    if distributed.rank():   # its own dropout draws: the ranks' rows are different rows
        torch.manual_seed(config.seed + distributed.rank())

    state = TrainState(model, optimizer, config, total_steps, steps_per_epoch, world_size=world)
    best, best_state = None, None
    micro, rows_seen, eval_s = 0, 0, 0.0
    step_loss, pending = None, None   # the loss is read one step late: the GPU never waits
    losses = []   # (step, training loss) of every optimiser step, for the record's loss curve
    # throughput is also read from this step on, past the first steps' one-off costs (memory
    # pools growing, kernels chosen), which weigh more the shorter the run
    settle_step = min(10, total_steps // 10) if total_steps >= 20 else None
    settled = None   # (time, rows seen, evaluation seconds) when settle_step ended
    start = time.perf_counter()
    bar = progress(total=total_steps, desc=desc, unit="step")
    _each(callbacks, "on_train_begin", state)
    wrapped.train()
    while state.step < total_steps and not state.stop:
        state.epoch += 1
        _each(callbacks, "on_epoch_begin", state)
        # with several processes each collates only its own rows of the global batch
        for batch in iter_batches(items, config.batch_size, pad_id, task.is_regression, generator,
                                  rows=_my_rows if world > 1 else None,
                                  group_by_length=config.group_by_length):
            if micro % config.grad_accum == 0:
                _each(callbacks, "on_step_begin", state)
            rows_seen += batch.get("global_rows", len(batch["input_ids"]))
            local, weight = (batch, _rank_weight(batch, world)) if world > 1 else (batch, 1.0)
            with accelerator.accumulate(wrapped):
                with accelerator.autocast():
                    loss = loss_fn(wrapped, to_device(local, device))
                if weight != 1.0:
                    loss = loss * weight
                accelerator.backward(loss)
            loss = loss.detach().float()
            step_loss = loss if step_loss is None else step_loss + loss
            micro += 1
            if not accelerator.sync_gradients:
                continue
            accelerator.clip_grad_norm_(params, config.max_grad_norm)
            for group in scaled:
                torch.nn.utils.clip_grad_norm_(group["params"], config.max_grad_norm)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            scheduler.step()
            state.step += 1
            _each(callbacks, "on_optimizer_step", state)
            if pending is not None:
                _note_loss(losses, pending, bar, tracking)
            pending = (state.step, accelerator.reduce(step_loss, "mean") / config.grad_accum)
            step_loss = None
            bar.update(1)
            if state.step == settle_step:
                _sync(device)
                settled = (time.perf_counter(), rows_seen, eval_s)
            if state.step % eval_every == 0 or state.step == total_steps or state.stop:
                _note_loss(losses, pending, bar, tracking)
                pending = None
                _check_weights(model, state.step, config, weight_limit)
                _sync(device)
                eval_start = time.perf_counter()
                entry = _evaluate(model, tokenizer, dev_set, config, device, state.step, start)
                eval_s += time.perf_counter() - eval_start
                entry["kept"] = all(cb.may_keep(state, entry) for cb in callbacks)
                state.history.append(entry)
                _each(callbacks, "on_evaluate", state, entry)
                tracking.log_eval(entry)
                better = entry["kept"] and (best is None or entry["score"] > best["score"])
                _print_evaluation(bar, desc, entry, total_steps, better, _split_name(dev_set))
                if entry["kept"] and (best is None or entry["score"] > best["score"]):
                    best = entry
                    best_state = {k: v.detach().to("cpu", copy=True)
                                  for k, v in model.state_dict().items()}
                wrapped.train()
            if state.step >= total_steps or state.stop:
                break
        _each(callbacks, "on_epoch_end", state)
    if pending is not None:
        _note_loss(losses, pending, bar, tracking)
    _sync(device)
    elapsed = time.perf_counter() - start
    bar.close()
    tracking.end()
    _each(callbacks, "on_train_end", state)
    for p in frozen:
        p.requires_grad_(True)
    if best_state is not None:
        model.load_state_dict(best_state)
    elif state.history:   # no evaluation was allowed to be kept: the last weights stay
        best = state.history[-1]
    model.eval()
    loop_s = elapsed - eval_s
    steady = None
    if settled is not None and state.step > settle_step:
        steady_s = (start + elapsed - settled[0]) - (eval_s - settled[2])
        steady = round((rows_seen - settled[1]) / steady_s, 2) if steady_s > 0 else None
    return {"history": state.history, "best": best, "steps": state.step,
            "train_time_s": round(elapsed, 2), "processes": world,
            "train_rows": rows_seen, "train_loop_s": round(loop_s, 3),
            "samples_per_s": round(rows_seen / loop_s, 2) if loop_s > 0 else None,
            "steady_samples_per_s": steady, "steady_from_step": settle_step if steady else None,
            "loss_curve": loss_curve(losses)}


def loss_curve(losses: Sequence[Tuple[int, float]], points: int = 10) -> List[List[float]]:
    """The training loss in at most ``points`` equal runs of steps: ``[last step, mean loss]``
    each, so a record shows whether a phase learned (the progress bar's loss is gone once it ends)."""
    if not losses:
        return []
    size = math.ceil(len(losses) / points)
    return [[chunk[-1][0], round(sum(v for _, v in chunk) / len(chunk), 6)]
            for chunk in (losses[i:i + size] for i in range(0, len(losses), size))]


def _note_loss(losses: list, pending, bar, tracking: "_Tracking") -> None:
    losses.append(_check_loss(*pending, bar))
    tracking.log_loss(*losses[-1])


# -- trackers (report_to: tensorboard, mlflow, wandb, through accelerate) ------------------

_LOGS: contextvars.ContextVar = contextvars.ContextVar("compressor_tracker_logs", default=None)


class TrackerLogs:
    """Where the training runs inside ``with TrackerLogs() as logs:`` log for their trackers
    (``report_to``): a temporary folder, made when a run first needs it, that :meth:`keep`
    moves to ``OUT/runs`` once the output folder is written (output folders are written whole,
    replacing what was there). Without trackers nothing is made; a failed block leaves nothing."""

    def __init__(self):
        self.tmp: Optional[str] = None
        self._token = None

    def folder(self) -> str:
        if self.tmp is None:
            self.tmp = tempfile.mkdtemp(prefix="compressor-runs-")
        return self.tmp

    def __enter__(self) -> "TrackerLogs":
        self._token = _LOGS.set(self)
        return self

    def __exit__(self, kind, *_) -> None:
        _LOGS.reset(self._token)
        if kind is not None:
            self.discard()

    def keep(self, out: str) -> Optional[str]:
        """Move the logs to ``out/runs`` (merged into one there already); returns that folder."""
        if self.tmp is None or not os.path.isdir(self.tmp) or not os.path.isdir(out):
            self.discard()
            return None
        runs = os.path.join(out, "runs")
        os.makedirs(runs, exist_ok=True)
        for name in os.listdir(self.tmp):
            target = os.path.join(runs, name)
            if os.path.exists(target):
                shutil.rmtree(target, ignore_errors=True)
            shutil.move(os.path.join(self.tmp, name), target)
        self.discard()
        return runs

    def discard(self) -> None:
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None


def _tracker_dir(config: TrainConfig) -> Optional[str]:
    """The folder trackers log under, or None without any (and on every rank but 0): the open
    :class:`TrackerLogs`' folder, else ``./runs`` (``fit`` called on its own, as transformers'
    Trainer does)."""
    if not trackers(config.report_to) or not distributed.is_main():
        return None
    logs = _LOGS.get()
    return logs.folder() if logs is not None else os.path.abspath("runs")


class _Tracking:
    """accelerate's trackers for one ``fit`` (a no-op without ``report_to``): the training loss
    and learning rate per optimiser step, the dev metrics per evaluation, the settings once."""

    def __init__(self, accelerator, config: TrainConfig, desc: str, log_dir: Optional[str], optimizer):
        self.accelerator = accelerator if log_dir else None
        self.optimizer = optimizer
        if self.accelerator is None:
            return
        names = trackers(config.report_to)
        init_kwargs = {}
        if "wandb" in names:   # offline unless the user says otherwise: `wandb sync` uploads later
            os.environ.setdefault("WANDB_MODE", "offline")
            init_kwargs["wandb"] = {"dir": log_dir}
        if "mlflow" in names and not os.environ.get("MLFLOW_TRACKING_URI"):
            import mlflow   # a local file store beside the other logs (no server)

            mlflow.set_tracking_uri("file://" + os.path.join(os.path.abspath(log_dir), "mlruns"))
        base = "-".join(str(desc).split()) or "train"
        name, n = base, 1
        while os.path.exists(os.path.join(log_dir, name)):   # several runs of one command
            n += 1
            name = f"{base}-{n}"
        settings = {f.name: getattr(config, f.name) for f in dataclasses.fields(TrainConfig)}
        accelerator.init_trackers(name, config=settings, init_kwargs=init_kwargs)

    def log_loss(self, step: int, loss: float) -> None:
        if self.accelerator is not None:
            self.accelerator.log({"train/loss": loss, "train/lr": self.optimizer.param_groups[0]["lr"]},
                                 step=step)

    def log_eval(self, entry: dict) -> None:
        if self.accelerator is not None:
            values = {f"eval/{k}": float(v) for k, v in entry["metrics"].items()}
            self.accelerator.log({**values, "eval/score": entry["score"]}, step=entry["step"])

    def end(self) -> None:
        if self.accelerator is not None:
            self.accelerator.end_training()


def _each(callbacks, hook: str, *args) -> None:
    for cb in callbacks:
        getattr(cb, hook)(*args)


def _check_loss(step: int, loss: torch.Tensor, bar) -> Tuple[int, float]:
    value = loss.item()
    if not math.isfinite(value):
        raise CompressorError(f"training diverged at step {step} (loss {value}); "
                              "lower the learning rate")
    bar.set_postfix(loss=f"{value:.4f}", refresh=False)
    return step, value


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


def _split_name(rows) -> str:
    """The evaluation rows' split in one word (dev; train or holdout where a search scores on them)."""
    split = getattr(rows, "split", None)
    return split.split()[0] if isinstance(split, str) and split.strip() else "dev"


def _print_evaluation(bar, desc: str, entry: dict, total_steps: int, best: bool, split: str = "dev") -> None:
    """One line on stderr per evaluation (step, the rows' split, metrics, score), above the progress
    bar; rank 0 only, and none with ``COMPRESSOR_PROGRESS=0``."""
    if os.environ.get("COMPRESSOR_PROGRESS", "1") == "0" or not distributed.is_main():
        return
    metrics = ", ".join(f"{k} {v:.4f}" for k, v in entry["metrics"].items())
    note = " (best so far)" if best else "" if entry.get("kept", True) else " (not kept)"
    bar.write(f"{desc} step {entry['step']}/{total_steps}: {split} {metrics}, score {entry['score']:.2f}{note}",
              file=sys.stderr)


def _evaluate(model, tokenizer, dev_set, config, device, step, start) -> dict:
    """Dev metrics; under several processes each scores its share and all gather the logits."""
    examples = distributed.shard(dev_set.examples)
    logits = predict_logits(model, tokenizer, examples, config.max_length,
                            max(64, config.batch_size), device) if len(examples) else None
    logits = np.concatenate([part for part in distributed.gather([logits]) if part is not None])
    regression = dev_set.task.is_regression
    metrics = compute_metrics(dev_set.task, predictions_from_logits(logits, regression),
                              [ex.label for ex in dev_set.examples])
    return {"step": step, "metrics": metrics, "score": task_score(dev_set.task, metrics),
            "elapsed_s": round(time.perf_counter() - start, 2)}


def finetune(model: str, task: Optional[str], out: str, data_dir: Optional[str] = None,
             train_limit: Optional[int] = None, dev_limit: Optional[int] = None,
             config: Optional[TrainConfig] = None, overwrite: bool = False,
             user_data: Optional[UserData] = None, holdout: int = 0) -> dict:
    """Fine-tune ``model`` on ``task`` and write a checkpoint plus ``metrics.json`` to ``out``.

    With ``user_data`` the task comes from the user's files (``task`` then only names it).
    ``holdout``: that many training rows (drawn with the seed) are left out of training and
    recorded in ``compressor.json`` (:mod:`compressor.core.data.holdout`), for later choices.
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
    held_out = None
    if holdout:
        from compressor.core.data import holdout as holdouts

        train_set, _, held_out = holdouts.draw(train_set, holdout, config.seed)
    set_seed(config.seed)  # the new classifier head is drawn from this seed too
    net, tokenizer = load_for_task(model, task_spec)
    start = time.perf_counter()
    with TrackerLogs() as logs:
        result = fit(net, tokenizer, train_set, dev_set, config, desc=f"finetune {task_spec.name}")
    record = {
        "task": task_spec.name, "split": "dev",
        "metrics": result["best"]["metrics"], "score": result["best"]["score"],
        "examples": len(dev_set), "train_examples": len(train_set),
        "data": train_set.source, "seed": config.seed, "base_model": model,
        "parameters": count_parameters(net), "best_step": result["best"]["step"],
        "steps": result["steps"], "history": result["history"],
        "processes": result["processes"], "samples_per_s": result["samples_per_s"],
        "loss_curve": result["loss_curve"], "wall_time_s": round(time.perf_counter() - start, 2),
        "config": asdict(config), "versions": versions(),
    }
    meta = checkpoint_meta(task_spec, config.max_length, "finetune", **data_meta(user_data))
    if held_out:
        record["holdout"] = meta["holdout"] = held_out
    if distributed.is_main():   # a model at chance says so (stderr and the record)
        chance_check(record, dev_set)
    net.to("cpu")
    if distributed.is_main():   # every process holds the same weights; one writes them
        record["size_bytes"] = save_checkpoint(net, tokenizer, out, meta, {"metrics.json": record})
        logs.keep(out)
    distributed.barrier()
    return record
