"""Progressive module replacing (Xu et al. 2020, "BERT-of-Theseus").

:class:`TheseusGroup` stands where a group of consecutive predecessor layers stood in the
encoder's layer list and runs, on each call, either those layers in turn or the group's
successor layer, with the arguments the encoder passes to one layer (MPNet's shared
relative-position bias and the masks go through unchanged). :class:`Replacing` is the
``fit`` callback that draws, at every optimiser step, which groups are replaced.

Gradients: the predecessor layers are frozen (as in the paper). A successor whose group
was not replaced in a step gets no gradient in one process, so the optimiser leaves it be,
as in the paper (a step that drew no successor moves nothing). Under data parallel every
trainable parameter must get a gradient each step (and fp16's loss scaler wants one): there
an unchosen successor is tied to the output by ``0 * sum(its parameters)``, a zero gradient
that costs no forward (AdamW's momentum and weight decay still move it a little, as
LayerDrop's skipped layers are moved). The draws come from the callback's own
generator seeded by the training seed: the same on every rank.
"""
from __future__ import annotations

import copy
import inspect
from typing import List, Optional, Sequence

import torch
from torch import nn

from compressor.core import distributed
from compressor.core.arch import arch_of
from compressor.core.errors import CompressorError
from compressor.engine.train import Callback


def group_sizes(layers: int, groups: int) -> List[int]:
    """Consecutive group sizes of ``layers`` into ``groups`` (the first ones one larger when uneven)."""
    if not 1 <= groups <= layers:
        raise CompressorError(f"num_layers must be between 1 and the model's {layers} layers, "
                              f"got {groups}")
    return [layers // groups + (1 if i < layers % groups else 0) for i in range(groups)]


def replacement_rate(schedule: str, step: int, rate: float = 0.5, k: float = 0.0,
                     b: float = 0.0) -> float:
    """p at optimiser step ``step`` (steps done): ``rate``, or ``min(1, k * step + b)``."""
    if schedule == "constant":
        return float(rate)
    if schedule == "linear":
        return float(min(1.0, k * step + b))
    raise CompressorError(f"unknown schedule {schedule!r}; use constant or linear")


def _hidden_of(output, like: torch.Tensor) -> torch.Tensor:
    """The hidden states in a layer's output: the output itself (transformers 5), or the entry of
    its tuple shaped as the input (first in BERT's, last in DistilBERT's of transformers 4)."""
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, (tuple, list)):
        for entry in output:
            if isinstance(entry, torch.Tensor) and entry.shape == like.shape:
                return entry
    raise CompressorError(f"a layer returned {type(output).__name__} with no hidden states "
                          "shaped as its input: its layers cannot be grouped")


def _with_hidden(output, hidden: torch.Tensor, like: torch.Tensor):
    """``output`` with its hidden states replaced by ``hidden``."""
    if isinstance(output, torch.Tensor):
        return hidden
    for j, entry in enumerate(output):
        if isinstance(entry, torch.Tensor) and entry.shape == like.shape:
            return type(output)((*output[:j], hidden, *output[j + 1:]))
    raise CompressorError("a layer's output has no hidden states")  # _hidden_of said so first


class TheseusGroup(nn.Module):
    """One group: its predecessor layers (frozen) and its successor; ``replaced`` picks in training,
    the successor always runs in eval mode (the paper's inference)."""

    def __init__(self, predecessors: Sequence[nn.Module], successor: nn.Module):
        super().__init__()
        self.predecessors = nn.ModuleList(predecessors)
        self.successor = successor
        self.replaced = True
        self.zero_path = False    # tie an unused successor to the output (data parallel)
        params = list(inspect.signature(predecessors[0].forward).parameters)
        self._input_name = params[0] if params else "hidden_states"

    def uses_successor(self) -> bool:
        return self.replaced or not self.training

    def forward(self, *args, **kwargs):
        if self.uses_successor():
            return self.successor(*args, **kwargs)
        positional = bool(args)
        hidden = args[0] if positional else kwargs[self._input_name]
        first = hidden
        output = None
        for layer in self.predecessors:
            if positional:
                output = layer(hidden, *args[1:], **kwargs)
            else:
                output = layer(**{**kwargs, self._input_name: hidden})
            hidden = _hidden_of(output, first)
        if self.zero_path and self.training:
            tie = sum(p.sum() for p in self.successor.parameters() if p.requires_grad)
            output = _with_hidden(output, hidden + 0 * tie.to(hidden.dtype), first)
        return output


