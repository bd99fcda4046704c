"""Low-rank factorisation of a Linear layer: ``W x + b`` becomes ``up(down(x))``.

:class:`FactorisedLinear` holds ``down`` (in -> rank, no bias) and ``up`` (rank -> out, the
original bias), made from the truncated SVD ``W ~ U_r S_r V_r^T`` as ``down = sqrt(S_r) V_r^T``
and ``up = U_r sqrt(S_r)`` (both factors of the same scale). At full rank the product is ``W``.
It exports to ONNX as two MatMuls (then the bias Add), so a small rank is a smaller graph.

``compressor.core.shapes`` records each factorised Linear's rank by its module path
(``shape["linear_rank"]``) and :func:`rebuild_factorised` puts fresh factors of those ranks
back when a folder loads. Layers and their Linears are found only through
``compressor.core.arch`` (by role: ``query``, ``key``, ``value`` or ``qkv``,
``attention_output``, ``ffn_in``, ``ffn_out``).
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import torch
from torch import nn

from compressor.core.arch import arch_of
from compressor.core.errors import CompressorError

ATTENTION_ROLES = ("query", "key", "value", "qkv", "attention_output")
FFN_ROLES = ("ffn_in", "ffn_out")
ROLES = ATTENTION_ROLES + FFN_ROLES
GROUPS = {"all": ROLES, "attention": ATTENTION_ROLES, "ffn": FFN_ROLES}


class FactorisedLinear(nn.Module):
    """A Linear as two smaller ones: ``up(down(x))``; ``down`` has no bias, ``up`` the original's."""

    def __init__(self, in_features: int, out_features: int, rank: int, bias: bool = True,
                 device=None, dtype=None):
        super().__init__()
        if not 1 <= rank <= min(in_features, out_features):
            raise CompressorError(f"lowrank: rank {rank} must be between 1 and {min(in_features, out_features)}"
                                  f" for a {out_features}x{in_features} Linear")
        self.in_features, self.out_features, self.rank = in_features, out_features, rank
        # down first: its weight is the first one, whose width is this layer's input width
        self.down = nn.Linear(in_features, rank, bias=False, device=device, dtype=dtype)
        self.up = nn.Linear(rank, out_features, bias=bias, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.up(self.down(x))

    @property
    def weight(self) -> torch.Tensor:
        """The (out x in) matrix the two factors make (for code that reads it)."""
        return self.up.weight @ self.down.weight

    @property
    def bias(self):
        return self.up.bias

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, rank={self.rank}"


def full_rank(linear: nn.Module) -> int:
    return min(linear.in_features, linear.out_features)


def saves(linear: nn.Module, rank: int) -> bool:
    """Whether factors of ``rank`` hold fewer weights than the dense matrix."""
    return rank * (linear.in_features + linear.out_features) < linear.in_features * linear.out_features


def spectrum(linear: nn.Linear) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(U, S, Vh)`` of the Linear's weight (float32, thin SVD)."""
    return torch.linalg.svd(linear.weight.detach().float(), full_matrices=False)


def energy_kept(singular: torch.Tensor) -> torch.Tensor:
    """Share of the squared singular values the first r keep, for r = 1..n."""
    power = singular.double() ** 2
    return (power.cumsum(0) / power.sum().clamp_min(1e-300)).float()


def rank_for_energy(singular: torch.Tensor, energy: float) -> int:
    """The smallest rank whose singular values keep ``energy`` of the squared total (1.0: all)."""
    if energy >= 1.0:
        return int(singular.numel())
    kept = energy_kept(singular)
    return int(min(int((kept < energy).sum()) + 1, singular.numel()))


def factorised(linear: nn.Linear, rank: int, svd=None) -> FactorisedLinear:
    """A :class:`FactorisedLinear` of ``rank`` from ``linear``'s truncated SVD (``svd`` if given)."""
    u, s, vh = svd if svd is not None else spectrum(linear)
    weight = linear.weight
    new = FactorisedLinear(linear.in_features, linear.out_features, rank, linear.bias is not None,
                           device=weight.device, dtype=weight.dtype)
    root = s[:rank].sqrt()
    with torch.no_grad():
        new.down.weight.copy_(root[:, None] * vh[:rank])
        new.up.weight.copy_(u[:, :rank] * root)
        if linear.bias is not None:
            new.up.bias.copy_(linear.bias.detach())
    new.train(linear.training)
    return new


def linears_of(model: nn.Module, roles: Sequence[str] = ROLES,
               layers: Optional[Sequence[int]] = None) -> List[dict]:
    """The Linears of ``roles`` in ``layers`` (all by default), each once even where layers share it:
    ``{"name", "names" (every path it sits at), "layer", "role", "module"}``, in layer order."""
    spec = arch_of(model)
    stack = spec.get_layers(model)
    wanted = range(len(stack)) if layers is None else layers
    for i in wanted:
        if not 0 <= i < len(stack):
            raise CompressorError(f"lowrank: layer {i} is not one of this model's {len(stack)} (0-based)")
    paths: Dict[int, List[str]] = {}
    for name, module in model.named_modules(remove_duplicate=False):
        paths.setdefault(id(module), []).append(name)
    found, seen = [], set()
    for i in wanted:
        parts = {**spec.attention(stack[i]), **spec.ffn(stack[i])}
        for role in ROLES:
            module = parts.get(role)
            if role not in roles or module is None or id(module) in seen:
                continue
            seen.add(id(module))
            names = paths.get(id(module), [])
            found.append({"name": names[0] if names else "", "names": names, "layer": i,
                          "role": role, "module": module})
    return found


def replace(model: nn.Module, names: Sequence[str], module: nn.Module) -> None:
    """Put ``module`` at each path of ``names``."""
    for name in names:
        parent, _, leaf = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, leaf, module)


def linear_ranks_of(model: nn.Module) -> Dict[str, int]:
    """``{path: rank}`` for every :class:`FactorisedLinear` (a shared one under its first path)."""
    return {name: int(m.rank) for name, m in model.named_modules() if isinstance(m, FactorisedLinear)}


def rebuild_factorised(model: nn.Module, ranks: Dict[str, int]) -> None:
    """Replace the Linear at each path of ``ranks`` by fresh factors of that rank, ready for
    the saved weights (``compressor.core.shapes``)."""
    for path, rank in ranks.items():
        try:
            linear = model.get_submodule(path)
        except AttributeError:
            linear = None
        if not isinstance(linear, nn.Linear):
            raise CompressorError(f"shape.linear_rank: {path} is no Linear this model has")
        new = FactorisedLinear(linear.in_features, linear.out_features, int(rank), linear.bias is not None,
                               device=linear.weight.device, dtype=linear.weight.dtype)
        replace(model, [path], new.train(linear.training))
