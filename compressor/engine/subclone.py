"""A narrower, shallower student cut out of its teacher's weights instead of drawn at random.

Weight subcloning (Samragh et al. 2023) and Minitron's width pruning (Muralidharan et al.
2024): keep every k-th layer, and in every kept tensor keep the teacher's most important
residual channels (the same ones throughout, since every layer reads and writes the same
residual stream), attention heads (the same ones in every layer, as MPNet's shared relative
position bias requires), per head the most important query/key and value dimensions, and per
layer the most important FFN neurons. Importance is the mean absolute activation on a few
training batches (Minitron), or weight norms when no batch is given. Queries are scaled so
that a head's attention scores keep the teacher's magnitude over fewer dimensions.

A student at the teacher's full width is exactly the teacher's kept layers; a narrower one
starts from what the teacher computes, which is what distillation into a random 4-layer
312-wide student (TinyBERT) or 6-layer 384-wide one (MiniLM) lacks without the papers'
general distillation on Wikipedia.
"""
from __future__ import annotations

import math
from typing import Dict, Iterable, List, Optional, Sequence

import torch
from torch import nn

from compressor.core.arch import arch_of
from compressor.core.errors import CompressorError

# roles of a layer Linear's rows and columns: "hidden" (residual channels), "qk" (query/key
# dimensions), "v" (value dimensions), "ffn" (neurons)
_LINEAR_ROLES = {"query": ("qk", "hidden"), "key": ("qk", "hidden"), "value": ("v", "hidden"),
                 "attention_output": ("hidden", "v"), "ffn_in": ("ffn", "hidden"),
                 "ffn_out": ("hidden", "ffn")}
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")   # a batch's other keys are not the model's


def _check_supported(spec) -> None:
    if spec.fused_qkv or spec.ffn_gated:
        raise CompressorError(f"student init: teacher does not support {spec.model_type} yet (fused "
                              "query/key/value or a gated FFN); use init: random")


def activation_importance(teacher: nn.Module, batches: Iterable[dict]) -> Dict[str, object]:
    """Mean absolute activations on ``batches`` (model inputs; real tokens only): per residual
    channel (embeddings and every norm's output, summed), and per layer per query/key dimension
    (|q| times |k|), value dimension (the attention output's input) and FFN neuron (the FFN
    output's input)."""
    spec = arch_of(teacher)
    _check_supported(spec)
    layers = spec.get_layers(teacher)
    n = len(layers)
    sums = {"hidden": None, "q": [None] * n, "k": [None] * n, "v": [None] * n, "ffn": [None] * n}
    mask_box: List[Optional[torch.Tensor]] = [None]   # the batch's attention mask, for the hooks
    width = spec.hidden_size(teacher.config)

    def add(key, i, tensor):
        if key == "hidden" and tensor.shape[-1] != width:
            return   # embeddings narrower than the layers (ELECTRA's, projected up after)
        x = tensor.detach().float().abs()
        m = mask_box[0]
        if m is not None and x.dim() == 3 and m.shape == x.shape[:2]:
            x = x * m.unsqueeze(-1)
        x = x.reshape(-1, x.shape[-1]).sum(0)
        if i is None:
            sums[key] = x if sums[key] is None else sums[key] + x
        else:
            sums[key][i] = x if sums[key][i] is None else sums[key][i] + x

    def out_hook(key, i):
        return lambda module, args, output: add(key, i, output[0] if isinstance(output, tuple) else output)

    def in_hook(key, i):
        return lambda module, args: add(key, i, args[0])

    hooks = [spec.get_embeddings(teacher).register_forward_hook(out_hook("hidden", None))]
    for i, layer in enumerate(layers):
        attention = spec.attention(layer)
        hooks.append(attention["query"].register_forward_hook(out_hook("q", i)))
        hooks.append(attention["key"].register_forward_hook(out_hook("k", i)))
        hooks.append(attention["attention_output"].register_forward_pre_hook(in_hook("v", i)))
        hooks.append(spec.ffn(layer)["ffn_out"].register_forward_pre_hook(in_hook("ffn", i)))
        for norm in spec.norms(layer).values():
            if not isinstance(norm, nn.Identity):
                hooks.append(norm.register_forward_hook(out_hook("hidden", None)))
    was_training = teacher.training
    teacher.eval()
    device = next(teacher.parameters()).device
    seen = 0
    try:
        with torch.no_grad():
            for batch in batches:
                inputs = {k: v.to(device) for k, v in batch.items() if k in _INPUTS}
                mask = inputs.get("attention_mask")
                mask_box[0] = mask.float() if mask is not None else None
                teacher(**inputs)
                seen += 1
    finally:
        for h in hooks:
            h.remove()
        teacher.train(was_training)
    if not seen:
        raise CompressorError("student init: teacher needs training rows to score its channels on")
    return {"hidden": sums["hidden"], "qk": [q * k for q, k in zip(sums["q"], sums["k"])],
            "v": sums["v"], "ffn": sums["ffn"], "source": "activations"}


def magnitude_importance(teacher: nn.Module) -> Dict[str, object]:
    """Weight norms in place of activations: residual channels by the norms' scales, query/key
    dimensions by their rows' norms (product), value dimensions and FFN neurons by the norm of
    the row that makes them times the column that reads them."""
    spec = arch_of(teacher)
    _check_supported(spec)
    hidden, qk, v, ffn = 0, [], [], []
    with torch.no_grad():
        for layer in spec.get_layers(teacher):
            for norm in spec.norms(layer).values():
                if getattr(norm, "weight", None) is not None:
                    hidden = hidden + norm.weight.float().abs()
            a = spec.attention(layer)
            qk.append(a["query"].weight.float().norm(dim=1) * a["key"].weight.float().norm(dim=1))
            v.append(a["value"].weight.float().norm(dim=1) * a["attention_output"].weight.float().norm(dim=0))
            f = spec.ffn(layer)
            ffn.append(f["ffn_in"].weight.float().norm(dim=1) * f["ffn_out"].weight.float().norm(dim=0))
    if not torch.is_tensor(hidden):
        raise CompressorError(f"student init: teacher found no norm scales in {spec.model_type}'s layers")
    return {"hidden": hidden, "qk": qk, "v": v, "ffn": ffn, "source": "weight norms"}


