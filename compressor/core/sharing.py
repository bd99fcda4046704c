"""Cross-layer parameter sharing (ALBERT) on a trained encoder, and factorised embeddings.

:func:`share_layers` makes the layers of each group of ``k`` consecutive layers use one
set of modules (attention projections and their norm, the FFN and its norm, or all of
them): the very same ``nn.Linear`` / norm objects sit in every layer of the group, so
their Parameters are one tensor that accumulates every layer's gradient. The shared
weights start from one layer of the group (``init="index"``) or from the group's mean.

:func:`factorise_embedding` replaces the word embedding (vocab x d) by
:class:`FactorisedEmbedding`, E1 (vocab x r) then E2 (r x d), from the truncated SVD of
the trained matrix. ``compressor.core.shapes`` records both (``shared``, ``embedding_rank``)
so the checkpoint loads back; modules are found only through ``compressor.core.arch``.
"""
from __future__ import annotations

from typing import Dict, List, Optional

import torch
from torch import nn

from compressor.core.arch import arch_of
from compressor.core.errors import CompressorError

WHAT = ("all", "attention", "ffn", "none")
INIT = ("index", "mean")


def _roles(spec, what: str) -> List[str]:
    """The ArchSpec paths (relative to a layer) of the modules shared for ``what``."""
    attention = ([spec.qkv] if spec.fused_qkv else [spec.query, spec.key, spec.value]) + \
        [spec.attention_output, spec.attention_norm]
    ffn = [spec.ffn_in, spec.ffn_out, spec.ffn_norm]
    return {"all": attention + ffn, "attention": attention, "ffn": ffn, "none": []}[what]


def groups_of(n_layers: int, group: int) -> List[List[int]]:
    """Layer indices in groups of ``group`` consecutive layers (0: one group of all)."""
    size = group or n_layers
    return [list(range(start, min(start + size, n_layers))) for start in range(0, n_layers, size)]


def share_layers(model: nn.Module, what: str = "all", group: int = 0, init: str = "mean",
                 index: int = 0, adapter_rank: int = 0) -> Dict:
    """Share ``what`` across each group of ``group`` consecutive layers, in place.

    ``init="index"``: the shared weights are those of the group's ``index``-th layer (the
    last layer of a shorter final group where it has fewer); ``"mean"``: the mean of the
    group's weights. ``adapter_rank`` r > 0 gives each layer's shared Linear its own
    :class:`LowRankAdapted` correction, initialised by the rank-r truncated SVD of that
    layer's weight minus the shared one (biases stay shared). Returns ``{"groups": [...], "shared_modules": n, "parameters_before",
    "parameters_after"}``.
    """
    if what not in WHAT:
        raise CompressorError(f"share: what must be one of {', '.join(WHAT)}, got {what!r}")
    if init not in INIT:
        raise CompressorError(f"share: init must be index or mean, got {init!r}")
    spec = arch_of(model)
    layers = spec.get_layers(model)
    n = len(layers)
    if group < 0 or group > n:
        raise CompressorError(f"share: group {group} does not fit a model of {n} layers "
                              f"(0 shares the whole stack)")
    size = group or n
    if adapter_rank < 0:
        raise CompressorError(f"share: adapter_rank must not be negative, got {adapter_rank}")
    if not 0 <= index < size:
        raise CompressorError(f"share: index {index} is no layer of a group of {size}")
    from compressor.core.models import count_parameters

    before = count_parameters(model)
    groups = groups_of(n, group)
    done = 0
    for members in groups:
        if len(members) < 2:
            continue
        source = members[min(index, len(members) - 1)]
        for path in _roles(spec, what):
            modules = [layers[i].get_submodule(path) for i in members]
            if not list(modules[0].parameters()):
                continue   # nothing to share (an Identity norm)
            _check_alike(modules, path, members)
            anchor = modules[members.index(source)]
            originals = [m.weight.detach().clone() for m in modules] \
                if adapter_rank and isinstance(anchor, nn.Linear) else None
            if init == "mean":
                with torch.no_grad():
                    for name, p in anchor.named_parameters():
                        p.copy_(torch.stack([m.get_parameter(name) for m in modules]).mean(0))
            for i in members:
                if layers[i].get_submodule(path) is not anchor:
                    _set(layers[i], path, anchor)
                    done += 1
            if originals is not None:
                for i, weight in zip(members, originals):
                    _set(layers[i], path, LowRankAdapted(anchor, adapter_rank,
                                                         weight - anchor.weight.detach()))
    return {"groups": groups, "what": what, "init": init, "shared_modules": done,
            "parameters_before": before, "parameters_after": count_parameters(model)}


def _check_alike(modules: List[nn.Module], path: str, members: List[int]) -> None:
    first = {name: tuple(p.shape) for name, p in modules[0].named_parameters()}
    for module, i in zip(modules[1:], members[1:]):
        other = {name: tuple(p.shape) for name, p in module.named_parameters()}
        if type(module) is not type(modules[0]) or other != first:
            raise CompressorError(
                f"share: layers {members[0]} and {i} differ at {path} ({first} against {other}); "
                "layers pruned to different shapes cannot share their weights")


def _set(layer: nn.Module, path: str, module: nn.Module) -> None:
    parent, _, leaf = path.rpartition(".")
    setattr(layer.get_submodule(parent) if parent else layer, leaf, module)


