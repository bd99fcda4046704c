"""A task model with exit heads after chosen layers, run whole or stopped at the first sure exit.

:class:`EarlyExitModel` wraps any task model the toolkit loads (every registered architecture,
and every student it makes: distilled, pruned, Theseus, shared) without touching it: the
architecture registry (``compressor.core.arch``) says where its embeddings, layers, final norm and
classifier are. An exit head reads the hidden states after its layer, pooled (their mean over
the real tokens, or the first token's), through a dense layer, tanh, dropout and a linear layer
to the classes (BERT's pooler and classifier shape); the model's own classifier is the last exit. Forward in training gives every exit's logits (one pass with hidden states);
in eval mode with a rule set, ``.logits`` are each row's logits at the exit the rule picks.

:class:`Segment` runs layers ``[start, end)`` of the model alone (from token ids when
``start`` is 0, else from the hidden states before ``start``) and its exit, over a view of
the model (shallow copies along the changed paths, sharing every weight), so the encoder's
own forward still builds its masks and position biases (MPNet's shared relative bias, each
segment for itself). Chained, segments are the early-exit model that really stops
(:func:`run_segments`, rows that exit leaving the batch); exported, each is an ONNX graph.

A folder of kind ``early-exit`` is the wrapped model's own checkpoint (``config.json``, its
weights, ``compressor.json`` with its shape: ``transformers`` still loads the model without
exits from it) plus ``exits.safetensors`` and ``exits.json`` (layers, head, rule, threshold,
calibration).
"""
from __future__ import annotations

import copy
import os
from types import SimpleNamespace
from typing import List, Optional, Sequence

import numpy as np
import torch
from torch import nn

from compressor.core.arch import arch_of
from compressor.core.errors import CompressorError
from compressor.core.io import read_json, write_json
from compressor.core.loaders import register_loader
from compressor.exit.rules import RuleState, check_rule, exit_points

KIND = "early-exit"
HEADS_FILE = "exits.safetensors"
EXITS_FILE = "exits.json"


POOLINGS = ("mean", "cls")


def pool(hidden: torch.Tensor, mask: Optional[torch.Tensor], how: str) -> torch.Tensor:
    """``[rows, tokens, hidden]`` -> ``[rows, hidden]``: the first token's state, or the mean over
    the real tokens (an early layer's first token knows little of the sentence yet)."""
    if how == "cls":
        return hidden[:, 0]
    if mask is None:
        return hidden.mean(1)
    weights = mask.to(hidden.dtype).unsqueeze(-1)
    return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1.0)


class ExitHead(nn.Module):
    """Dense + tanh + dropout + linear over the pooled hidden states (BERT's pooler and
    classifier shape)."""

    def __init__(self, hidden: int, classes: int, dropout: float = 0.1):
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(dropout)
        self.out = nn.Linear(hidden, classes)

    def forward(self, cls_state: torch.Tensor) -> torch.Tensor:
        return self.out(self.dropout(torch.tanh(self.dense(cls_state))))


def choose_layers(layers, total: int) -> List[int]:
    """The 1-based layers that get an exit (the last layer is the model's own classifier)."""
    if layers in (None, "all", []):
        return list(range(1, total))
    chosen = sorted({int(layer) for layer in layers})
    bad = [layer for layer in chosen if not 1 <= layer <= total]
    if bad:
        raise CompressorError(f"exit layers must be between 1 and the model's {total} layers, "
                              f"got {bad[0]}")
    return [layer for layer in chosen if layer != total]


