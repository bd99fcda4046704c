"""Whole-layer pruning (method ``layers``) and LayerDrop training (Fan et al. 2019).

:func:`prune_layers` removes encoder layers for real: the model that comes out is an
ordinary smaller model of its architecture (``num_hidden_layers`` says how many are
left), so it saves and loads as any other. Which layers go is a ``rule``:

- ``top``: the top ``drop`` layers (Sajjad et al.: the top of the encoder is the most
  task-specific and the easiest to retrain);
- ``every_other``: keep every other layer, exactly as a layer-cut distillation student
  with ``pick: every`` and no ``num_layers`` keeps them (``distill.students``): half the
  layers, ``max(1, n // 2)``, at 0-based ``int(i * n / keep)``. With an even count that
  is layers 0, 2, 4, ...; with 5 layers it keeps 0 and 2 (not 0, 2, 4);
- ``list``: the 0-based ``layers`` given;
- ``importance``: the ``drop`` layers whose skipping (the layer replaced by the identity)
  raises the task loss on the importance sample least.

``drop`` 0 means half (the layers kept are ``max(1, n // 2)``, as ``every_other`` keeps).

:class:`LayerDrop` skips each layer at random while a model trains, so that it learns
to do without some of them (``recover.layerdrop``).
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from compressor.core import distributed
from compressor.core.arch import arch_of
from compressor.engine.students import LayersStudent, teacher_layers_to_keep
from compressor.core.errors import CompressorError
from compressor.core.models import count_parameters
from compressor.engine.layerdrop import LayerDrop, SkipLayers  # noqa: F401  (LayerDrop: the prune API names it)
from compressor.prune.configs import LayersPruneConfig, register_pruner


@register_pruner(LayersPruneConfig)
def prune_layers(job, config: LayersPruneConfig) -> dict:
    """Remove whole encoder layers of ``job.model`` as ``config.rule`` says, then recover.

    Returns ``{"method", "rule", "layers_before", "kept", "dropped", "importance" (rule importance:
    the loss rise per original layer, with "baseline_loss"), "parameters_before",
    "parameters_after", "recovery"}``; ``kept`` and ``dropped`` are original 0-based indices.
    """
    model = job.model
    spec = arch_of(model)
    layers = spec.get_layers(model)
    n = len(layers)
    _check_settings(config, n)
    record = {"method": "layers", "rule": config.rule, "layers_before": n}
    if config.rule == "importance":
        candidates = [i for i in range(n) if i not in _unmovable(model)]
        count = _drop_count(config, n)
        if count > len(candidates):
            raise CompressorError(f"layers: drop {count} of {n} layers, but layer 0 of this "
                                  f"{spec.model_type} model must stay")
        # every process of a data-parallel run drops the layers rank 0 chose
        scores, baseline = distributed.broadcast(layer_importance(job, model))
        record["importance"], record["baseline_loss"] = scores, baseline
        order = sorted(candidates, key=lambda i: (scores[i], -i))   # ties: the higher layer goes
        dropped = sorted(order[:count])
    elif config.rule == "top":
        dropped = list(range(n - _drop_count(config, n), n))
    elif config.rule == "every_other":
        kept = [i - 1 for i in teacher_layers_to_keep(LayersStudent(pick="every"), n)]
        dropped = [i for i in range(n) if i not in kept]
    else:
        dropped = sorted(set(config.layers))
        stuck = [i for i in dropped if i in _unmovable(model)]
        if stuck:
            raise CompressorError(f"layers: layer {stuck[0]} of this {spec.model_type} model must "
                                  "stay: its first layer is built unlike the others")
    kept = [i for i in range(n) if i not in dropped]
    record["parameters_before"] = count_parameters(model)
    keep_layers(model, kept)
    record.update(kept=kept, dropped=dropped, parameters_after=count_parameters(model))
    record["recovery"] = job.recover(desc="recover layers")
    return record


def keep_layers(model: nn.Module, kept: Sequence[int]) -> nn.Module:
    """Keep only the encoder layers ``kept`` (0-based, in that order), in place."""
    spec = arch_of(model)
    layers = spec.get_layers(model)
    spec.set_layers(model, nn.ModuleList(layers[i] for i in kept))
    pruned = getattr(model.config, "pruned_heads", None)
    if pruned:   # transformers' own record of pruned heads is by layer index
        moved = {new: pruned.get(old, pruned.get(str(old))) for new, old in enumerate(kept)}
        model.config.pruned_heads = {new: heads for new, heads in moved.items() if heads}
    return model


def layer_importance(job, model: nn.Module) -> tuple:
    """The task loss on the importance sample with each layer skipped, less the loss with
    none skipped: ``([rise per layer], baseline)``. Eval mode, no gradients."""
    n = len(arch_of(model).get_layers(model))
    was_training = model.training
    model.to(job.device).eval()
    batches = list(job.batches())

    def mean_loss() -> float:
        total, rows = 0.0, 0
        for batch in batches:
            size = len(batch["input_ids"])
            total += float(job.loss(model, batch)) * size
            rows += size
        return total / rows

    try:
        with torch.no_grad():
            baseline = mean_loss()
            scores = []
            for i in range(n):
                with SkipLayers(model, lambda slot, layer, i=i: slot == i, exact=True):
                    scores.append(mean_loss() - baseline)
    finally:
        model.train(was_training)
    return scores, baseline


def _check_settings(config: LayersPruneConfig, n: int) -> None:
    if n < 2:
        raise CompressorError(f"layers: the model has {n} layer; none can go")
    if config.layers and config.rule != "list":
        raise CompressorError(f"layers: 'layers' is for rule list, not {config.rule}")
    if config.drop and config.rule not in ("top", "importance"):
        raise CompressorError(f"layers: 'drop' is for rules top and importance, not {config.rule}")
    if config.rule in ("top", "importance") and config.drop >= n:
        raise CompressorError(f"layers: drop {config.drop} leaves none of the model's {n} layers")
    if config.rule == "list":
        if not config.layers:
            raise CompressorError("layers: rule list needs layers: the 0-based layers that go")
        bad = [i for i in config.layers
               if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n]
        if bad:
            raise CompressorError(f"layers: layer {bad[0]!r} is not one of the model's layers "
                                  f"0..{n - 1}")
        if len(set(config.layers)) == n:
            raise CompressorError(f"layers: the list names all {n} layers; at least one must stay")


def _drop_count(config: LayersPruneConfig, n: int) -> int:
    return config.drop or n - max(1, n // 2)


def _unmovable(model: nn.Module) -> set:
    """Layers that cannot go: where layers are built by position and the first is built
    unlike the others (ModernBERT's has no attention norm), the first must stay first."""
    spec = arch_of(model)
    layers = spec.get_layers(model)
    if (spec.layer_position_arg and len(layers) > 1
            and set(layers[0].state_dict()) != set(layers[1].state_dict())):
        return {0}
    return set()
