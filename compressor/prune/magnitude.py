"""Unstructured magnitude pruning (Gordon et al. 2020, "Compressing BERT").

The weights of the encoder layers' linear maps (query, key and value or a fused qkv, the
attention output, FFN in and out) and, with ``embeddings``, the word-embedding matrix are
ranked by ``|w|`` and the smallest set to zero: over all chosen matrices at once (scope
``global``, one threshold) or each matrix to the sparsity on its own (scope ``layer``).
Biases, norms, position embeddings and the classifier are never touched.

``oneshot`` prunes to the target at once, then recovers (``job.recover``) with a
:class:`MaskKeeper` holding the pruned weights at zero after every optimiser step.
``gradual`` ramps sparsity up while recovering with the cubic schedule of Zhu & Gupta
(2017), ``s_t = s_f (1 - (1 - t/T)^3)`` over the recovery's ``T`` optimiser steps, the masks
updated every ``max(1, T // 20)`` steps and at step ``T``; no checkpoint is kept before the
final sparsity is reached.

The masks live in the callback, not in the model: when pruning is done the weights hold
exact zeros in dense matrices, and the model saves, exports and loads as any other (which
is why a dense runtime runs it no faster; see ``bench/experiments/sparse_latency.py``).
"""
from __future__ import annotations

from typing import Dict, List, Optional

import torch
from torch import nn

from compressor.core.arch import arch_of
from compressor.core.errors import CompressorError
from compressor.core.models import count_parameters
from compressor.engine.train import Callback
from compressor.prune.configs import MagnitudePruneConfig, register_pruner

UPDATES = 20   # a gradual schedule updates its masks about this many times


def chosen_weights(model: nn.Module, embeddings: bool = False) -> Dict[str, nn.Parameter]:
    """The matrices magnitude pruning works on, by parameter name, in model order: every
    encoder layer's attention projections and output and FFN in/out weights, and with
    ``embeddings`` the word-embedding matrix."""
    spec = arch_of(model)
    names = {id(p): n for n, p in model.named_parameters()}
    params: List[nn.Parameter] = []
    if embeddings:
        params.append(model.get_input_embeddings().weight)
    for layer in spec.get_layers(model):
        for linear in list(spec.attention(layer).values()) + list(spec.ffn(layer).values()):
            params.append(linear.weight)
    chosen: Dict[str, nn.Parameter] = {}
    for p in params:
        if id(p) in names and names[id(p)] not in chosen:
            chosen[names[id(p)]] = p
    return chosen


def cubic_sparsity(step: int, total: int, final: float, initial: float = 0.0) -> float:
    """Zhu & Gupta's schedule: the sparsity after ``step`` of ``total`` steps, ``initial`` at
    step 0 and ``final`` from step ``total`` on."""
    if total <= 0 or step >= total:
        return final
    return final + (initial - final) * (1.0 - max(step, 0) / total) ** 3


def _smallest(scores: torch.Tensor, k: int) -> torch.Tensor:
    """A bool mask of exactly ``k`` entries of the flat ``scores``: the smallest (ties broken
    by position, so already-zero weights count once and the count is exact)."""
    pruned = torch.zeros_like(scores, dtype=torch.bool)
    if k <= 0:
        return pruned
    if k >= scores.numel():
        return ~pruned
    threshold = torch.kthvalue(scores, k).values
    pruned = scores < threshold
    ties = (scores == threshold).nonzero().flatten()
    pruned[ties[:k - int(pruned.sum())]] = True
    return pruned


def magnitude_masks(weights: Dict[str, torch.Tensor], sparsity: float,
                    scope: str = "global") -> Dict[str, torch.Tensor]:
    """name -> bool mask (True: pruned) taking ``round(sparsity * n)`` weights by ``|w|``,
    over all ``weights`` together (``global``) or per matrix (``layer``)."""
    if scope == "layer":
        return {name: _smallest(w.detach().abs().flatten().float(), round(sparsity * w.numel()))
                .view_as(w) for name, w in weights.items()}
    if scope != "global":
        raise CompressorError(f"scope must be global or layer, got {scope!r}")
    flat = torch.cat([w.detach().abs().flatten().float().cpu() for w in weights.values()])
    pruned = _smallest(flat, round(sparsity * flat.numel()))
    masks, start = {}, 0
    for name, w in weights.items():
        masks[name] = pruned[start:start + w.numel()].view_as(w).to(w.device)
        start += w.numel()
    return masks


