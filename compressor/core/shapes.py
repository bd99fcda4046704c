"""Per-layer shapes of transformer encoders: what ``config.json`` cannot say.

Pruning leaves each layer with its own number of heads and FFN width, and
sharing (ALBERT) puts one layer's weights in several places. ``save_checkpoint``
records the model's shape in ``compressor.json``::

    "shape": {"layers": 2, "heads": [4, 2], "ffn": [64, 48],
              "shared": {"bert.encoder.layer.1": "bert.encoder.layer.0"}}

and the ``hf`` loader builds the model from ``config.json`` (:func:`build_model`):
:func:`resize_layers` to the recorded heads and widths, :func:`tie_shared` for what
was shared, then the safetensors, loaded strictly. Modules are found only
through ``compressor.core.arch``. Pruning materialises its masks with
:func:`resize_layers` (the heads and FFN units each layer keeps); sharing ties
modules or parameters and ``save_checkpoint`` finds the ties by itself.
"""
from __future__ import annotations

import inspect
import itertools
from typing import Dict, Optional, Sequence, Union

import torch
from torch import nn

from compressor.core.arch import arch_of
from compressor.core.errors import CompressorError

Keep = Union[int, Sequence[int], None]   # a count (the first n) or the indices kept; None: as it is

# Where transformers' self-attention modules keep the head count their forward reads (BERT,
# RoBERTa, MPNet: num_attention_heads and all_head_size; DistilBERT: n_heads and dim). Each one a
# module has is set: the layer then runs at its new count in transformers 4.57 and 5.x (5.17 seen).
_HEAD_COUNT_ATTRS = ("num_attention_heads", "n_heads", "num_heads")
_HEADS_WIDTH_ATTRS = ("all_head_size", "dim")
# Kept original head indices, on a self-attention module whose layer uses only some columns of a
# bias every layer shares (MPNet's relative position bias: one column per head, computed once
# and handed to every layer as ``position_bias`` [batch, heads, query, key]).
HEAD_INDEX = "compressor_head_index"
_SHARED_BIAS_ARG = "position_bias"
SHAPE_KEYS = ("layers", "heads", "ffn", "head_index", "shared", "embedding_rank", "adapter_rank",
              "linear_rank")


