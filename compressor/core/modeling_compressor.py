"""A compressed encoder classifier for plain ``transformers`` (``trust_remote_code=True``).

This file is copied, as it is, into every folder the compressor toolkit writes for a
model whose layers differ from what ``config.json`` can say: pruned attention heads or
FFN widths per layer, layers sharing weights, a factorised word embedding or Linears
factorised into two smaller ones. Load such a
folder with::

    from transformers import AutoModelForSequenceClassification
    model = AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True)

Each class here is the architecture's own ``*ForSequenceClassification`` from
transformers: built from ``config.json`` as usual, then each layer's Linear modules are
resized to the widths ``config.compressor_shape`` records (module paths included), the
word embedding factorised and shared modules tied, before the weights load. It imports
only torch and transformers (4.57 and 5.x), and never ``prune_heads``.
"""
import re

import torch
from torch import nn
from transformers import (
    BertForSequenceClassification,
    CamembertForSequenceClassification,
    DistilBertForSequenceClassification,
    ElectraForSequenceClassification,
    ModernBertForSequenceClassification,
    MPNetForSequenceClassification,
    RobertaForSequenceClassification,
    XLMRobertaForSequenceClassification,
)

SHAPE_KEY = "compressor_shape"


class FactorisedEmbedding(nn.Module):
    """A word embedding as E1 (vocab x rank) then E2 (rank x dim): ``embed`` then ``project``."""

    def __init__(self, num_embeddings, embedding_dim, rank, padding_idx=None):
        super().__init__()
        self.num_embeddings, self.embedding_dim, self.rank = num_embeddings, embedding_dim, rank
        self.padding_idx = padding_idx
        self.embed = nn.Embedding(num_embeddings, rank, padding_idx=padding_idx)
        self.project = nn.Linear(rank, embedding_dim, bias=False)

    def forward(self, input_ids):
        return self.project(self.embed(input_ids))

    @property
    def weight(self):
        return self.project(self.embed.weight)


class LowRankAdapted(nn.Module):
    """A shared Linear ``base`` plus this layer's own low-rank term ``up(down(x))``."""

    def __init__(self, base, rank):
        super().__init__()
        out_features, in_features = base.weight.shape
        rank = min(rank, out_features, in_features)
        self.base, self.rank = base, rank
        self.in_features, self.out_features = in_features, out_features
        kw = {"device": base.weight.device, "dtype": base.weight.dtype}
        self.down = nn.Linear(in_features, rank, bias=False, **kw)
        self.up = nn.Linear(rank, out_features, bias=False, **kw)

    def forward(self, x):
        return self.base(x) + self.up(self.down(x))

    @property
    def weight(self):
        return self.base.weight + self.up.weight @ self.down.weight

    @property
    def bias(self):
        return self.base.bias


class FactorisedLinear(nn.Module):
    """A Linear as two smaller ones, ``up(down(x))``: ``down`` without bias, ``up`` with the original's."""

    def __init__(self, in_features, out_features, rank, bias=True, device=None, dtype=None):
        super().__init__()
        self.in_features, self.out_features, self.rank = in_features, out_features, rank
        self.down = nn.Linear(in_features, rank, bias=False, device=device, dtype=dtype)
        self.up = nn.Linear(rank, out_features, bias=bias, device=device, dtype=dtype)

    def forward(self, x):
        return self.up(self.down(x))

    @property
    def weight(self):
        return self.up.weight @ self.down.weight

    @property
    def bias(self):
        return self.up.bias


def _set(root, path, module):
    parent, _, leaf = path.rpartition(".")
    setattr(root.get_submodule(parent) if parent else root, leaf, module)


def _resize(layer, path, out_features=None, in_features=None):
    """Replace the Linear at ``path`` by one of the new width (its weights come from the file)."""
    if not path:
        return
    old = layer.get_submodule(path)
    out_features = old.out_features if out_features is None else out_features
    in_features = old.in_features if in_features is None else in_features
    if (out_features, in_features) == (old.out_features, old.in_features):
        return
    new = nn.Linear(in_features, out_features, bias=old.bias is not None,
                    device=old.weight.device, dtype=old.weight.dtype)
    _set(layer, path, new)


def _slice_shared_bias(module, args, kwargs):
    """Give a layer the columns of a bias every layer shares for the heads it kept (MPNet)."""
    index, name = module._compressor_head_index, module._compressor_bias_arg
    if name in kwargs:
        bias = kwargs[name]
        if bias is not None and bias.shape[1] != len(index):
            kwargs = {**kwargs, name: bias.index_select(1, torch.tensor(index, device=bias.device))}
        return args, kwargs
    import inspect

    position = list(inspect.signature(module.forward).parameters).index(name)
    if position < len(args) and args[position] is not None and args[position].shape[1] != len(index):
        bias = args[position]
        picked = bias.index_select(1, torch.tensor(index, device=bias.device))
        args = args[:position] + (picked,) + args[position + 1:]
    return args, kwargs


