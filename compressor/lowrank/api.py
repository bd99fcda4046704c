"""``factorise_(model, config)``: each chosen Linear of a model in memory becomes two smaller ones.

W (out x in) ~ U_r S_r V_r^T: ``down`` = sqrt(S_r) V_r^T (in -> r, no bias), ``up`` = U_r sqrt(S_r)
(r -> out, the original bias), a :class:`compressor.core.lowrank.FactorisedLinear`. The rank of
each Linear is fixed, a share of its full rank, chosen by retained spectral energy, or by
measured sensitivity (how far truncating that Linear alone moves the model's predictions).
"""
from __future__ import annotations

import math
from typing import Iterable, List, Optional

import torch
from torch import nn

from compressor.core.errors import CompressorError
from compressor.core.lowrank import (
    energy_kept,
    factorised,
    full_rank,
    linears_of,
    rank_for_energy,
    replace,
    saves,
    spectrum,
)
from compressor.core.settings import config_from_dict
from compressor.lowrank.config import LowRankConfig

# shares of a Linear's full rank that sensitivity tries (then bisects: outputs move less as rank grows)
SENSITIVITY_GRID = (1 / 32, 1 / 16, 1 / 8, 3 / 16, 1 / 4, 5 / 16, 3 / 8, 1 / 2, 5 / 8, 3 / 4, 7 / 8, 1.0)


def factorise_(model: nn.Module, config=None, batches: Optional[Iterable[dict]] = None, **settings) -> dict:
    """Factorise ``model``'s Linears as ``config`` (a :class:`LowRankConfig` or a mapping, with
    keyword ``settings`` merged in) says, in place; no training.

    ``batches`` (model inputs: ``input_ids``, ``attention_mask``...; labels are ignored) are
    needed only for ``by: sensitivity``. Returns ``{"linears": [one record per Linear],
    "factorised", "kept_dense", "parameters_before", "parameters_after", "rule"}``.
    """
    if config is None or isinstance(config, dict):
        config = config_from_dict(LowRankConfig, {**(config or {}), **settings}, what="lowrank")
    config.check()
    rule = config.rule()
    targets = [t for t in linears_of(model, config.roles(), config.layers)
               if isinstance(t["module"], nn.Linear)]
    if not targets:
        raise CompressorError(f"lowrank: the model has no plain Linear among {', '.join(config.roles())}"
                              " (factorised already?)")
    measure = None
    if rule == "sensitivity":
        if batches is None:
            raise CompressorError("lowrank: by sensitivity measures on rows of data; give batches")
        measure = _Sensitivity(model, batches)
    from compressor.core.models import count_parameters

    before = count_parameters(model)
    records: List[dict] = []
    was_training = model.training
    model.eval()
    for target in targets:
        linear = target["module"]
        svd = spectrum(linear)
        full = full_rank(linear)
        kept = energy_kept(svd[1])
        divergence = None
        if rule == "rank":
            rank = config.rank
        elif rule == "ratio":
            rank = math.ceil(config.ratio * full)
        elif rule == "energy":
            rank = rank_for_energy(svd[1], config.energy)
        else:
            rank, divergence = measure.smallest_rank(target, svd, config.tolerance, config.min_rank)
        rank = max(1, min(full, max(config.min_rank, rank)))
        smaller = saves(linear, rank)
        record = {"name": target["name"], "layer": target["layer"], "role": target["role"],
                  "shape": [linear.out_features, linear.in_features], "rank": rank, "full_rank": full,
                  "energy": round(float(kept[rank - 1]), 6),
                  "weights_dense": linear.in_features * linear.out_features,
                  "weights_factorised": rank * (linear.in_features + linear.out_features),
                  "factorised": smaller or not config.only_if_smaller}
        if divergence is not None:
            record["divergence"] = divergence
        if record["factorised"]:
            replace(model, target["names"], factorised(linear, rank, svd))
        records.append(record)
    model.train(was_training)
    done = [r for r in records if r["factorised"]]
    return {"rule": rule, "linears": records, "factorised": len(done),
            "kept_dense": len(records) - len(done),
            "parameters_before": before, "parameters_after": count_parameters(model)}


class _Sensitivity:
    """How far one Linear truncated alone moves the model's outputs from the unchanged model's:
    mean KL divergence of the predicted distributions (squared difference for regression)."""

    def __init__(self, model: nn.Module, batches: Iterable[dict]):
        self.model = model
        self.batches = [{k: v for k, v in b.items() if k != "labels"} for b in batches]
        if not self.batches:
            raise CompressorError("lowrank: by sensitivity needs at least one batch of rows")
        self.reference = self._outputs()

    @torch.no_grad()
    def _outputs(self) -> List[torch.Tensor]:
        self.model.eval()
        return [self.model(**batch).logits.float() for batch in self.batches]

    def divergence(self) -> float:
        total, rows = 0.0, 0
        for ref, out in zip(self.reference, self._outputs()):
            if ref.shape[-1] == 1:
                part = ((out - ref) ** 2).sum()
            else:
                part = torch.nn.functional.kl_div(out.log_softmax(-1), ref.log_softmax(-1),
                                                  log_target=True, reduction="sum")
            total += float(part)
            rows += ref.shape[0]
        return total / max(rows, 1)

    def smallest_rank(self, target: dict, svd, tolerance: float, min_rank: int):
        """``(rank, divergence)``: the smallest rank of the grid whose divergence is at most
        ``tolerance`` (bisection; full rank when none is)."""
        linear = target["module"]
        full = full_rank(linear)
        grid = sorted({max(min(min_rank, full), min(full, math.ceil(f * full))) for f in SENSITIVITY_GRID})
        measured = {}

        def at(rank: int) -> float:
            if rank not in measured:
                replace(self.model, target["names"], factorised(linear, rank, svd))
                try:
                    measured[rank] = self.divergence()
                finally:
                    replace(self.model, target["names"], linear)
            return measured[rank]

        lo, hi = 0, len(grid) - 1   # grid[hi] is full rank: taken when nothing smaller passes
        while lo < hi:
            mid = (lo + hi) // 2
            if at(grid[mid]) <= tolerance:
                hi = mid
            else:
                lo = mid + 1
        rank = grid[lo]
        return rank, max(0.0, round(measured.get(rank, 0.0), 8))
