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
    """``loss_fn(model, batch)`` of ``fit``: the task loss (on the rows with a label: augmented
    rows have none), ``kd_weight`` times the teacher's soft targets, and (soft phase)
    ``kept_weight`` times the mean share of tokens kept."""

    def __init__(self, teacher: Optional[nn.Module], config: TokenPruneConfig, kept_weight: float):
        self.teacher, self.config, self.kept_weight = teacher, config, kept_weight

    def __call__(self, model, batch: dict) -> torch.Tensor:
        from compressor.core.batches import has_label
        from compressor.engine.losses import task_loss

        inputs = {k: v for k, v in batch.items() if k != "labels"}
        out = model(**inputs)
        labels = batch.get("labels")
        loss = out.logits.new_zeros(()).float()
        if labels is not None:
            known = has_label(labels)
            if known.all():
                loss = task_loss(out.logits, labels)
            elif known.any():
                loss = task_loss(out.logits[known], labels[known])
        if self.teacher is not None and self.config.kd_weight:
            with torch.no_grad():
                teacher_logits = self.teacher(**inputs).logits
            loss = loss + self.config.kd_weight * soft_targets(out.logits, teacher_logits,
                                                               self.config.kd_temperature)
        if self.kept_weight and out.kept_share is not None:
            loss = loss + self.kept_weight * out.kept_share
        return loss


def soft_phase(pruned: TokenPrunedModel, tokenizer, train_set, dev_set, config: TokenPruneConfig, train,
               teacher: Optional[nn.Module], kept_weight: float, desc: str) -> dict:
    """LTP's soft phase: the thresholds learnt with the weights (``train``: a TrainConfig) at
    ``kept_weight``; returns ``fit``'s result. The thresholds end clamped at 0, frozen."""
    from compressor.engine.train import fit

    pruned.mode = "soft"
    pruned.threshold_scale = config.threshold_lr / train.lr
    pruned.thresholds.requires_grad_(True)
    try:
        return fit(pruned, tokenizer, train_set, dev_set, train,
                   TokenPruneLoss(teacher, config, kept_weight), desc=desc)
    finally:
        pruned.thresholds.requires_grad_(False)
        with torch.no_grad():
            pruned.thresholds.clamp_(min=0.0)


def hard_phase(pruned: TokenPrunedModel, tokenizer, train_set, dev_set, config: TokenPruneConfig, train,
               teacher: Optional[nn.Module], desc: str) -> dict:
    """The weights tuned under the frozen rule (tokens masked as inference drops them)."""
    from compressor.engine.train import fit

    pruned.mode = "hard"
    return fit(pruned, tokenizer, train_set, dev_set, train, TokenPruneLoss(teacher, config, 0.0), desc=desc)


def learn(pruned: TokenPrunedModel, tokenizer, train_set, dev_set, config: TokenPruneConfig,
          teacher: Optional[nn.Module] = None, desc: str = "token prune", soft: bool = True) -> dict:
    """Train ``pruned`` in place: the soft phase (``config.learn`` and ``soft``: thresholds learnt
    with the weights, ``config.train``) then the hard phase (``config.hard_epochs``: the rule
    frozen, the weights tuned). Returns ``{"soft": record, "hard": record}`` (each None when not
    run). ``soft`` False: the soft phase ran already (a search's tuning under its choice)."""
    if teacher is not None:
        teacher.to(next(pruned.parameters()).device)
    phases = {"soft": None, "hard": None}
    if config.learn and soft:
        result = soft_phase(pruned, tokenizer, train_set, dev_set, config, config.train, teacher,
                            config.kept_weight, f"{desc} (soft)")
        phases["soft"] = _phase_record(result, pruned)
    if config.hard_epochs > 0:
        result = hard_phase(pruned, tokenizer, train_set, dev_set, config,
                            replace(config.train, epochs=config.hard_epochs), teacher, f"{desc} (hard)")
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


def _fewer_everywhere(config: TokenPruneConfig, entry: dict, failed: dict) -> bool:
    """Whether ``entry``'s rule keeps no more tokens after any layer than ``failed``'s: keep
    shares no higher (by ratio), thresholds no lower (by threshold), a kept_weight no lower
    (learn)."""
    if config.searches_weight:
        return entry["candidate"] >= failed["candidate"]
    pairs = list(zip(entry["values"], failed["values"]))
    if config.by == "ratio":
        return all(a <= b for a, b in pairs)
    return all(a >= b for a, b in pairs)


def _state(model: nn.Module) -> dict:
    return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}