class EarlyExitModel(nn.Module):
    """``backbone`` (a task model) with an :class:`ExitHead` after each of ``layers``."""

    compressor_kind = KIND

    def __init__(self, backbone: nn.Module, layers=None, dropout: float = 0.1,
                 rule: Optional[str] = None, threshold: Optional[float] = None, tolerance: float = 0.1,
                 pooling: str = "mean"):
        super().__init__()
        if pooling not in POOLINGS:
            raise CompressorError(f"unknown pooling {pooling!r}; use {', '.join(POOLINGS)}")
        self.pooling = pooling
        self.backbone = backbone
        self.spec = arch_of(backbone)
        self.config = backbone.config
        total = self.spec.num_layers(backbone.config)
        self.exit_layers = choose_layers(layers, total)
        self.total_layers = total
        hidden = self.spec.hidden_size(backbone.config)
        self.heads = nn.ModuleList(ExitHead(hidden, backbone.config.num_labels, dropout)
                                   for _ in self.exit_layers)
        std = getattr(backbone.config, "initializer_range", 0.02)
        for head in self.heads:
            for linear in (head.dense, head.out):
                nn.init.normal_(linear.weight, std=std)
                nn.init.zeros_(linear.bias)
        self.dropout = dropout
        self.rule, self.threshold, self.tolerance = rule, threshold, tolerance
        self.calibration: Optional[dict] = None
        self.backbone_fixed = False   # training the exits alone: the model stays in eval mode

    def train(self, mode: bool = True):
        super().train(mode)
        if self.backbone_fixed:
            self.backbone.eval()
        return self

    # -- what the toolkit reads off a model -----------------------------------------
    @property
    def regression(self) -> bool:
        return self.config.num_labels == 1

    @property
    def exits(self) -> List[int]:
        """The layer after which each exit sits, the model's own classifier last."""
        return self.exit_layers + [self.total_layers]

    @property
    def compressor_shape(self):
        from compressor.core.shapes import shape_of

        return shape_of(self.backbone)

    def set_rule(self, rule: Optional[str], threshold: Optional[float] = None,
                 tolerance: Optional[float] = None) -> None:
        if rule is not None:
            check_rule(rule, threshold, self.regression)
        self.rule, self.threshold = rule, threshold
        if tolerance is not None:
            self.tolerance = tolerance

    # -- forward ------------------------------------------------------------------
    def exit_logits_from(self, features: torch.Tensor) -> torch.Tensor:
        """``[rows, early exits, hidden]`` pooled states -> ``[rows, early exits, classes]``."""
        return torch.stack([head(features[:, i]) for i, head in enumerate(self.heads)], 1)

    def all_logits(self, input_ids, attention_mask=None, token_type_ids=None):
        """Every exit's logits ``[rows, exits, classes]`` (the model's own last) and the hidden
        states, in one pass of the whole model."""
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None:
            inputs["token_type_ids"] = token_type_ids
        out = self.backbone(**inputs, output_hidden_states=True)
        states = out.hidden_states
        features = torch.stack([pool(states[layer], attention_mask, self.pooling)
                                for layer in self.exit_layers], 1) if self.exit_layers else None
        early = self.exit_logits_from(features) if features is not None else \
            out.logits.new_zeros((out.logits.shape[0], 0, out.logits.shape[-1]))
        return torch.cat([early, out.logits[:, None]], 1), features

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, labels=None,
                exit_features=None, **_):
        """Training: ``.logits`` the model's own, ``.exit_logits`` every exit's. Eval mode with a
        rule set: ``.logits`` at each row's exit, ``.exit_index`` which exit (0-based).
        ``exit_features`` (``[rows, early exits, hidden]``) runs the heads alone."""
        if exit_features is not None:
            return SimpleNamespace(exit_logits=self.exit_logits_from(exit_features), logits=None)
        if torch.jit.is_tracing() or torch.onnx.is_in_onnx_export():
            raise CompressorError("an early-exit model is not one graph (ONNX Runtime cannot stop "
                                  "midway): export it as segments with compressor early-exit-export")
        logits, features = self.all_logits(input_ids, attention_mask, token_type_ids)
        out = SimpleNamespace(logits=logits[:, -1], exit_logits=logits, features=features,
                              loss=None, exit_index=None)
        if not self.training and self.rule is not None:
            where, chosen = exit_points([z.float().cpu().numpy() for z in logits.unbind(1)],
                                        self.rule, self.threshold, self.regression, self.tolerance)
            out.logits = torch.from_numpy(chosen).to(logits.device, logits.dtype)
            out.exit_index = torch.from_numpy(where)
        if labels is not None:
            from compressor.engine.losses import task_loss

            out.loss = task_loss(logits[:, -1], labels)
        return out

    # -- saving --------------------------------------------------------------------
    def exits_record(self) -> dict:
        return {"format": "compressor-early-exit/1", "exit_layers": self.exit_layers,
                "total_layers": self.total_layers, "head": "dense-tanh-linear", "pooling": self.pooling,
                "dropout": self.dropout, "rule": self.rule, "threshold": self.threshold,
                "tolerance": self.tolerance, "calibration": self.calibration}

    def save_pretrained(self, folder: str) -> None:
        from safetensors.torch import save_file

        from compressor.core.models import save_model

        save_model(self.backbone, folder)
        save_file({k: v.detach().cpu().contiguous() for k, v in self.heads.state_dict().items()},
                  os.path.join(folder, HEADS_FILE), metadata={"format": "pt"})
        write_json(os.path.join(folder, EXITS_FILE), self.exits_record())

    def without_exits(self) -> nn.Module:
        return self.backbone


