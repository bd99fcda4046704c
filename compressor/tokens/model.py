"""A task model that drops tokens between its layers: :class:`TokenPrunedModel`.

It wraps any task model the toolkit loads whose layers take an additive attention mask and give
their attention probabilities (BERT, RoBERTa, XLM-R, CamemBERT, ELECTRA, MPNet; the
architecture registry says where the layers are) without touching it: the encoder's own
forward runs (embeddings, masks, MPNet's relative position bias, the pooler and classifier);
hooks on the layers read each layer's attention probabilities and change what the next layer
is given. After layer ``l`` (all but the last) the importance of token ``j`` is

    s_j = sum_i w_i mean_h P[h, i, j] / sum_i w_i      (w: the query tokens still kept)

and the rule (:mod:`compressor.tokens.config`) decides which tokens go on. Three ways to run:

* ``gather`` (eval mode, and the ONNX export): the kept tokens are gathered by computed
  indices, in their original order, so the later layers compute on fewer tokens; the mask
  and MPNet's position bias are gathered by the tokens' original positions, so a kept token
  keeps its position. In a batch every row keeps its own tokens; the batch is as wide as the
  row that keeps most, the others' extra places masked out (at batch 1 nothing is masked).
* ``hard`` (training's hard phase): the same decisions as masks on the attention (a dropped
  token is attended by nobody and counts for no importance), on the full sequence.
* ``soft`` (training's soft phase): masks ``sigmoid((s - threshold) / temperature)``,
  multiplied along the layers, enter the attention as ``log(mask)`` (0 is dropped, 1 kept),
  so the thresholds get gradients; ``.kept_share`` is the mean share of tokens kept.

``[CLS]`` (position 0) and separator tokens are always kept, and each segment of a pair keeps
at least its most important token (segments: the separators before a token). A folder of kind
``token-prune`` is the wrapped model's own checkpoint (``transformers`` loads the unpruned
model from it) plus ``tokens.json`` (the rule, the values per layer, the separator ids).
"""
from __future__ import annotations

import inspect
import os
from types import SimpleNamespace
from typing import List, Optional, Sequence

import torch
from torch import nn

from compressor.core.arch import arch_of
from compressor.core.errors import CompressorError
from compressor.core.io import read_json, write_json

KIND = "token-prune"
TOKENS_FILE = "tokens.json"
FORMAT = "compressor-token-prune/1"
MODES = ("gather", "hard", "soft")
# layers whose attention is not a plain additive mask plus probabilities (ModernBERT: local
# windows, rotary; DistilBERT: a boolean mask)
UNSUPPORTED = ("modernbert", "distilbert")


