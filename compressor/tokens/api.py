"""Token pruning in memory (:func:`prune_tokens`, :func:`learn`) and folder to folder
(:func:`token_prune_loaded`, used by the stage and by :func:`compressor.tokens.stage.token_prune`).

``prune_tokens(model, config, tokenizer)`` wraps a task model in a
:class:`~compressor.tokens.model.TokenPrunedModel` (no training: the rule as set);
``learn(pruned, tokenizer, train_set, dev_set, config, teacher)`` trains it as LTP does, through
the engine's one loop (``fit``): a soft phase that learns the thresholds with the weights, then a
hard phase with the thresholds frozen. Both phases add the teacher's soft targets
(``compressor.engine.losses.soft_targets``, the registered ``kd`` loss) to the task loss.
"""
from __future__ import annotations

import time
from dataclasses import replace
from typing import Optional

import numpy as np
import torch
from torch import nn

from compressor.core.errors import CompressorError
from compressor.core.settings import config_from_dict
from compressor.engine.losses import soft_targets
from compressor.tokens.config import TokenPruneConfig
from compressor.tokens.model import TokenPrunedModel, separator_ids


def _config(config, settings: dict) -> TokenPruneConfig:
    if config is None or isinstance(config, dict):
        config = config_from_dict(TokenPruneConfig, {**(config or {}), **settings}, what="token_prune")
    config.check()
    return config


def prune_tokens(model: nn.Module, config=None, tokenizer=None, separators=None, **settings) -> TokenPrunedModel:
    """``model`` (a task model) wrapped to drop tokens between layers as ``config`` (a
    :class:`TokenPruneConfig` or a mapping, keyword ``settings`` merged in) says; no training.
    The separator ids come from ``tokenizer`` (or ``separators``)."""
    config = _config(config, settings)
    if isinstance(model, TokenPrunedModel):
        raise CompressorError("token_prune: the model drops tokens already")
    if separators is None:
        if tokenizer is None:
            raise CompressorError("token_prune: give the tokenizer (its separator ids are never dropped)")
        separators = separator_ids(tokenizer)
    from compressor.core.arch import arch_of

    layers = arch_of(model).num_layers(model.config)
    return TokenPrunedModel(model, config.by, config.values(layers), separators,
                            temperature=config.temperature)


class TokenPruneLoss:
    """``loss_fn(model, batch)`` of ``fit``: the task loss, ``kd_weight`` times the teacher's
    soft targets, and (soft phase) ``kept_weight`` times the mean share of tokens kept."""

    def __init__(self, teacher: Optional[nn.Module], config: TokenPruneConfig, kept_weight: float):
        self.teacher, self.config, self.kept_weight = teacher, config, kept_weight

    def __call__(self, model, batch: dict) -> torch.Tensor:
        out = model(**batch)
        loss = out.loss
        if self.teacher is not None and self.config.kd_weight:
            inputs = {k: v for k, v in batch.items() if k != "labels"}
            with torch.no_grad():
                teacher_logits = self.teacher(**inputs).logits
            loss = loss + self.config.kd_weight * soft_targets(out.logits, teacher_logits,
                                                               self.config.kd_temperature)
        if self.kept_weight and out.kept_share is not None:
            loss = loss + self.kept_weight * out.kept_share
        return loss


def learn(pruned: TokenPrunedModel, tokenizer, train_set, dev_set, config: TokenPruneConfig,
          teacher: Optional[nn.Module] = None, desc: str = "token prune") -> dict:
    """Train ``pruned`` in place: the soft phase (``config.learn``: thresholds learnt with the
    weights, ``config.train``) then the hard phase (``config.hard_epochs``: the rule frozen, the
    weights tuned). Returns ``{"soft": record, "hard": record}`` (each None when not run)."""
    from compressor.engine.train import fit

    if teacher is not None:
        teacher.to(next(pruned.parameters()).device)
    phases = {"soft": None, "hard": None}
    if config.learn:
        pruned.mode = "soft"
        pruned.threshold_scale = config.threshold_lr / config.train.lr
        pruned.thresholds.requires_grad_(True)
        try:
            result = fit(pruned, tokenizer, train_set, dev_set, config.train,
                         TokenPruneLoss(teacher, config, config.kept_weight), desc=f"{desc} (soft)")
        finally:
            pruned.thresholds.requires_grad_(False)
            with torch.no_grad():
                pruned.thresholds.clamp_(min=0.0)
        phases["soft"] = _phase_record(result, pruned)
    if config.hard_epochs > 0:
        pruned.mode = "hard"
        result = fit(pruned, tokenizer, train_set, dev_set, replace(config.train, epochs=config.hard_epochs),
                     TokenPruneLoss(teacher, config, 0.0), desc=f"{desc} (hard)")
        phases["hard"] = _phase_record(result, pruned)
    pruned.mode = "gather"
    pruned.eval()
    return phases


def _phase_record(result: dict, pruned: TokenPrunedModel) -> dict:
    best = result["best"] or {}
    return {"score": best.get("score"), "metrics": best.get("metrics"), "steps": result["steps"],
            "train_time_s": result["train_time_s"], "values": pruned.values(),
            "loss_curve": result.get("loss_curve")}


