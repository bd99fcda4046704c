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

import inspect
from typing import Callable, Dict, List, Optional, Sequence

import torch
from torch import nn

from ..arch import arch_of
from ..distill.students import LayersStudent, teacher_layers_to_keep
from ..errors import CompressorError
from ..models import count_parameters
from ..train import Callback
from .configs import LayersPruneConfig, register_pruner


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
        scores, baseline = layer_importance(job, model)
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


# -- skipping layers -------------------------------------------------------------

class SkipLayers:
    """Forward hooks that make encoder layers pass their input through.

    ``decide(slot, layer)`` says, at each call of the layer in encoder position ``slot``,
    whether it is skipped. ``exact`` returns the input itself (scoring); otherwise the
    output is ``input + 0 * (layer_output - input)``: the same values, but every weight of
    the layer still gets a (zero) gradient, as data-parallel training requires of every
    step. A layer returning a tuple (transformers 4) keeps its other entries (attention
    weights); one returning a tensor (transformers 5) returns the new tensor. A module used
    in several positions (shared layers) is told apart by its calls' order in a forward.
    Use as a context manager, or call :meth:`remove`.
    """

    def __init__(self, model: nn.Module, decide: Callable[[int, nn.Module], bool],
                 exact: bool = False):
        self.decide, self.exact = decide, exact
        layers = arch_of(model).get_layers(model)
        slots: Dict[int, List[int]] = {}
        modules: Dict[int, nn.Module] = {}
        for i, layer in enumerate(layers):
            slots.setdefault(id(layer), []).append(i)
            modules[id(layer)] = layer
        self.calls: Dict[int, int] = {}
        self.handles = [model.register_forward_pre_hook(lambda *_: self.calls.clear())]
        for key, layer in modules.items():
            self.handles.append(layer.register_forward_hook(
                self._hook(slots[key], _input_name(layer)), with_kwargs=True))

    def _hook(self, slots: List[int], input_name: Optional[str]):
        def hook(module, args, kwargs, output):
            call = self.calls.get(id(module), 0)
            self.calls[id(module)] = call + 1
            if not self.decide(slots[call % len(slots)], module):
                return None
            hidden = args[0] if args else kwargs.get(input_name)
            if not isinstance(hidden, torch.Tensor):
                raise CompressorError(f"{type(module).__name__} was called without its hidden "
                                      "states first: its layers cannot be skipped")
            return _with_hidden(module, output, hidden, self.exact)
        return hook

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles = []

    def __enter__(self) -> "SkipLayers":
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


def _input_name(layer: nn.Module) -> Optional[str]:
    """The name of the layer's first argument, the hidden states (``hidden_states``, ``x``)."""
    params = list(inspect.signature(layer.forward).parameters)
    return params[0] if params else None


def _with_hidden(module: nn.Module, output, hidden: torch.Tensor, exact: bool):
    def skipped(out: torch.Tensor) -> torch.Tensor:
        return hidden if exact else hidden + 0 * (out - hidden)

    if isinstance(output, torch.Tensor):
        return skipped(output)
    if isinstance(output, (tuple, list)):
        # the hidden states are the entry shaped as the input (first in BERT's tuple, last in
        # DistilBERT's (attention weights, hidden states) of transformers 4)
        for j, entry in enumerate(output):
            if isinstance(entry, torch.Tensor) and entry.shape == hidden.shape:
                return type(output)((*output[:j], skipped(entry), *output[j + 1:]))
    raise CompressorError(f"{type(module).__name__} returns {type(output).__name__} with no "
                          "hidden states shaped as its input: its layers cannot be skipped")


class LayerDrop(Callback):
    """LayerDrop (Fan et al. 2019): while training, each encoder layer is skipped with
    probability ``rate``, drawn anew for each layer at every optimiser step.

    A skipped layer still runs (its output times zero is added to its input), so that every
    weight gets a gradient each step, as data parallel needs; its weights get zero
    gradients, though AdamW's weight decay and earlier momentum still move them. In eval
    mode (evaluation during training, scoring) no layer is skipped. The draws come from
    the callback's own generator seeded by the training seed: the same on every rank.
    The hooks go at the end of training.
    """

    def __init__(self, rate: float, seed: Optional[int] = None):
        if not 0 <= rate <= 1:
            raise CompressorError(f"LayerDrop rate must be in [0, 1], got {rate}")
        self.rate, self.seed = float(rate), seed
        self.skip: List[bool] = []
        self._skipper: Optional[SkipLayers] = None
        self._generator: Optional[torch.Generator] = None

    def attach(self, model: nn.Module, seed: int = 0) -> "LayerDrop":
        """Hook ``model``'s layers (what ``on_train_begin`` does); draw with :meth:`draw`."""
        self.detach()
        self._generator = torch.Generator().manual_seed(seed + 7919)   # not the data order's stream
        self.skip = [False] * len(arch_of(model).get_layers(model))
        self._skipper = SkipLayers(model, lambda slot, layer: layer.training and self.skip[slot])
        return self

    def draw(self) -> List[bool]:
        """Which layers the next step skips."""
        draws = torch.rand(len(self.skip), generator=self._generator)
        self.skip = (draws < self.rate).tolist()
        return self.skip

    def detach(self) -> None:
        if self._skipper is not None:
            self._skipper.remove()
            self._skipper = None
        self.skip = []

    def on_train_begin(self, state) -> None:
        self.attach(state.model, state.config.seed if self.seed is None else self.seed)

    def on_step_begin(self, state) -> None:
        self.draw()

    def on_train_end(self, state) -> None:
        self.detach()
