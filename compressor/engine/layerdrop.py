"""Skipping encoder layers: :class:`SkipLayers` (hooks that pass a layer's input through) and
:class:`LayerDrop` (Fan et al. 2019), the training callback that skips each layer at random so
that a model learns to do without some of them (recovery after layer pruning uses it)."""
from __future__ import annotations

import inspect
from typing import Callable, Dict, List, Optional

import torch
from torch import nn

from compressor.core.arch import arch_of
from compressor.core.errors import CompressorError
from compressor.engine.train import Callback


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