def search_values(pruned: TokenPrunedModel, tokenizer, held_set, config: TokenPruneConfig, task,
                  device=None, train_set=None, teacher: Optional[nn.Module] = None,
                  desc: str = "search") -> dict:
    """Choose the rule's values on ``held_set`` (rows no model in the chain learned from).

    Every candidate of ``config.search_candidates()`` is scored there as it is (``score_before``).
    With ``config.search_epochs`` or ``search_steps``, each is then tuned so long on ``train_set``
    from the same starting weights and seed (soft targets from ``teacher``; with ``learn`` the
    candidate is a ``kept_weight`` and the tuning is the soft phase learning the thresholds),
    and scored again; the unpruned model gets the same tuning, and its tuned score is the
    reference. Candidates run from the least to the most pruning (the share of tokens kept
    before tuning; with ``learn``, the kept_weight upwards); one that loses more than
    ``config.search_skip_drop`` points rules out the later ones that keep no more tokens after
    any layer (:func:`_fewer_everywhere`), which are recorded as skipped.

    The one whose layers compute on the fewest tokens (the mean share of a row's tokens over the
    layers) with a score at most ``config.max_drop`` points below the reference wins (ties: the
    earlier candidate). None within: the rule drops nothing. ``pruned`` is left with the values
    chosen and, after tuning, the chosen candidate's tuned weights (none within: the tuned
    unpruned weights); returns the search record."""
    from compressor.core.metrics import task_score
    from compressor.engine.scoring import score
    from compressor.engine.train import set_seed

    if held_set is None or not len(held_set):
        raise CompressorError("token_prune search_on: holdout needs the rows the teacher was fine-tuned "
                              "without (compressor finetune --holdout N)")
    steps = config.search_tunes
    if steps and train_set is None:
        raise CompressorError("token_prune: the search's tuning trains on the training rows; give train_set")
    length = config.max_length
    layers = pruned.total_layers
    none = [1.0] * (layers - 1) if config.by == "ratio" else [0.0] * (layers - 1)
    start_values = pruned.values()
    weights = config.searches_weight

    def held_score(model, what):
        return task_score(task, score(model, tokenizer, held_set, length, device=device, desc=f"{desc}: {what}"))

    def kept(model):
        return kept_tokens(model, tokenizer, held_set.examples, length, device=device)

    reference_before = held_score(pruned.backbone, "unpruned")
    tried, first = [], None
    for candidate in config.search_candidates():
        values = start_values if weights else config.values_of(candidate, layers)
        pruned.set_values(values)
        if first is None or not weights:   # learn: every candidate starts from the same thresholds
            first = (held_score(pruned, f"{candidate} before tuning" if steps else str(candidate)), kept(pruned))
        got, share = first
        tried.append({"candidate": candidate, "values": values, "score_before": round(got, 4),
                      "drop_before": round(reference_before - got, 4), "kept_tokens_before": share["layers"],
                      "mean_share_before": share["mean_share"]})
    # least pruning first: most tokens kept before tuning (learn: the lowest kept_weight)
    order = sorted(range(len(tried)), key=(lambda i: tried[i]["candidate"]) if weights
                   else (lambda i: -tried[i]["mean_share_before"]))
    record = {"search_on": "holdout", "search_rows": len(held_set), "max_drop": config.max_drop,
              "search_epochs": config.search_epochs, "search_steps": config.search_steps,
              "search_skip_drop": config.search_skip_drop,
              "unpruned_score_before": round(reference_before, 4), "order": [tried[i]["candidate"] for i in order]}
    reference, start, best_state = reference_before, None, None
    if steps:
        record["tuning_rows"] = len(train_set)
        if teacher is not None:
            teacher.to(next(pruned.parameters()).device)
        tune = config.search_train()
        start = _state(pruned)

        def tuned(values, kept_weight, what):
            pruned.load_state_dict(start)
            pruned.set_values(values)
            set_seed(config.seed)   # the same batches and dropout for every candidate
            if weights and kept_weight is not None:
                result = soft_phase(pruned, tokenizer, train_set, held_set, config, tune, teacher,
                                    kept_weight, f"{desc}: {what}")
            else:
                result = hard_phase(pruned, tokenizer, train_set, held_set, config, tune, teacher,
                                    f"{desc}: {what}")
            pruned.mode = "gather"
            pruned.eval()
            return {"steps": result["steps"], "train_time_s": result["train_time_s"]}

        tuning = tuned(none, None, "unpruned")
        reference = held_score(pruned.backbone, "unpruned after tuning")
        record["unpruned_tuning"] = tuning
        best_state = _state(pruned)   # none within: the unpruned model's tuned weights go on
    record["unpruned_score"] = round(reference, 4)
    best, failed = None, []
    for i in order:
        entry = tried[i]
        ruled_out = next((f for f in failed if _fewer_everywhere(config, entry, f)), None)
        if ruled_out is not None:
            entry.update(skipped=f"keeps no more tokens after any layer than {ruled_out['candidate']}, "
                                 f"which lost {ruled_out['drop']:g} points", within=False)
            continue
        if steps:
            entry["tuning"] = tuned(entry["values"], entry["candidate"], str(entry["candidate"]))
            got = held_score(pruned, f"{entry['candidate']} after tuning")
            share = kept(pruned)
            if weights:
                entry["values"] = pruned.values()   # the learnt thresholds
        else:
            pruned.set_values(entry["values"])
            got, share = entry["score_before"], {"layers": entry["kept_tokens_before"],
                                                 "mean_share": entry["mean_share_before"]}
        entry.update(score=round(got, 4), drop=round(reference - got, 4), kept_tokens=share["layers"],
                     mean_share=share["mean_share"], within=reference - got <= config.max_drop + 1e-9)
        if entry["within"] and (best is None or entry["mean_share"] < best["mean_share"]):
            best = entry
            if steps:
                best_state = _state(pruned)
        if config.search_skip_drop and reference - got > config.search_skip_drop:
            failed.append(entry)
    if best_state is not None:
        pruned.load_state_dict(best_state)
    pruned.set_values(best["values"] if best else none)
    pruned.mode = "gather"
    pruned.eval()
    record.update(candidates=tried, chosen=best["candidate"] if best else None, values=pruned.values(),
                  note=None if best else f"no candidate within {config.max_drop} points: nothing is dropped")
    return record