class MaskKeeper(Callback):
    """Holds pruned weights at zero through training: the masks are re-applied right after
    every optimiser step. With ``schedule`` gradual the masks grow from 0 to ``final`` on
    the cubic schedule over the run's steps, and ``may_keep`` refuses every checkpoint
    scored before ``final`` is reached.

    It keeps the parameters themselves, not their names, so it works on whatever module
    ``fit`` trains (a distillation ``Trainee`` wraps the pruned model).
    """

    def __init__(self, weights: Dict[str, nn.Parameter], final: float, scope: str = "global",
                 gradual: bool = False, masks: Optional[Dict[str, torch.Tensor]] = None):
        self.weights, self.final, self.scope, self.gradual = weights, final, scope, gradual
        self.masks = masks if masks is not None else {}
        self.current = 0.0 if gradual else final
        self.total = 0
        self.every = 1
        self.updates: List[dict] = []     # gradual: (step, sparsity) of each mask update

    @property
    def reached(self) -> bool:
        return self.current >= self.final

    def prune_to(self, sparsity: float, step: int = 0) -> None:
        """New masks at ``sparsity`` from the current weights (never fewer pruned than now:
        pruned weights are zero, the smallest there are), applied at once."""
        sparsity = max(sparsity, self.current if self.masks else 0.0)
        self.apply()   # an optimiser step has just moved the pruned weights off zero
        self.masks = magnitude_masks(self.weights, sparsity, self.scope)
        self.current = sparsity
        self.updates.append({"step": step, "sparsity": round(sparsity, 6)})
        self.apply()

    @torch.no_grad()
    def apply(self) -> None:
        for name, w in self.weights.items():
            mask = self.masks.get(name)
            if mask is None:
                continue
            if mask.device != w.device:
                mask = self.masks[name] = mask.to(w.device)
            w.masked_fill_(mask, 0)

    def on_train_begin(self, state) -> None:
        self.total = state.total_steps
        self.every = max(1, self.total // UPDATES)
        self.apply()

    def on_optimizer_step(self, state) -> None:
        if self.gradual and not self.reached and (state.step % self.every == 0
                                                  or state.step >= self.total):
            self.prune_to(cubic_sparsity(state.step, self.total, self.final), state.step)
        else:
            self.apply()

    def may_keep(self, state, entry: dict) -> bool:
        return self.reached

    def on_train_end(self, state) -> None:
        # training stopped before the schedule's end: the final sparsity all the same
        if not self.reached:
            self.prune_to(self.final, state.step)
        self.apply()


def sparsity_record(model: nn.Module, weights: Dict[str, nn.Parameter]) -> dict:
    """Share of zeros per chosen matrix, over the chosen weights, and over the whole model."""
    matrices = {name: round(float((w == 0).sum()) / w.numel(), 6) for name, w in weights.items()}
    zeros = sum(int((w == 0).sum()) for w in weights.values())
    total = sum(w.numel() for w in weights.values())
    distinct = {id(p): p for p in model.parameters()}.values()
    model_zeros = sum(int((p == 0).sum()) for p in distinct)
    return {"matrices": matrices, "pruned_weights": zeros, "chosen_weights": total,
            "sparsity": round(zeros / total, 6) if total else 0.0,
            "parameters": count_parameters(model),
            "model_zero_share": round(model_zeros / count_parameters(model), 6)}


@register_pruner(MagnitudePruneConfig)
def prune_magnitude(job, config: MagnitudePruneConfig) -> dict:
    """Prune ``job.model``'s encoder weights by magnitude as ``config`` says, recovering as
    ``config.recover`` says; the zeros are permanent in the returned model."""
    gradual = config.schedule == "gradual"
    if gradual and config.recover.mode == "none":
        raise CompressorError("magnitude schedule gradual prunes while recovering: set "
                              "recover.mode to finetune or distill, or use schedule oneshot")
    model = job.model
    weights = chosen_weights(model, config.embeddings)
    if not weights:
        raise CompressorError(f"{type(model).__name__}: no encoder weights to prune")
    keeper = MaskKeeper(weights, config.sparsity, config.scope, gradual=gradual)
    if not gradual:
        keeper.prune_to(config.sparsity)
    pruned_at = sparsity_record(model, weights) if not gradual else None
    recovery = job.recover(callbacks=[keeper], desc=f"recover (magnitude {config.sparsity:g})")
    if job.model is not model:   # a method's recovery may hand back another module object
        raise CompressorError("recovery replaced the pruned model; its masks no longer apply")
    if gradual and recovery is None:
        raise CompressorError("gradual magnitude pruning ran no recovery steps")
    keeper.apply()               # the zeros are now the model's own; the keeper goes away
    record = {"method": "magnitude", "scope": config.scope, "schedule": config.schedule,
              "target_sparsity": config.sparsity, "embeddings": config.embeddings,
              **sparsity_record(model, weights)}
    if gradual:
        record["mask_updates"] = keeper.updates
    elif pruned_at is not None:
        record["sparsity_before_recovery"] = pruned_at["sparsity"]
    if recovery is not None:
        record["recovery"] = recovery
    return record