def _top(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Indices of the ``k`` largest scores, in ascending index order (ties to the lower index)."""
    order = sorted(range(scores.numel()), key=lambda j: (-float(scores[j]), j))[:k]
    return torch.tensor(sorted(order), dtype=torch.long)


def select(importance: Dict[str, object], keep_layers: Sequence[int], teacher_heads: int,
           hidden: int, heads: int, ffn: int) -> Dict[str, object]:
    """Which teacher channels the student keeps: ``hidden`` residual channels, ``heads`` heads
    (the same in every layer), per kept layer ``hidden // heads`` query/key and value
    dimensions of each kept head, and ``ffn`` neurons. ``keep_layers`` are 0-based."""
    t_hidden = importance["hidden"].numel()
    size, s_size = t_hidden // teacher_heads, hidden // heads
    per_head = sum(importance["v"][i].reshape(teacher_heads, size).sum(1) for i in keep_layers)
    head_idx = _top(per_head, heads)
    chosen = {"hidden": _top(importance["hidden"], hidden), "heads": head_idx,
              "qk": [], "v": [], "ffn": []}
    for i in keep_layers:
        for role in ("qk", "v"):
            scores = importance[role][i].reshape(teacher_heads, size)
            chosen[role].append(torch.cat([h * size + _top(scores[h], s_size) for h in head_idx.tolist()]))
        chosen["ffn"].append(_top(importance["ffn"][i], ffn))
    return chosen


def _take(tensor: torch.Tensor, indices: Sequence[Optional[torch.Tensor]]) -> torch.Tensor:
    for dim, index in enumerate(indices):
        if index is not None:
            tensor = tensor.index_select(dim, index.to(tensor.device))
    return tensor


def fill_from_teacher(student: nn.Module, teacher: nn.Module, keep_layers: Sequence[int],
                      chosen: Dict[str, object]) -> None:
    """Copy the chosen slices of ``teacher``'s weights into ``student`` (same architecture,
    ``len(keep_layers)`` layers, the chosen widths), in place."""
    spec = arch_of(teacher)
    t_config, s_config = teacher.config, student.config
    t_hidden, t_heads = spec.hidden_size(t_config), spec.num_heads(t_config)
    scale = math.sqrt((spec.hidden_size(s_config) / spec.num_heads(s_config)) / (t_hidden / t_heads))
    t_state = teacher.state_dict()
    roles = {}   # student parameter name -> (teacher name, per-dim index, factor)
    s_layers, t_layers = spec.get_layers(student), spec.get_layers(teacher)
    s_names = {id(m): n for n, m in student.named_modules()}
    t_names = {id(m): n for n, m in teacher.named_modules()}
    for j, i in enumerate(keep_layers):
        by_role = {"hidden": chosen["hidden"], "qk": chosen["qk"][j], "v": chosen["v"][j],
                   "ffn": chosen["ffn"][j]}
        s_mods = {**spec.attention(s_layers[j]), **spec.ffn(s_layers[j])}
        t_mods = {**spec.attention(t_layers[i]), **spec.ffn(t_layers[i])}
        for name, (rows, cols) in _LINEAR_ROLES.items():
            s_name, t_name = s_names[id(s_mods[name])], t_names[id(t_mods[name])]
            factor = scale if name == "query" else 1.0
            roles[f"{s_name}.weight"] = (f"{t_name}.weight", [by_role[rows], by_role[cols]], factor)
            roles[f"{s_name}.bias"] = (f"{t_name}.bias", [by_role[rows]], factor)
        s_prefix, t_prefix = s_names[id(s_layers[j])] + ".", t_names[id(t_layers[i])] + "."
        for s_name, _ in s_layers[j].named_parameters():   # norms and anything else: by name
            key = s_prefix + s_name
            if key not in roles:
                roles[key] = (t_prefix + s_name, None, 1.0)
    layer_prefix = s_names[id(s_layers)] + "."
    new_state = {}
    for key, value in student.state_dict().items():
        if key in roles:
            t_key, indices, factor = roles[key]
        elif key.startswith(layer_prefix):
            continue   # a layer buffer: the student's own
        else:
            t_key, indices, factor = key, None, 1.0
        if t_key not in t_state:
            raise CompressorError(f"student init: teacher has no {t_key} for the student's {key}")
        source = t_state[t_key]
        if indices is None:   # by size: residual channels, or heads
            indices = [None if t == s else chosen["hidden"] if t == t_hidden else
                       chosen["heads"] if t == t_heads else _mismatch(key, source, value)
                       for t, s in zip(source.shape, value.shape)]
        taken = _take(source, indices) * factor   # factor 1.0 leaves every value as it is
        if taken.shape != value.shape:
            _mismatch(key, source, value)
        new_state[key] = taken.to(value.dtype)
    student.load_state_dict(new_state, strict=False)


def _mismatch(key, source, value):
    raise CompressorError(f"student init: teacher cannot fill {key}: teacher {tuple(source.shape)}, "
                          f"student {tuple(value.shape)}")