class TokenPrunedModel(nn.Module):
    """``backbone`` (a task model) dropping tokens after each layer but the last.

    ``by`` is ``threshold`` (``values``: one threshold per pruning layer, ``thresholds`` a
    parameter, learnable) or ``ratio`` (``values``: the share kept). ``separators``: the token
    ids never dropped besides the first token.
    """

    compressor_kind = KIND
    onnx_outputs = ("kept_tokens",)   # the export's second output: tokens per row and layer

    def __init__(self, backbone: nn.Module, by: str, values: Sequence[float], separators: Sequence[int],
                 temperature: float = 1e-3):
        super().__init__()
        self.spec = arch_of(backbone)
        if self.spec.model_type in UNSUPPORTED:
            raise CompressorError(f"token pruning does not support {self.spec.model_type} yet (its "
                                  "layers take no additive attention mask); supported: BERT, RoBERTa, "
                                  "XLM-R, CamemBERT, ELECTRA, MPNet")
        self.backbone = backbone
        self.config = backbone.config
        layers = self.spec.get_layers(backbone)
        self.total_layers = len(layers)
        if len(values) != self.total_layers - 1:
            raise CompressorError(f"token pruning: {len(values)} values for a {self.total_layers}-layer "
                                  f"model, which prunes after {self.total_layers - 1} layers")
        if by not in ("threshold", "ratio"):
            raise CompressorError(f"token pruning: by is threshold or ratio, got {by!r}")
        self.by = by
        self.thresholds = nn.Parameter(torch.tensor([float(v) for v in values] if by == "threshold"
                                                    else [0.0] * len(values)), requires_grad=False)
        self.keep = [float(v) for v in values] if by == "ratio" else [1.0] * len(values)
        self.separators = sorted({int(s) for s in separators})
        self.temperature = float(temperature)
        self.threshold_scale = 1.0   # the thresholds' learning rate over the model's (lr_scales)
        self.mode = "gather"         # eval mode always gathers; training uses mode hard or soft
        self._run = None             # the state of one forward (hooks read and change it)
        # the attention probabilities are read from the layers (transformers runs eager attention
        # where they are asked for)
        for index, layer in enumerate(layers):
            names = list(inspect.signature(layer.forward).parameters)
            layer.register_forward_pre_hook(_PreHook(self, index, names), with_kwargs=True)
            layer.register_forward_hook(_PostHook(self, index))

    # -- what the toolkit reads off a model ------------------------------------------
    @property
    def compressor_shape(self):
        from compressor.core.shapes import shape_of

        return shape_of(self.backbone)

    def lr_scales(self) -> dict:
        """Parameters that train at another learning rate than the model's (``fit``): the thresholds."""
        return {"thresholds": self.threshold_scale} if self.thresholds.requires_grad else {}

    def prunes_after(self, index: int) -> bool:
        """Whether any token can be dropped after layer ``index`` (0-based)."""
        if index >= self.total_layers - 1:
            return False
        if self.training and self.mode == "soft":
            return True
        if self.by == "ratio":
            return self.keep[index] < 1.0
        return bool(self.thresholds.requires_grad) or float(self.thresholds[index]) > 0.0

    def set_values(self, values: Sequence[float]) -> None:
        with torch.no_grad():
            if self.by == "threshold":
                self.thresholds.copy_(torch.tensor([float(v) for v in values]))
            else:
                self.keep = [float(v) for v in values]

    def values(self) -> List[float]:
        return [round(float(v), 8) for v in self.thresholds] if self.by == "threshold" else list(self.keep)

    # -- forward --------------------------------------------------------------------
    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, labels=None, **_):
        """``.logits`` (and ``.loss`` with labels); ``.kept_tokens`` ``[rows, layers]``: how many
        tokens each layer computed on, per row (soft mode: the sum of the masks); ``.kept_share``
        (soft mode): the mean share of the tokens kept after each pruning layer;
        ``.kept_positions`` (eval mode): per layer, ``[rows, tokens]`` the original positions of
        the tokens it computed on (a row keeping fewer than the widest: its extra places repeat
        dropped ones, masked)."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        mode = self.mode if self.training else "gather"
        if mode not in MODES:
            raise CompressorError(f"token pruning mode is one of {', '.join(MODES)}, got {mode!r}")
        real = attention_mask.bool()
        special = input_ids == -1   # all False, on the right device and shape
        for sep in self.separators:
            special = special | (input_ids == sep)
        first = (torch.arange(input_ids.shape[1], device=input_ids.device) == 0).unsqueeze(0)
        special = (special | first) & real
        # segment of each token: 0 before the first separator, 1 after it
        seps = special & ~first
        segment = (torch.cumsum(seps.long(), 1) - seps.long()) > 0
        length = real.sum(1)
        self._run = SimpleNamespace(
            mode=mode, real=real, alive=real, weight=real.to(torch.float32), special=special,
            segment=segment, positions=None, take=None, base_mask=None, bias=None, mask=None,
            kept=[length],
            shares=[], layer_positions=[])
        if mode == "gather":
            everything = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
            self._run.layer_positions.append(everything.expand(input_ids.shape[0], -1))
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None:
            inputs["token_type_ids"] = token_type_ids
        # the attention probabilities only where a layer prunes (a model that drops nothing runs
        # exactly as the model alone)
        needed = any(self.prunes_after(i) for i in range(self.total_layers - 1))
        try:
            out = self.backbone(**inputs, output_attentions=needed)
        finally:
            run, self._run = self._run, None
        result = SimpleNamespace(logits=out.logits, loss=None,
                                 kept_tokens=torch.stack([k.to(torch.float32) for k in run.kept], 1),
                                 kept_share=torch.stack(run.shares).mean() if run.shares else None,
                                 kept_positions=run.layer_positions or None)
        if labels is not None:
            from compressor.engine.losses import task_loss

            result.loss = task_loss(out.logits, labels)
        return result

    # -- one decision between layers -------------------------------------------------
    def _importance(self, probs: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """``[rows, tokens]``: the mean attention each token received from the kept queries."""
        per_query = probs.float().mean(1)                      # [rows, queries, keys]
        total = weight.sum(1, keepdim=True).clamp(min=1e-6)
        return (per_query * weight.unsqueeze(-1)).sum(1) / total

    def _forced(self, run, score: torch.Tensor, alive: torch.Tensor) -> torch.Tensor:
        """The tokens kept whatever their importance: [CLS], separators, and the most important
        other token of each segment (so both texts of a pair stay represented)."""
        forced = run.special & alive
        plain = alive & ~run.special
        places = torch.arange(score.shape[1], device=score.device).unsqueeze(0)
        for part in (~run.segment, run.segment):
            candidates = torch.where(plain & part, score, -1.0)
            best = candidates.argmax(1, keepdim=True)
            # a segment with no candidate picks place 0, [CLS], which is kept anyway
            forced = forced | (places == best)
        return forced

    def _hard_keep(self, index: int, run, score: torch.Tensor) -> torch.Tensor:
        alive = run.alive
        forced = self._forced(run, score, alive)
        if self.by == "threshold":
            keep = score >= self.thresholds[index].detach()
        else:
            # the share of the row's tokens, those always kept first (importance is at most 1)
            count = alive.sum(1, keepdim=True)
            budget = torch.ceil(count.float() * self.keep[index]).long().clamp(min=1)
            ranked = torch.where(alive, score + 2.0 * forced.to(score.dtype), -1.0)
            budget = budget.clamp(max=ranked.shape[1])
            # the budget-th largest: TopK with the row keeping most's budget as k
            top = torch.topk(ranked, budget.max(), dim=1, largest=True, sorted=True).values
            cut = top.gather(1, budget - 1)
            keep = ranked >= cut
        return alive & (keep | forced)

    def after_layer(self, index: int, probs: Optional[torch.Tensor]) -> None:
        run = self._run
        if run is None or index >= self.total_layers - 1:
            return
        if not self.prunes_after(index):   # the next layer computes on as many tokens as this one
            run.kept.append(run.weight.sum(1) if run.mode == "soft" else run.alive.sum(1))
            if run.layer_positions:
                run.layer_positions.append(run.layer_positions[-1])
            return
        if probs is None:
            raise CompressorError("token pruning needs the layers' attention probabilities "
                                  "(eager attention)")
        score = self._importance(probs, run.weight)
        if run.mode == "soft":
            mask = torch.sigmoid((score - self.thresholds[index]) / self.temperature)
            forced = self._forced(run, score.detach(), run.real)
            mask = torch.where(forced, torch.ones_like(mask), mask)
            run.weight = run.weight * mask
            run.shares.append((run.weight.sum(1) / run.real.sum(1).clamp(min=1)).mean())
            run.kept.append(run.weight.sum(1).detach())
            return
        keep = self._hard_keep(index, run, score)
        if run.mode == "hard":
            run.alive = keep
            run.weight = keep.to(torch.float32)
            run.kept.append(keep.sum(1))
            return
        # gather: the kept tokens in their order (the smallest `width` of `order`), as many as the
        # row keeping most; one TopK with a computed k (a dropped token's order is past every kept one)
        count = keep.sum(1)
        width = count.max()
        places = torch.arange(keep.shape[1], device=keep.device).unsqueeze(0)
        order = torch.where(keep, places, places + keep.shape[1])
        take = torch.topk(order, width, dim=1, largest=False, sorted=True).indices   # [rows, width]
        run.take = take
        run.alive = keep.gather(1, take)
        run.weight = run.alive.to(torch.float32)
        run.special = run.special.gather(1, take)
        run.segment = run.segment.gather(1, take)
        run.positions = take if run.positions is None else run.positions.gather(1, take)
        run.kept.append(count)
        run.layer_positions.append(run.positions)
        # what every later layer is given until the next drop, gathered once here: the mask and
        # the position bias of the tokens kept (gathered from the previous layer's, so a kept
        # token keeps its original position's values)
        run.mask, run.bias = self._gathered_mask_and_bias(run, take)

    @staticmethod
    def _gathered_mask_and_bias(run, take: torch.Tensor):
        base = run.mask if run.mask is not None else run.base_mask
        low = torch.finfo(base.dtype).min
        rows, width = take.shape
        # (expands by explicit sizes: an exported -1 costs a shape computation each)
        if base.shape[-2] != 1:     # a [rows, 1, queries, keys] mask: its rows too
            base = base.gather(2, take[:, None, :, None].expand(rows, base.shape[1], width, base.shape[-1]))
        if base.shape[1] == 1 and base.shape[2] == 1:   # [rows, 1, 1, keys]: no expand needed
            part = base.gather(3, take[:, None, None, :])
        else:
            part = base.gather(3, take[:, None, None, :].expand(rows, base.shape[1], base.shape[2], width))
        mask = torch.where(run.alive[:, None, None, :], part, low)
        bias = run.bias
        if bias is not None:
            heads, full = bias.shape[1], bias.shape[-1]
            bias = bias.expand(rows, heads, full, full)
            bias = bias.gather(2, take[:, None, :, None].expand(rows, heads, width, full))
            bias = bias.gather(3, take[:, None, None, :].expand(rows, heads, width, width))
        return mask, bias

    def before_layer(self, index: int, args: tuple, kwargs: dict, names: List[str]):
        """The next layer's hidden states, mask and position bias for the tokens kept (the
        encoder hands every layer the same full-length mask and bias)."""
        run = self._run
        if run is None:
            return None
        bound = dict(zip(names, args))
        bound.update(kwargs)
        hidden = bound["hidden_states"] if "hidden_states" in bound else args[0]
        if index == 0:
            run.base_mask = bound.get("attention_mask")
            run.bias = bound.get("position_bias")
            if run.base_mask is None:   # no mask given: nothing masked, as an additive mask
                run.base_mask = hidden.new_zeros((hidden.shape[0], 1, 1, hidden.shape[1]))
            return None
        args, kwargs = list(args), dict(kwargs)

        def put(name, value):
            if name in kwargs or not (name in names and names.index(name) < len(args)):
                kwargs[name] = value
            else:
                args[names.index(name)] = value

        base = run.base_mask
        low = torch.finfo(base.dtype).min
        if run.mode == "soft":
            put("attention_mask", base + torch.log(run.weight.clamp(min=1e-6)).to(base.dtype)[:, None, None, :])
            return tuple(args), kwargs
        if run.mode == "hard":
            put("attention_mask", torch.where(run.alive[:, None, None, :], base, torch.full_like(base, low)))
            return tuple(args), kwargs
        if run.positions is None:   # nothing dropped yet
            return None
        if run.take is not None:    # the layer before dropped tokens: its outputs are gathered
            rows, width = run.take.shape
            hidden = hidden.gather(1, run.take.unsqueeze(-1).expand(rows, width, hidden.shape[-1]))
            run.take = None
            put("hidden_states", hidden)
        put("attention_mask", run.mask)
        if run.bias is not None:
            put("position_bias", run.bias)
        return tuple(args), kwargs

    # -- saving ----------------------------------------------------------------------
    def tokens_record(self) -> dict:
        return {"format": FORMAT, "by": self.by, "values": self.values(), "separators": self.separators,
                "temperature": self.temperature, "layers": self.total_layers}

    def save_pretrained(self, folder: str) -> None:
        from compressor.core.models import save_model

        save_model(self.backbone, folder)
        write_json(os.path.join(folder, TOKENS_FILE), self.tokens_record())

    def without_pruning(self) -> nn.Module:
        return self.backbone


class _PreHook:
    def __init__(self, owner: TokenPrunedModel, index: int, names: List[str]):
        self.owner, self.index, self.names = owner, index, names

    def __call__(self, module, args, kwargs):
        return self.owner.before_layer(self.index, args, kwargs, self.names)


class _PostHook:
    def __init__(self, owner: TokenPrunedModel, index: int):
        self.owner, self.index = owner, index

    def __call__(self, module, args, output):
        probs = output[1] if isinstance(output, tuple) and len(output) > 1 else None
        self.owner.after_layer(self.index, probs)


def read_tokens(path: str) -> dict:
    file = os.path.join(path, TOKENS_FILE)
    if not os.path.isfile(file):
        raise CompressorError(f"corrupt checkpoint {path}: a token-prune folder without {TOKENS_FILE}")
    record = read_json(file)
    if not isinstance(record, dict) or record.get("by") not in ("threshold", "ratio") or \
            not isinstance(record.get("values"), list):
        raise CompressorError(f"{file}: not a token-pruning record (by threshold|ratio, values list)")
    return record


def separator_ids(tokenizer) -> List[int]:
    """The ids never dropped besides the first token: the tokenizer's separator (and its
    end-of-sentence token where that differs)."""
    ids = {getattr(tokenizer, name, None) for name in ("sep_token_id", "eos_token_id")}
    return sorted(i for i in ids if isinstance(i, int))