def read_exits(path: str) -> dict:
    file = os.path.join(path, EXITS_FILE)
    if not os.path.isfile(file):
        raise CompressorError(f"corrupt checkpoint {path}: an early-exit folder without {EXITS_FILE}")
    record = read_json(file)
    if not isinstance(record, dict) or not isinstance(record.get("exit_layers"), list):
        raise CompressorError(f"{file}: not an exits record (no exit_layers list)")
    return record


@register_loader(KIND, describe="a model with exit heads (early exit)")
def load_early_exit(path: str, task=None, attn_implementation: Optional[str] = None, **_):
    """The wrapped model (loaded as kind ``hf`` from the same folder) and its heads."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    from compressor.core.models import load_hf

    record = read_exits(path)
    backbone, tokenizer = load_hf(path, task, attn_implementation=attn_implementation)
    model = EarlyExitModel(backbone, record["exit_layers"] or [], record.get("dropout", 0.1),
                           tolerance=record.get("tolerance", 0.1),
                           pooling=record.get("pooling", "cls"))
    if model.exit_layers != list(record["exit_layers"]):
        raise CompressorError(f"corrupt checkpoint {path}: {EXITS_FILE} lists exit layers "
                              f"{record['exit_layers']} for a {model.total_layers}-layer model")
    try:
        state = load_file(os.path.join(path, HEADS_FILE))
        model.heads.load_state_dict(state)
    except (SafetensorError, OSError, RuntimeError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise CompressorError(f"corrupt checkpoint {path}: cannot read its exit heads ({first})") from None
    if record.get("rule"):
        model.set_rule(record["rule"], record.get("threshold"))
    model.calibration = record.get("calibration")
    return model.eval(), tokenizer


# -- segments ----------------------------------------------------------------------

class _PassThrough(nn.Module):
    """Stands for the embeddings of a later segment: the hidden states come in as ``inputs_embeds``."""

    def forward(self, *args, **kwargs):
        # the one floating-point input, however the encoder passes it (DistilBERT: positionally)
        for value in list(args) + list(kwargs.values()):
            if isinstance(value, torch.Tensor) and value.is_floating_point():
                return value
        raise CompressorError("a later segment was called without its hidden states")


def _view(model: nn.Module, replace: dict) -> nn.Module:
    """A copy of ``model`` whose modules at the paths in ``replace`` are swapped: each module on
    a changed path is a shallow copy with its own child table; every weight is shared."""
    root = copy.copy(model)
    root._modules = dict(model._modules)
    for path, new in replace.items():
        parts = path.split(".")
        node = root
        for part in parts[:-1]:
            child = copy.copy(node._modules[part])
            child._modules = dict(child._modules)
            node._modules[part] = child
            node = child
        node._modules[parts[-1]] = new
    return root


class Segment(nn.Module):
    """Layers ``[start, end)`` (0-based) of an :class:`EarlyExitModel` and the exit after them.

    ``forward(input_ids | hidden_states, attention_mask[, token_type_ids])`` returns
    ``(hidden_states, logits)``, or the logits alone for the last segment (the model's own
    classifier, after its final norm and pooler).
    """

    def __init__(self, model: EarlyExitModel, start: int, end: int, head: Optional[int]):
        super().__init__()
        spec, backbone = model.spec, model.backbone
        self.first, self.last = start == 0, end == model.total_layers
        self.start, self.end = start, end
        layers = spec.get_layers(backbone)
        replace = {spec.resolve(backbone, spec.layers): nn.ModuleList(list(layers)[start:end])}
        if not self.first:
            replace[spec.resolve(backbone, spec.embeddings)] = _PassThrough()
            if spec.has_module(backbone, spec.post_embeddings):
                replace[spec.resolve(backbone, spec.post_embeddings)] = nn.Identity()
        if not self.last and spec.has_module(backbone, spec.final_norm):
            replace[spec.resolve(backbone, spec.final_norm)] = nn.Identity()
        view = _view(backbone, replace)
        self.net = view if self.last else spec.base_model(view)
        self.head = None if self.last else model.heads[head]
        self.pooling = model.pooling
        self.types = self.first and _uses_types(backbone)

    def forward(self, x, attention_mask, token_type_ids=None):
        inputs = {"attention_mask": attention_mask}
        inputs["input_ids" if self.first else "inputs_embeds"] = x
        if self.types and token_type_ids is not None:
            inputs["token_type_ids"] = token_type_ids
        if self.last:
            return self.net(**inputs).logits
        hidden = self.net(**inputs).last_hidden_state
        return hidden, self.head(pool(hidden, attention_mask, self.pooling))


def _uses_types(backbone) -> bool:
    from compressor.core.arch import uses_token_type_ids

    return uses_token_type_ids(backbone.config)


def segments_of(model: EarlyExitModel) -> List[Segment]:
    """One segment per exit: embeddings and the layers up to the first exit, then the layers
    between exits, the last ending at the model's own classifier."""
    out, start = [], 0
    for k, end in enumerate(model.exits):
        out.append(Segment(model, start, end, k if end != model.total_layers else None))
        start = end
    return out