def training_rows(config: TokenPruneConfig, train_set):
    """The training rows, followed by ``config.augment``'s rows (made from these very training
    rows, so from no held-out or dev row) when it names a folder. Their stored logits are not
    used: the stage's teacher gives every row's soft targets as it trains."""
    if not config.augment:
        return train_set
    from compressor.core.data.augmented import joined, read_augmented, rows_digest

    if config.augment == "recipe":
        raise CompressorError("augment: recipe names a recipe's augment stage; outside a recipe give "
                              "the folder compressor augment wrote")
    augmented = read_augmented(config.augment, train_set.task)
    if augmented.record.get("rows_digest") != rows_digest(train_set):
        raise CompressorError(f"{config.augment} was made from other training rows "
                              f"({augmented.record.get('source_rows')} rows of {augmented.record.get('data')}) "
                              f"than this stage's ({len(train_set)} of {train_set.source}): augment with the "
                              "same teacher, data and --train-limit")
    return joined(train_set, augmented)


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
    searching = config.search_on == "holdout"
    tunes = config.search_tunes
    trains = config.learn or config.hard_epochs > 0
    teacher = None
    if (trains or tunes) and config.kd_weight:
        teacher, _, _ = load_teacher(config.teacher, model, task, teacher_dir, model_dir,
                                     tokenizer=tokenizer)
    rows = training_rows(config, train_set)
    pruned = prune_tokens(model, config, tokenizer).to(device)
    search = None
    if searching:
        search = search_values(pruned, tokenizer, holdout_set, config, task, device=device,
                               train_set=rows if tunes else None, teacher=teacher, desc=f"{desc} search")
        search["augmented_rows"] = len(rows) - len(train_set)
    # a search with learn ran the soft phase under each candidate: the choice's thresholds go on
    soft = not (tunes and config.learn)
    phases = learn(pruned, tokenizer, rows, dev_set, config, teacher, desc=desc, soft=soft) if trains else {}
    if not soft:   # each candidate's soft phase ran in the search; the chosen one's weights went on
        chosen = next((c for c in search["candidates"] if c["candidate"] == search["chosen"]), None)
        phases["soft"] = {"in_search": True, "kept_weight": search["chosen"],
                          "steps": chosen["tuning"]["steps"] if chosen else None}
    after = score(pruned, tokenizer, dev_set, config.max_length, device=device, desc="score pruned")
    kept = kept_tokens(pruned, tokenizer, dev_set.examples, config.max_length, device=device)
    pruned.to("cpu")
    size = save_checkpoint(pruned, tokenizer, out_dir, meta)
    return {"metrics": after, "score": task_score(task, after), "split": "dev",
            "score_before": task_score(task, before), "metrics_before": before,
            "parameters": count_parameters(pruned.backbone), "by": config.by, "values": pruned.values(),
            "kept_tokens": kept, "phases": phases, "search": search, "size_bytes": size,
            "train_time_s": round(time.perf_counter() - start, 2)}