def _target(model, name):
    try:
        return model.get_submodule(name)
    except AttributeError:
        return model.get_parameter(name)


def reshape(model, shape):
    """Resize ``model`` (a transformers classifier built from ``config.json``) to ``shape``."""
    parts = shape["layout"]
    layers = model.get_submodule(parts["layers"])
    size = int(shape["head_size"])
    for i, layer in enumerate(layers):
        heads, ffn = int(shape["heads"][i]), int(shape["ffn"][i])
        width = heads * size
        for name in ("query", "key", "value"):
            _resize(layer, parts.get(name), out_features=width)
        _resize(layer, parts.get("qkv"), out_features=3 * width)
        _resize(layer, parts["attention_output"], in_features=width)
        attention = layer.get_submodule(parts["self_attention"]) if parts["self_attention"] else layer
        for name in parts["head_count_attrs"]:
            if hasattr(attention, name):
                setattr(attention, name, heads)
        for name in parts["head_width_attrs"]:
            if hasattr(attention, name):
                setattr(attention, name, width)
        _resize(layer, parts["ffn_in"], out_features=ffn * (2 if parts.get("ffn_gated") else 1))
        _resize(layer, parts["ffn_out"], in_features=ffn)
        index = (shape.get("head_index") or [None] * len(layers))[i]
        if index is not None and parts.get("shared_bias_arg"):
            attention._compressor_head_index = [int(h) for h in index]
            attention._compressor_bias_arg = parts["shared_bias_arg"]
            attention.register_forward_pre_hook(_slice_shared_bias, with_kwargs=True)
    rank = shape.get("embedding_rank")
    if rank:
        old = model.get_input_embeddings()
        new = FactorisedEmbedding(old.num_embeddings, old.embedding_dim, int(rank), old.padding_idx)
        model.set_input_embeddings(new.to(device=old.weight.device, dtype=old.weight.dtype))
    shared = shape.get("shared") or {}
    if shape.get("adapter_rank"):
        paths = {name[:-len(".base")] for pair in shared.items() for name in pair if name.endswith(".base")}
        for path in sorted(paths):
            _set(model, path, LowRankAdapted(model.get_submodule(path), int(shape["adapter_rank"])))
    for path, rank in (shape.get("linear_rank") or {}).items():
        old = model.get_submodule(path)
        _set(model, path, FactorisedLinear(old.in_features, old.out_features, int(rank), old.bias is not None,
                                           device=old.weight.device, dtype=old.weight.dtype))
    tie(model, shared)


def tie(model, shared):
    """Put the module or parameter ``original`` at each ``alias``."""
    for alias, original in shared.items():
        _set(model, alias, _target(model, original))


class _Shaped:
    """Mixin: the architecture's classifier, resized to ``config.compressor_shape``."""

    def __init__(self, config, *args, **kwargs):
        config.pruned_heads = {}   # the shape says what each layer kept
        super().__init__(config, *args, **kwargs)
        shape = getattr(config, SHAPE_KEY, None) or {}
        self._compressor_shared = dict(shape.get("shared") or {})
        if shape:
            reshape(self, shape)
        # the file stores each shared tensor once, under its first name
        ignore = getattr(self, "_keys_to_ignore_on_load_missing", None)
        patterns = ["^" + re.escape(alias) + r"(\.|$)" for alias in self._compressor_shared]
        if patterns:
            merged = list(ignore or []) + patterns
            self._keys_to_ignore_on_load_missing = set(merged) if isinstance(ignore, set) else merged

    def tie_weights(self, *args, **kwargs):
        out = super().tie_weights(*args, **kwargs)
        shared = getattr(self, "_compressor_shared", None)
        if shared:   # after the weights load: each alias is its original again
            tie(self, shared)
        return out


class CompressorBertForSequenceClassification(_Shaped, BertForSequenceClassification):
    pass


class CompressorRobertaForSequenceClassification(_Shaped, RobertaForSequenceClassification):
    pass


class CompressorXLMRobertaForSequenceClassification(_Shaped, XLMRobertaForSequenceClassification):
    pass


class CompressorCamembertForSequenceClassification(_Shaped, CamembertForSequenceClassification):
    pass


class CompressorElectraForSequenceClassification(_Shaped, ElectraForSequenceClassification):
    pass


class CompressorDistilBertForSequenceClassification(_Shaped, DistilBertForSequenceClassification):
    pass


class CompressorMPNetForSequenceClassification(_Shaped, MPNetForSequenceClassification):
    pass


class CompressorModernBertForSequenceClassification(_Shaped, ModernBertForSequenceClassification):
    pass