def theseus_model(model: nn.Module, num_layers: int, init: str = "last",
                  freeze_shared: bool = True) -> List[TheseusGroup]:
    """Turn ``model`` (a task model, changed in place) into a Theseus model: its layer list holds
    ``num_layers`` groups, each with a successor copied from the group's ``init`` layer
    (``last`` or ``first``; ``prefix``: successor i copies predecessor layer i). The
    predecessor layers are frozen; with ``freeze_shared`` everything but the successors is."""
    if init not in ("last", "first", "prefix"):
        raise CompressorError(f"unknown init {init!r}; use last, first or prefix")
    spec = arch_of(model)
    layers = spec.get_layers(model)
    originals = list(layers)
    for p in model.parameters():
        if freeze_shared:
            p.requires_grad_(False)
    groups, start = [], 0
    for i, size in enumerate(group_sizes(len(originals), num_layers)):
        members = originals[start:start + size]
        start += size
        for layer in members:
            layer.requires_grad_(False)
        source = {"last": members[-1], "first": members[0], "prefix": originals[i]}[init]
        successor = copy.deepcopy(source)
        successor.requires_grad_(True)
        groups.append(TheseusGroup(members, successor))
    # the layer list is changed in place: the encoder keeps looping over the same ModuleList
    layers._modules.clear()
    layers.extend(groups)
    setattr(model.config, spec.num_layers_key, len(groups))
    return groups


def groups_of(model: nn.Module) -> List[TheseusGroup]:
    return [m for m in arch_of(model).get_layers(model) if isinstance(m, TheseusGroup)]


def successor_model(model: nn.Module) -> nn.Module:
    """The Theseus ``model`` made an ordinary model of its successors alone (in place): every
    parameter trainable again, its config saying ``num_layers`` layers."""
    spec = arch_of(model)
    groups = groups_of(model)
    if not groups:
        raise CompressorError("this model has no Theseus groups")
    successors = nn.ModuleList(g.successor for g in groups)
    spec.set_layers(model, successors)
    for p in model.parameters():
        p.requires_grad_(True)
    return model


class Replacing(Callback):
    """Draws, before every optimiser step, which groups their successors replace (Bernoulli(p)
    per group); p follows ``schedule``. In eval mode every group uses its successor."""

    def __init__(self, schedule: str = "constant", rate: float = 0.5, k: float = 0.0,
                 b: float = 0.0, seed: Optional[int] = None):
        self.schedule, self.rate, self.k, self.b, self.seed = schedule, rate, k, b, seed
        self.groups: List[TheseusGroup] = []
        self.rates: List[float] = []        # p of each step drawn
        self.replaced: List[int] = []       # how many groups each step replaced
        self._generator: Optional[torch.Generator] = None
        self._k = k

    def rate_at(self, step: int) -> float:
        return replacement_rate(self.schedule, step, self.rate, self._k, self.b)

    def on_train_begin(self, state) -> None:
        self.groups = groups_of(state.model)
        if not self.groups:
            raise CompressorError("module replacing needs a Theseus model (theseus_model)")
        seed = state.config.seed if self.seed is None else self.seed
        self._generator = torch.Generator().manual_seed(seed + 104729)  # not the data order's stream
        if self.schedule == "linear" and not self.k:   # reach p = 1 at the last step
            self._k = (1.0 - self.b) / max(1, state.total_steps - 1)
        # fp16's loss scaler, too, wants a gradient in every step
        tie = (state.world_size > 1 or distributed.world_size() > 1
               or getattr(state.config, "precision", "fp32") == "fp16")
        for g in self.groups:
            g.zero_path = tie

    def on_step_begin(self, state) -> None:
        p = self.rate_at(state.step)
        draws = (torch.rand(len(self.groups), generator=self._generator) < p).tolist()
        for g, replaced in zip(self.groups, draws):
            g.replaced = bool(replaced)
        self.rates.append(p)
        self.replaced.append(sum(draws))

    def on_train_end(self, state) -> None:
        for g in self.groups:
            g.replaced, g.zero_path = True, False

    def summary(self) -> dict:
        steps = len(self.rates)
        return {"schedule": self.schedule, "k": self._k, "b": self.b, "rate": self.rate,
                "first_rate": self.rates[0] if steps else None,
                "last_rate": self.rates[-1] if steps else None,
                "replaced_share": round(sum(self.replaced) / (steps * len(self.groups)), 4)
                if steps else None}
