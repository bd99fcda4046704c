"""Training exit heads through the shared loop (``compressor.engine.train.fit``), then choosing the threshold.

Held out first: ``calibrate.rows`` training rows (a seeded draw) that exit training never sees;
they score the loop's evaluations and pick the threshold, so dev is used by neither.

With the model fixed (``two_stage``, ``self_distill``), every training row's pooled state
at each exit (and the model's own logits) is computed once (:class:`FeatureCache`); the loss
looks each batch's rows up by their token ids and runs the heads alone, so an epoch over all
of SST-2 takes seconds on a CPU once the one pass is done. ``joint`` trains everything and
runs the whole model each step.
"""
from __future__ import annotations

import time
from typing import Dict, Optional, Tuple

import numpy as np
import torch

from compressor.core.batches import encode, iter_batches, to_device
from compressor.engine.losses import soft_targets, task_loss
from compressor.core.errors import CompressorError
from compressor.core.metrics import compute_metrics, task_score
from compressor.core.progress import progress
from compressor.engine.train import Callback, fit, set_seed
from compressor.exit.configs import EarlyExitConfig
from compressor.exit.model import EarlyExitModel
from compressor.exit.rules import calibrate, exit_costs


def hold_out(train_set, rows: int, seed: int):
    """``(training rows, calibration rows)``: ``rows`` drawn at random (seeded) from the training
    split, the rest left for exit training."""
    n = len(train_set.examples)
    if n < 2:
        raise CompressorError(f"{train_set.source}: early exit needs at least 2 training rows "
                              "(some train the exits, some pick the threshold)")
    take = min(rows, n // 2) if rows >= n else rows
    return train_set.partition(take, seed + 7919, "train (held out for calibration)")


def _key(ids) -> Tuple[int, ...]:
    return tuple(int(i) for i in ids)


class FeatureCache:
    """Each exit's input (the pooled states after its layer) and the model's own logits for
    every distinct row, computed once with the model fixed; looked up by token ids."""

    def __init__(self, model: EarlyExitModel, tokenizer, examples, max_length: int,
                 batch_size: int, device, desc: str = "exit inputs"):
        items = encode(tokenizer, examples, max_length, model.config)
        index: Dict[Tuple[int, ...], int] = {}
        unique = []
        for it in items:
            key = _key(it["input_ids"])
            if key not in index:
                index[key] = len(unique)
                unique.append(it)
        self.index = index
        n, exits = len(unique), len(model.exit_layers)
        hidden = model.spec.hidden_size(model.config)
        self.features = torch.zeros((n, exits, hidden), dtype=torch.float32)
        self.logits = torch.zeros((n, model.config.num_labels), dtype=torch.float32)
        was = model.training
        model.eval()
        pad = tokenizer.pad_token_id or 0
        batches = iter_batches(unique, batch_size, pad, model.regression)
        with torch.no_grad():
            for batch in progress(batches, total=(n + batch_size - 1) // batch_size, desc=desc,
                                  unit="batch"):
                order = batch["order"]
                inputs = to_device(batch, device)
                inputs.pop("labels", None)
                all_logits, features = model.all_logits(**inputs)
                if features is not None:
                    self.features[order] = features.float().cpu()
                self.logits[order] = all_logits[:, -1].float().cpu()
        model.train(was)

    def rows(self, batch: dict) -> torch.Tensor:
        ids = batch["input_ids"].cpu().tolist()
        lengths = batch["attention_mask"].cpu().sum(1).tolist()
        try:
            return torch.tensor([self.index[tuple(row[:n])] for row, n in zip(ids, lengths)])
        except KeyError:
            raise CompressorError("a training row missing from the exit-input cache") from None


class ExitLoss:
    """``loss_fn(model, batch)`` of :func:`compressor.engine.train.fit` for each way of training."""

    def __init__(self, config: EarlyExitConfig, cache: Optional[FeatureCache], exits: int,
                 regression: bool, teacher_logits: Optional[dict] = None):
        self.config, self.cache, self.regression = config, cache, regression
        # self_distill from another teacher than the model: its logits keyed by token ids
        self.teacher_logits = teacher_logits
        n = exits + 1  # the model's own classifier weighs in too when it trains (joint)
        weights = [float(i + 1) for i in range(n)] if config.weighting == "linear" else [1.0] * n
        self.weights = torch.tensor(weights) / sum(weights)

    def _soft(self, student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
        return soft_targets(student, teacher, self.config.temperature)

    def _teacher(self, batch: dict) -> torch.Tensor:
        lengths = batch["attention_mask"].cpu().sum(1).tolist()
        try:
            return torch.stack([self.teacher_logits[_key(row[:n])] for row, n in
                                zip(batch["input_ids"].cpu().tolist(), lengths)])
        except KeyError:
            raise CompressorError("a training row has no teacher logits") from None

    def __call__(self, model, batch: dict) -> torch.Tensor:
        mode = self.config.training
        if mode == "joint":
            out = model(**{k: v for k, v in batch.items() if k != "labels"})
            logits = out.exit_logits   # [rows, exits + 1, classes]
            weights = self.weights.to(logits.device)
            return sum(weights[k] * task_loss(logits[:, k], batch["labels"])
                       for k in range(logits.shape[1]))
        if self.cache is not None:
            rows = self.cache.rows(batch)
            device = batch["input_ids"].device
            exit_logits = model(exit_features=self.cache.features[rows].to(device)).exit_logits
            final = self.cache.logits[rows].to(device)
        else:
            out = model(**{k: v for k, v in batch.items() if k != "labels"})
            exit_logits, final = out.exit_logits[:, :-1], out.exit_logits[:, -1].detach()
        k = exit_logits.shape[1]
        if mode == "self_distill" and self.teacher_logits is not None:
            final = self._teacher(batch).to(exit_logits.device)
        if mode == "self_distill":
            return sum(self._soft(exit_logits[:, i], final) for i in range(k)) / k
        return sum(task_loss(exit_logits[:, i], batch["labels"]) for i in range(k)) / k


class KeepLast(Callback):
    """Nothing is chosen by score: the weights at the end of training are the result."""

    def may_keep(self, state, entry: dict) -> bool:
        return state.step >= state.total_steps or state.stop


def train_exits(model: EarlyExitModel, tokenizer, train_set, held_set, config: EarlyExitConfig,
                desc: str = "exits", teacher_logits: Optional[dict] = None) -> dict:
    """Train ``model``'s exits (and, for ``joint``, the model) on ``train_set``; the loop's
    evaluations score ``held_set`` (held-out training rows), and the last weights are kept.
    ``teacher_logits`` (token ids -> logits): ``self_distill``'s targets where the teacher is
    not the model itself."""
    from compressor.core.device import resolve_device

    device = resolve_device(config.train.device)
    model.to(device)
    fixed = config.training in ("two_stage", "self_distill")
    for p in model.backbone.parameters():
        p.requires_grad_(not fixed)
    for p in model.heads.parameters():
        p.requires_grad_(True)
    cache, cache_s = None, 0.0
    if fixed and config.cache:
        start = time.perf_counter()
        cache = FeatureCache(model, tokenizer, train_set.examples, config.train.max_length,
                             max(64, config.train.batch_size), device, desc=f"{desc}: exit inputs")
        cache_s = time.perf_counter() - start
    loss = ExitLoss(config, cache, len(model.exit_layers), model.regression, teacher_logits)
    set_seed(config.train.seed)
    model.backbone_fixed = fixed   # no dropout in the fixed model (the heads keep theirs)
    # heads alone are tiny: one thread, or each step waits on a busy machine's other cores
    threads = torch.get_num_threads()
    if cache is not None and device.type == "cpu":
        torch.set_num_threads(1)
    try:
        result = fit(model, tokenizer, train_set, held_set, config.train, loss,
                     desc=f"{desc} ({config.training})", callbacks=[KeepLast()])
    finally:
        torch.set_num_threads(threads)
    model.backbone_fixed = False
    for p in model.parameters():
        p.requires_grad_(True)
    result.pop("best", None)
    return {"training": config.training, "cache_s": round(cache_s, 2),
            "cached_rows": len(cache.index) if cache else None, **result}


@torch.no_grad()
def all_exit_logits(model: EarlyExitModel, tokenizer, examples, max_length: int, batch_size: int,
                    device, desc: Optional[str] = None):
    """``[exits][rows, classes]`` logits of every exit and each row's token count, in input order."""
    items = encode(tokenizer, examples, max_length, model.config)
    exits = len(model.exits)
    out = np.zeros((exits, len(items), model.config.num_labels), np.float32)
    model.eval()
    batches = iter_batches(items, batch_size, tokenizer.pad_token_id or 0, model.regression)
    for batch in progress(batches, total=(len(items) + batch_size - 1) // batch_size, desc=desc,
                          unit="batch"):
        order = batch["order"].numpy()
        inputs = to_device(batch, device)
        inputs.pop("labels", None)
        logits, _ = model.all_logits(**inputs)
        out[:, order] = logits.float().cpu().numpy().transpose(1, 0, 2)
    lengths = np.array([len(it["input_ids"]) for it in items])
    return list(out), lengths


def cost_table(model: EarlyExitModel, lengths) -> np.ndarray:
    """``[rows, exits]`` FLOPs each row spends stopping at each exit."""
    widths, hidden, gated = layer_widths(model)
    cache = {}
    rows = []
    for length in lengths:
        if length not in cache:
            cache[length] = exit_costs(int(length), widths, hidden, model.exits,
                                       model.config.num_labels, gated)
        rows.append(cache[length])
    return np.stack(rows) if rows else np.zeros((0, len(model.exits)))


def layer_widths(model: EarlyExitModel):
    """``([(heads x head size, FFN width) per layer], hidden, gated)`` of the wrapped model."""
    from compressor.core.shapes import shape_of

    spec, config = model.spec, model.config
    hidden = spec.hidden_size(config)
    head = hidden // spec.num_heads(config)
    shape = shape_of(model.backbone)
    return ([(h * head, f) for h, f in zip(shape["heads"], shape["ffn"])], hidden, spec.ffn_gated)


def score_fn(task):
    def fn(preds, labels):
        return task_score(task, compute_metrics(task, preds, list(labels)))
    return fn


def calibrate_model(model: EarlyExitModel, tokenizer, held_set, config: EarlyExitConfig,
                    device, desc: str = "calibrate") -> dict:
    """Pick ``config.rule``'s threshold on the held-out rows and set it on the model."""
    all_logits, lengths = all_exit_logits(model, tokenizer, held_set.examples, config.train.max_length,
                                          max(64, config.train.batch_size), device, desc=desc)
    labels = np.array([ex.label for ex in held_set.examples])
    record = calibrate(all_logits, labels, config.rule, config.calibrate.target,
                       score_fn(held_set.task), cost_table(model, lengths), model.regression,
                       config.tolerance, config.calibrate.measure)
    record["rows"] = len(held_set.examples)
    model.set_rule(config.rule, record["threshold"], config.tolerance)
    model.calibration = {k: v for k, v in record.items() if k != "tried"}
    return record


def exit_report(model: EarlyExitModel, tokenizer, dataset, max_length: int, device,
                rule: Optional[str] = None, threshold: Optional[float] = None,
                desc: Optional[str] = None) -> dict:
    """Score, exit-layer histogram and FLOPs saved on ``dataset`` at the model's rule (or the one given)."""
    from compressor.exit.rules import exit_points, flops_saved

    rule = rule or model.rule
    threshold = model.threshold if threshold is None else threshold
    all_logits, lengths = all_exit_logits(model, tokenizer, dataset.examples, max_length, 64,
                                          device, desc=desc)
    where, chosen = exit_points(all_logits, rule, threshold, model.regression, model.tolerance)
    preds = chosen[:, 0] if model.regression else chosen.argmax(-1)
    labels = [ex.label for ex in dataset.examples]
    metrics = compute_metrics(dataset.task, preds, labels)
    final = all_logits[-1]
    full = compute_metrics(dataset.task, final[:, 0] if model.regression else final.argmax(-1), labels)
    widths, hidden, gated = layer_widths(model)
    flops = flops_saved(lengths, where, widths, hidden, model.exits, model.config.num_labels, gated)
    per_exit = {}
    for k, layer in enumerate(model.exits):
        per_exit[str(layer)] = int((where == k).sum())
    return {"rule": rule, "threshold": threshold, "metrics": metrics,
            "score": task_score(dataset.task, metrics), "metrics_without_exits": full,
            "score_without_exits": task_score(dataset.task, full),
            "exit_histogram": per_exit, "mean_exit_layer": round(float(np.mean(
                [model.exits[k] for k in where])), 4) if len(where) else None, **flops}