def shape_of(model: nn.Module) -> dict:
    """The per-layer shape of a transformers encoder, as ``compressor.json`` records it."""
    spec = arch_of(model)
    layers = spec.get_layers(model)
    size = _head_size(model.config)
    shape = {"layers": len(layers),
             "heads": [_in_width(spec.attention(layer)["attention_output"]) // size for layer in layers],
             "ffn": [_in_width(spec.ffn(layer)["ffn_out"]) for layer in layers]}
    kept = [getattr(_self_attention(spec, layer), HEAD_INDEX, None) for layer in layers]
    if any(k is not None for k in kept):
        shape["head_index"] = [k.tolist() if k is not None else list(range(n))
                               for k, n in zip(kept, shape["heads"])]
    shared = shared_names(model)
    if shared:
        shape["shared"] = shared
    rank = _embedding_rank(model)
    if rank:
        shape["embedding_rank"] = rank   # the word embedding is E1 (vocab x rank) · E2 (rank x width)
    from compressor.core.sharing import adapter_rank_of

    adapters = adapter_rank_of(model)
    if adapters:
        shape["adapter_rank"] = adapters  # shared Linears (``<path>.base``) with per-layer low-rank terms
    from compressor.core.lowrank import linear_ranks_of

    ranks = linear_ranks_of(model)
    if ranks:
        shape["linear_rank"] = ranks      # {path: rank}: Linears factorised as up(down(x))
    return shape


def is_plain(shape: Optional[dict], config) -> bool:
    """Whether ``config.json`` alone describes the model (transformers loads it as it is)."""
    if not shape:
        return True
    spec = arch_of(config)
    return (not shape.get("shared") and not shape.get("head_index") and not shape.get("embedding_rank")
            and not shape.get("adapter_rank") and not shape.get("linear_rank")
            and shape.get("layers", spec.num_layers(config)) == spec.num_layers(config)
            and all(h == spec.num_heads(config) for h in shape.get("heads", ()))
            and all(f == spec.ffn_size(config) for f in shape.get("ffn", ())))


def resize_layers(model: nn.Module, heads: Optional[Sequence[Keep]] = None,
                  ffn: Optional[Sequence[Keep]] = None) -> nn.Module:
    """Keep, in layer ``i``, the attention heads ``heads[i]`` and FFN units ``ffn[i]``, in place.

    Each entry is the indices to keep (their weights stay), a count (the first
    n), or None (the layer stays as it is). Query, key and value lose the rows
    of dropped heads and the attention output their columns; the FFN input
    loses rows, its output columns. The attention module's head count is set
    so the layer runs at its new shape. A layer shared by several slots is
    resized once.
    """
    spec = arch_of(model)
    layers = spec.get_layers(model)
    size = _head_size(model.config)
    for what, keep in (("heads", heads), ("ffn", ffn)):
        if keep is not None and len(keep) != len(layers):
            raise CompressorError(f"resize_layers: {what} has {len(keep)} entries, the model "
                                  f"{len(layers)} layers")
    done = set()
    for i, layer in enumerate(layers):
        if id(layer) in done:
            continue
        done.add(id(layer))
        if heads is not None and heads[i] is not None:
            _keep_heads(spec, model.config, layer, _indices(heads[i]), size)
        if ffn is not None and ffn[i] is not None:
            _keep_ffn(spec, layer, _indices(ffn[i]))
    return model


def _keep_heads(spec, config, layer: nn.Module, keep: torch.Tensor, size: int) -> None:
    attention = spec.attention(layer)
    now = attention["attention_output"].in_features // size
    if keep.numel() == 0 or int(keep.max()) >= now:
        raise CompressorError(f"resize_layers: a layer keeps heads {keep.tolist()} of its {now}")
    if keep.tolist() == list(range(now)):
        return
    rows = (keep[:, None] * size + torch.arange(size)).reshape(-1)
    for name in ("query", "key", "value"):
        if name in attention:
            _replace(layer, getattr(spec, name), _slice(attention[name], rows, dim=0))
    if "qkv" in attention:  # one fused projection: the query, key and value blocks in that order
        width = attention["qkv"].out_features // 3
        fused = torch.cat([rows + block * width for block in range(3)])
        _replace(layer, spec.qkv, _slice(attention["qkv"], fused, dim=0))
    _replace(layer, spec.attention_output, _slice(attention["attention_output"], rows, dim=1))
    module = _self_attention(spec, layer)
    for name in _HEAD_COUNT_ATTRS:
        if hasattr(module, name):
            setattr(module, name, len(keep))
    for name in _HEADS_WIDTH_ATTRS:
        if hasattr(module, name):
            setattr(module, name, len(keep) * size)
    if spec.shared_layer_params:
        _select_shared_bias(module, keep, spec.num_heads(config))


def _select_shared_bias(module: nn.Module, keep: torch.Tensor, total: int) -> None:
    """Give this layer the columns of the shared per-head bias for the heads it kept.

    The bias is computed once for all layers with one column per original head;
    each layer takes its own heads' columns (``HEAD_INDEX``, kept original indices,
    composed when a layer is resized again).
    """
    before = getattr(module, HEAD_INDEX, None)
    original = before[keep.to(before.device)] if before is not None else keep
    if getattr(module, "_compressor_bias_hook", None) is None:
        module._compressor_bias_hook = module.register_forward_pre_hook(_slice_shared_bias,
                                                                         with_kwargs=True)
    if original.tolist() == list(range(total)):
        original = None
    if HEAD_INDEX in module._buffers:
        del module._buffers[HEAD_INDEX]
    if original is not None:
        module.register_buffer(HEAD_INDEX, original.clone(), persistent=False)


def _slice_shared_bias(module, args, kwargs):
    index = getattr(module, HEAD_INDEX, None)
    if index is None:
        return None
    if _SHARED_BIAS_ARG in kwargs:
        bias = kwargs[_SHARED_BIAS_ARG]
        if bias is not None and bias.shape[1] != len(index):
            kwargs = {**kwargs, _SHARED_BIAS_ARG: bias.index_select(1, index.to(bias.device))}
        return args, kwargs
    position = list(inspect.signature(module.forward).parameters).index(_SHARED_BIAS_ARG)
    if position < len(args) and args[position] is not None and args[position].shape[1] != len(index):
        bias = args[position]
        args = args[:position] + (bias.index_select(1, index.to(bias.device)),) + args[position + 1:]
    return args, kwargs


def _keep_ffn(spec, layer: nn.Module, keep: torch.Tensor) -> None:
    ffn = spec.ffn(layer)
    now = ffn["ffn_out"].in_features
    if keep.numel() == 0 or int(keep.max()) >= now:
        raise CompressorError(f"resize_layers: a layer keeps FFN units up to {int(keep.max())} of its {now}")
    if keep.tolist() == list(range(now)):
        return
    rows = torch.cat([keep, keep + now]) if getattr(spec, "ffn_gated", False) else keep  # [input; gate]
    _replace(layer, spec.ffn_in, _slice(ffn["ffn_in"], rows, dim=0))
    _replace(layer, spec.ffn_out, _slice(ffn["ffn_out"], keep, dim=1))


def shared_names(model: nn.Module) -> Dict[str, str]:
    """``{alias: original}`` for every module or parameter reachable under more than one name.

    A module shared whole (a layer used twice) is one entry; a parameter shared
    between modules that are otherwise distinct is one entry per parameter.
    """
    first: Dict[int, str] = {}
    shared: Dict[str, str] = {}

    def under_alias(name: str) -> bool:
        return any(name.startswith(alias + ".") for alias in shared)

    # modules first, so a parameter inside a module shared whole is not listed again
    for name, obj in itertools.chain(model.named_modules(remove_duplicate=False),
                                     model.named_parameters(remove_duplicate=False)):
        if under_alias(name):
            continue
        if id(obj) in first:
            shared[name] = first[id(obj)]
        else:
            first[id(obj)] = name
    return shared


def tie_shared(model: nn.Module, shared: Dict[str, str]) -> nn.Module:
    """Put the module or parameter ``original`` at each ``alias`` (what :func:`shared_names` found)."""
    for alias, original in shared.items():
        parent, _, leaf = alias.rpartition(".")
        try:
            target = _module_or_parameter(model, original)
            holder = model.get_submodule(parent) if parent else model
            getattr(holder, leaf)  # the alias must name something the model has
            setattr(holder, leaf, target)
        except (AttributeError, TypeError):
            raise CompressorError(f"shape.shared ties {alias} to {original}, which this model "
                                  "cannot do") from None
    return model


def without_aliases(state: Dict[str, torch.Tensor], shared: Dict[str, str]) -> Dict[str, torch.Tensor]:
    """``state`` with each shared tensor once: the entries under an alias name go."""
    return {name: t for name, t in state.items()
            if not any(name == alias or name.startswith(alias + ".") for alias in shared)}


def build_model(config, shape: Optional[dict], attn_implementation: Optional[str] = None) -> nn.Module:
    """A randomly initialised sequence classifier of ``config`` at ``shape``: ready for its weights."""
    from transformers import AutoModelForSequenceClassification

    shape = shape or {}
    unknown = sorted(set(shape) - set(SHAPE_KEYS))
    if unknown:
        raise CompressorError(f"shape key {unknown[0]!r} is one this version cannot build "
                              f"(it knows {', '.join(SHAPE_KEYS)})")
    spec = arch_of(config)
    if shape.get("layers", spec.num_layers(config)) != spec.num_layers(config):
        raise CompressorError(f"shape says {shape['layers']} layers, config.json "
                              f"{spec.num_layers(config)}")
    config.pruned_heads = {}  # the shape says what each layer kept (transformers 4 would prune again)
    kwargs = {"attn_implementation": attn_implementation} if attn_implementation else {}
    # never the folder's modeling_compressor.py (for plain transformers users): built here
    model = AutoModelForSequenceClassification.from_config(config, trust_remote_code=False, **kwargs)
    resize_layers(model, heads=shape.get("head_index") or shape.get("heads"), ffn=shape.get("ffn"))
    if shape.get("embedding_rank"):
        from compressor.core.sharing import factorise_embedding

        factorise_embedding(model, int(shape["embedding_rank"]), init=False)
    if shape.get("adapter_rank"):
        from compressor.core.sharing import rebuild_adapters

        rebuild_adapters(model, shape.get("shared") or {}, int(shape["adapter_rank"]))
    if shape.get("linear_rank"):
        from compressor.core.lowrank import rebuild_factorised

        rebuild_factorised(model, shape["linear_rank"])
    return tie_shared(model, shape.get("shared") or {})


# -- helpers ---------------------------------------------------------------

def _head_size(config) -> int:
    spec = arch_of(config)
    return spec.hidden_size(config) // spec.num_heads(config)


def _embedding_rank(model: nn.Module) -> Optional[int]:
    from compressor.core.sharing import embedding_rank_of

    return embedding_rank_of(model)


def _in_width(module: nn.Module) -> int:
    """The input width of a Linear, or of a module wrapping one (SmoothQuant's, say)."""
    weight = next(p for name, p in module.named_parameters() if name.rpartition(".")[2] == "weight")
    return weight.shape[1]


def _self_attention(spec, layer: nn.Module) -> nn.Module:
    """The module that holds the query projection, and with it the head count."""
    path = (spec.qkv if getattr(spec, "qkv", "") else spec.query).rpartition(".")[0]
    return layer.get_submodule(path) if path else layer


def _indices(keep: Keep) -> torch.Tensor:
    if isinstance(keep, int):
        return torch.arange(keep)
    return torch.as_tensor(list(keep), dtype=torch.long)


def _slice(linear: nn.Linear, index: torch.Tensor, dim: int) -> nn.Linear:
    """A new Linear with only the output rows (dim 0) or input columns (dim 1) in ``index``."""
    weight = linear.weight.detach().index_select(dim, index.to(linear.weight.device))
    bias = linear.bias
    if bias is not None and dim == 0:
        bias = bias.detach()[index.to(bias.device)]
    new = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None,
                    device=weight.device, dtype=weight.dtype)
    with torch.no_grad():
        new.weight.copy_(weight)
        if bias is not None:
            new.bias.copy_(bias)
    new.train(linear.training)
    return new


def _replace(layer: nn.Module, path: str, module: nn.Module) -> None:
    parent, _, name = path.rpartition(".")
    setattr(layer.get_submodule(parent) if parent else layer, name, module)


def _module_or_parameter(model: nn.Module, name: str):
    try:
        return model.get_submodule(name)
    except AttributeError:
        return model.get_parameter(name)