@torch.no_grad()
def run_segments(model: EarlyExitModel, input_ids, attention_mask, token_type_ids=None,
                 rule: Optional[str] = None, threshold: Optional[float] = None,
                 segments: Optional[Sequence[Segment]] = None):
    """The early-exit model that really stops: segments in turn, each row leaving the batch at
    its exit (padding past the longest remaining row is cut). Returns ``(logits, exit index)``
    per row in input order (numpy)."""
    rule = rule or model.rule
    threshold = model.threshold if threshold is None else threshold
    if rule is None:
        raise CompressorError("no exit rule: calibrate the model or give a rule and threshold")
    segments = segments or segments_of(model)
    state = RuleState(rule, threshold, len(segments), model.regression, model.tolerance)
    rows = input_ids.shape[0]
    logits_out = np.zeros((rows, model.config.num_labels), np.float32)
    where = np.full(rows, -1, np.int64)
    running = np.arange(rows)
    x, mask, types = input_ids, attention_mask, token_type_ids
    for k, segment in enumerate(segments):
        out = segment(x, mask, types)
        hidden, logits = (None, out) if segment.last else out
        logits = logits.float().cpu().numpy()
        stop = state.step(logits)
        logits_out[running[stop]] = logits[stop]
        where[running[stop]] = k
        if stop.all():
            break
        go = torch.from_numpy(np.flatnonzero(~stop))
        running = running[~stop]
        state.keep(~stop)
        mask = mask[go]
        width = int(mask.sum(1).max())
        mask, x = mask[:, :width], hidden[go][:, :width]
        types = None
    return logits_out, where
