"""The ``lowrank`` stage's settings: which Linears, how each one's rank is chosen, and recovery.

A rank is fixed (``rank``), a share of each Linear's full rank (``ratio``), or chosen per
Linear (``by``): ``energy``, the smallest rank whose singular values keep that share of the
squared total, or ``sensitivity``, the smallest rank whose truncation alone moves the
model's outputs by at most ``tolerance`` (mean KL divergence of the predictions from the
unfactorised model's, on ``importance_rows`` training rows). Recovery (``recover``) is
pruning's: none, fine-tuning, or distillation from the unfactorised model (``teacher: input``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Union

from compressor.core.errors import CompressorError
from compressor.core.lowrank import GROUPS, ROLES
from compressor.core.settings import not_negative, positive, setting
from compressor.engine.recovery import RecoveringConfig

BY = ("energy", "sensitivity")


def _linears(value, name, config=None) -> Optional[str]:
    items = [value] if isinstance(value, str) else list(value or [])
    if not items:
        return f"{name} names no Linear; use all, attention, ffn or a list of {', '.join(ROLES)}"
    for item in items:
        if item not in GROUPS and item not in ROLES:
            return (f"unknown {name} {item!r}; use all, attention, ffn or a list of "
                    f"{', '.join(ROLES)}")
    return None


def _energy(value, name, config=None) -> Optional[str]:
    if value is None or 0 < value <= 1:
        return None
    return f"{name} must be in (0, 1], got {value}"


def _ratio(value, name, config=None) -> Optional[str]:
    if value is None or 0 <= value <= 1:
        return None
    return f"{name} must be in (0, 1] (0: not used), got {value}"


def _layers(value, name, config=None) -> Optional[str]:
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or not all(isinstance(i, int) and i >= 0 for i in value):
        return f"{name} must be a list of layer indices (0-based), got {value!r}"
    return None


@dataclass
class LowRankConfig(RecoveringConfig):
    """Factorise Linears W ~ U_r S_r V_r^T into two smaller ones, then recover."""

    linears: Union[str, List[str]] = setting("all", check=_linears)   # all, attention, ffn, or roles
    layers: Optional[List[int]] = setting(None, check=_layers)       # layer indices; None: every layer
    energy: float = setting(0.9, check=_energy)          # by energy: share of squared singular values kept
    rank: int = setting(0, check=not_negative)           # one rank for every Linear; 0: not used
    ratio: float = setting(0.0, check=_ratio)            # rank = ratio x full rank; 0: not used
    by: str = setting("energy", choices=BY)              # without rank or ratio: energy or sensitivity
    tolerance: float = setting(0.01, check=positive)     # by sensitivity: most mean KL (nats) per Linear
    min_rank: int = setting(1, check=positive)           # no Linear below this rank
    only_if_smaller: bool = True    # leave dense a Linear whose factors would hold more weights than it
    importance_rows: int = setting(256, check=positive)  # by sensitivity: training rows measured on
    batch_size: int = setting(32, check=positive)        # for the sensitivity passes

    def check(self) -> None:
        super().check()
        if self.rank and self.ratio:
            raise CompressorError("lowrank: give rank or ratio, not both")

    def roles(self) -> tuple:
        items = [self.linears] if isinstance(self.linears, str) else list(self.linears)
        out = []
        for item in items:
            out.extend(GROUPS.get(item, (item,)))
        return tuple(dict.fromkeys(out))

    def rule(self) -> str:
        """How ranks are chosen: rank, ratio, energy or sensitivity."""
        return "rank" if self.rank else "ratio" if self.ratio else self.by