class LowRankAdapted(nn.Module):
    """A (shared) Linear ``base`` plus this layer's own low-rank correction: ``up(down(x))``."""

    def __init__(self, base: nn.Linear, rank: int, difference: Optional[torch.Tensor] = None):
        super().__init__()
        out_features, in_features = base.weight.shape
        rank = min(rank, out_features, in_features)
        self.base, self.rank = base, rank
        self.in_features, self.out_features = in_features, out_features
        self.down = nn.Linear(in_features, rank, bias=False).to(base.weight.device, base.weight.dtype)
        self.up = nn.Linear(rank, out_features, bias=False).to(base.weight.device, base.weight.dtype)
        with torch.no_grad():
            if difference is None:
                self.up.weight.zero_()
            else:   # truncated SVD: difference ~ (U_r sqrt S_r)(sqrt S_r V_r^T)
                u, s, vh = torch.linalg.svd(difference.float(), full_matrices=False)
                root = s[:rank].sqrt()
                self.up.weight.copy_(u[:, :rank] * root)
                self.down.weight.copy_(root[:, None] * vh[:rank])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + self.up(self.down(x))

    @property
    def weight(self) -> torch.Tensor:
        """The effective weight of this layer (shared weight plus its correction)."""
        return self.base.weight + self.up.weight @ self.down.weight

    @property
    def bias(self):
        return self.base.bias


ADAPTED = ".base"


def adapter_rank_of(model: nn.Module) -> Optional[int]:
    ranks = {m.rank for m in model.modules() if isinstance(m, LowRankAdapted)}
    return max(ranks) if ranks else None


def rebuild_adapters(model: nn.Module, shared: Dict[str, str], rank: int) -> None:
    """Wrap each Linear that ``shared`` ties through an adapter (``<path>.base``) in a fresh
    :class:`LowRankAdapted` of ``rank``, ready for its saved weights (``compressor.core.shapes``)."""
    paths = {name[:-len(ADAPTED)] for pair in shared.items() for name in pair if name.endswith(ADAPTED)}
    for path in sorted(paths):
        parent, _, leaf = path.rpartition(".")
        holder = model.get_submodule(parent) if parent else model
        linear = getattr(holder, leaf, None)
        if not isinstance(linear, nn.Linear):
            raise CompressorError(f"shape.adapter_rank: {path} is no Linear this model has")
        setattr(holder, leaf, LowRankAdapted(linear, rank))


# -- factorised embedding ------------------------------------------------------

class FactorisedEmbedding(nn.Module):
    """A word embedding as E1 (vocab x rank) then E2 (rank x dim): ``embed`` then ``project``."""

    def __init__(self, num_embeddings: int, embedding_dim: int, rank: int,
                 padding_idx: Optional[int] = None):
        super().__init__()
        self.num_embeddings, self.embedding_dim, self.rank = num_embeddings, embedding_dim, rank
        self.padding_idx = padding_idx
        self.embed = nn.Embedding(num_embeddings, rank, padding_idx=padding_idx)
        self.project = nn.Linear(rank, embedding_dim, bias=False)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.project(self.embed(input_ids))

    @property
    def weight(self) -> torch.Tensor:
        """The full (vocab x dim) matrix these factors make (for code that reads it)."""
        return self.project(self.embed.weight)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, rank={self.rank}"


def embedding_rank_of(model: nn.Module) -> Optional[int]:
    get = getattr(model, "get_input_embeddings", None)
    module = get() if get is not None else None
    return module.rank if isinstance(module, FactorisedEmbedding) else None


def factorise_embedding(model: nn.Module, rank: int, init: bool = True) -> dict:
    """Replace the word embedding by E1·E2 of ``rank``, from its truncated SVD (``init``), in place.

    E1 = U_r·sqrt(S_r), E2 = sqrt(S_r)·V_r^T; at full rank (``rank`` = the embedding width)
    the product is the trained matrix. Returns the relative Frobenius error and sizes.
    """
    old = model.get_input_embeddings()
    if isinstance(old, FactorisedEmbedding):
        raise CompressorError("share: the word embedding is factorised already")
    if not isinstance(old, nn.Embedding):
        raise CompressorError(f"share: the word embedding is a {type(old).__name__}, not an Embedding")
    vocab, dim = old.weight.shape
    if not 1 <= rank <= dim:
        raise CompressorError(f"share: embedding_rank {rank} must be between 1 and the embedding "
                              f"width {dim}")
    new = FactorisedEmbedding(vocab, dim, rank, old.padding_idx).to(old.weight.device, old.weight.dtype)
    error = None
    if init:
        weight = old.weight.detach().float()
        u, s, vh = torch.linalg.svd(weight, full_matrices=False)
        root = s[:rank].sqrt()
        with torch.no_grad():
            new.embed.weight.copy_(u[:, :rank] * root)
            new.project.weight.copy_((root[:, None] * vh[:rank]).T)
            error = float(torch.linalg.norm(weight - new.weight.float()) / torch.linalg.norm(weight))
    new.train(old.training)
    model.set_input_embeddings(new)
    return {"rank": rank, "vocab": vocab, "width": dim, "relative_error": error,
            "parameters_before": vocab * dim, "parameters_after": vocab * rank + rank * dim}