@torch.no_grad()
def kept_tokens(model: TokenPrunedModel, tokenizer, examples, max_length: int, batch_size: int = 32,
                device=None) -> dict:
    """How many tokens each layer computed on, over ``examples`` (each row as at batch 1):
    ``{"layers": [mean share of each row's tokens per layer], "tokens": [mean count per layer],
    "rows"}``. Layer 1 computes on every token."""
    from compressor.core.batches import encode, iter_batches, to_device

    items = encode(tokenizer, examples, max_length, model.config)
    device = device or next(model.parameters()).device
    model.eval()
    counts = []
    for batch in iter_batches(items, batch_size, tokenizer.pad_token_id or 0, False):
        batch.pop("order", None)
        batch.pop("labels", None)
        counts.append(model(**to_device(batch, device)).kept_tokens.float().cpu().numpy())
    if not counts:
        return {"layers": [], "tokens": [], "rows": 0}
    kept = np.concatenate(counts)
    share = kept / kept[:, :1]
    return {"layers": [round(float(v), 4) for v in share.mean(0)],
            "tokens": [round(float(v), 2) for v in kept.mean(0)], "rows": int(kept.shape[0]),
            "mean_share": round(float(share.mean()), 4)}


def search_values(pruned: TokenPrunedModel, tokenizer, held_set, config: TokenPruneConfig, task,
                  device=None) -> dict:
    """Choose the rule's values on ``held_set`` (rows no model in the chain learned from): every
    candidate of ``config.search_candidates()`` is scored there; the one whose layers compute on
    the fewest tokens (the mean share of a row's tokens over the layers) with a score at most
    ``config.max_drop`` points below the unpruned model's wins (ties: the earlier candidate). None
    within: the rule drops nothing. ``pruned`` is left with the values chosen; returns the search
    record (the reference score, each candidate's score, drop and kept shares, the choice)."""
    from compressor.core.metrics import task_score
    from compressor.engine.scoring import score

    if held_set is None or not len(held_set):
        raise CompressorError("token_prune search_on: holdout needs the rows the teacher was fine-tuned "
                              "without (compressor finetune --holdout N)")
    length = config.max_length
    layers = pruned.total_layers
    reference = task_score(task, score(pruned.backbone, tokenizer, held_set, length, device=device,
                                       desc="search: unpruned"))
    tried, best = [], None
    for candidate in config.search_candidates():
        values = config.values_of(candidate, layers)
        pruned.set_values(values)
        got = task_score(task, score(pruned, tokenizer, held_set, length, device=device,
                                     desc=f"search: {candidate}"))
        kept = kept_tokens(pruned, tokenizer, held_set.examples, length, device=device)
        entry = {"candidate": candidate, "values": values, "score": round(got, 4),
                 "drop": round(reference - got, 4), "kept_tokens": kept["layers"],
                 "mean_share": kept["mean_share"], "within": reference - got <= config.max_drop + 1e-9}
        tried.append(entry)
        if entry["within"] and (best is None or entry["mean_share"] < best["mean_share"]):
            best = entry
    none = [1.0] * (layers - 1) if config.by == "ratio" else [0.0] * (layers - 1)
    pruned.set_values(best["values"] if best else none)
    return {"search_on": "holdout", "search_rows": len(held_set), "max_drop": config.max_drop,
            "unpruned_score": round(reference, 4), "candidates": tried,
            "chosen": best["candidate"] if best else None, "values": pruned.values(),
            "note": None if best else f"no candidate within {config.max_drop} points: nothing is dropped"}


def token_prune_loaded(model_dir: str, task, train_set, dev_set, config: TokenPruneConfig, out_dir: str,
                       meta: dict, teacher_dir: Optional[str] = None, desc: str = "token prune",
                       holdout_set=None) -> dict:
    """Wrap the task checkpoint ``model_dir`` (and train it, as ``config`` says) into ``out_dir``;
    return the stage record: scores before and after, the kept tokens per layer on dev, the
    learnt (or searched: ``holdout_set``, the teacher's held-out rows) values and each phase's
    record."""
    from compressor.core.device import resolve_device
    from compressor.core.metrics import task_score
    from compressor.core.models import count_parameters, load_for_task, save_checkpoint
    from compressor.engine.scoring import score
    from compressor.engine.teacher import load_teacher
    from compressor.engine.train import set_seed

    config.check()
    set_seed(config.seed)
    device = resolve_device(config.device)
    model, tokenizer = load_for_task(model_dir, task, attn_implementation="eager")
    if not hasattr(model, "config") or getattr(model, "compressor_kind", "hf") != "hf":
        raise CompressorError(f"token_prune: {model_dir} is not a transformers task model")
    start = time.perf_counter()
    model.to(device).eval()
    before = score(model, tokenizer, dev_set, config.max_length, device=device, desc="score before")
    trains = config.learn or config.hard_epochs > 0
    teacher = None
    if trains and config.kd_weight:
        teacher, _, _ = load_teacher(config.teacher, model, task, teacher_dir, model_dir,
                                     tokenizer=tokenizer)
    pruned = prune_tokens(model, config, tokenizer).to(device)
    search = None
    if config.search_on == "holdout":
        search = search_values(pruned, tokenizer, holdout_set, config, task, device=device)
    phases = learn(pruned, tokenizer, train_set, dev_set, config, teacher, desc=desc) if trains else {}
    after = score(pruned, tokenizer, dev_set, config.max_length, device=device, desc="score pruned")
    kept = kept_tokens(pruned, tokenizer, dev_set.examples, config.max_length, device=device)
    pruned.to("cpu")
    size = save_checkpoint(pruned, tokenizer, out_dir, meta)
    return {"metrics": after, "score": task_score(task, after), "split": "dev",
            "score_before": task_score(task, before), "metrics_before": before,
            "parameters": count_parameters(pruned.backbone), "by": config.by, "values": pruned.values(),
            "kept_tokens": kept, "phases": phases, "search": search, "size_bytes": size,
            "train_time_s": round(time.perf_counter() - start, 2)}
