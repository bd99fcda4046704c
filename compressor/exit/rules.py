"""Exit rules, threshold calibration and the compute an exit saves: numpy only (no torch), so the
torch-free segment runtime decides exactly as the PyTorch model does.

A model with exits gives, for each row, logits at every exit in order (the last exit is the
model's own classifier, which always answers). A rule says, exit by exit, which rows stop:

- ``entropy``: the entropy of the softmax divided by log(classes) (0 sure, 1 uniform) is below
  ``threshold`` (FastBERT's "uncertainty"; DeeBERT thresholds the same entropy unnormalised);
  ``threshold`` 0 never exits early;
- ``max_prob``: the largest class probability is at least ``threshold``; above 1 never exits;
- ``patience`` (PABEE): the prediction has stayed the same at ``threshold`` consecutive exits
  after the one where it was first made (for regression: changed by at most ``tolerance``);
  a patience of at least the number of early exits never exits early.

:class:`RuleState` applies a rule to rows that may leave the batch (the runtime drops them);
:func:`exit_points` applies it to all exits' logits at once (the same code, row by row in step).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import numpy as np

RULES = ("entropy", "max_prob", "patience")


class RuleError(ValueError):
    """A rule that cannot apply (named within the toolkit as a CompressorError)."""


try:  # within the toolkit a bad rule is one of its one-line errors
    from compressor.core.errors import CompressorError as _Base
except ImportError:  # pragma: no cover - the runtime on an edge box
    _Base = ValueError


class ExitRuleError(_Base, RuleError):
    pass


def softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(-1, keepdims=True)


def uncertainty(logits: np.ndarray) -> np.ndarray:
    """Normalised entropy of the softmax of each row: 0 (one class) to 1 (uniform)."""
    p = softmax(np.asarray(logits, dtype=np.float64))
    entropy = -(p * np.log(np.clip(p, 1e-12, None))).sum(-1)
    return entropy / math.log(p.shape[-1])


def check_rule(rule: str, threshold: float, regression: bool, exits: Optional[int] = None) -> None:
    if rule not in RULES:
        raise ExitRuleError(f"unknown exit rule {rule!r}; use {', '.join(RULES)}")
    if regression and rule != "patience":
        raise ExitRuleError(f"a regression task exits on patience (its outputs have no "
                            f"probabilities for rule {rule!r})")
    if rule == "patience" and (threshold < 0 or float(threshold) != int(threshold)):
        raise ExitRuleError(f"patience is a whole number of exits, got {threshold}")


@dataclass
class RuleState:
    """One batch's progress through the exits under ``rule``: which rows stop at each exit.

    ``step(logits)`` takes the logits of the rows still running (in their current order)
    at the next exit and returns a boolean mask of those that stop there; the caller drops
    them (``keep(~mask)``) or keeps them. At the last exit every row stops.
    """

    rule: str
    threshold: float
    exits: int                    # exits in all, the model's own classifier included
    regression: bool = False
    tolerance: float = 0.1        # patience, regression: the largest change that counts as agreeing

    def __post_init__(self):
        check_rule(self.rule, self.threshold, self.regression, self.exits)
        self.index = 0
        self.previous: Optional[np.ndarray] = None
        self.count: Optional[np.ndarray] = None

    def step(self, logits: np.ndarray) -> np.ndarray:
        logits = np.asarray(logits, dtype=np.float32)
        rows = logits.shape[0]
        last = self.index == self.exits - 1
        self.index += 1
        if last:
            return np.ones(rows, dtype=bool)
        if self.rule == "entropy":
            return uncertainty(logits) < self.threshold
        if self.rule == "max_prob":
            return softmax(logits.astype(np.float64)).max(-1) >= self.threshold
        # patience
        pred = logits[:, 0] if self.regression else logits.argmax(-1)
        if self.previous is None:
            count = np.zeros(rows, dtype=np.int64)
        else:
            same = (np.abs(pred - self.previous) <= self.tolerance) if self.regression \
                else pred == self.previous
            count = np.where(same, self.count + 1, 0)
        self.previous, self.count = pred, count
        return count >= self.threshold if self.threshold > 0 else np.ones(rows, dtype=bool)

    def keep(self, rows: np.ndarray) -> None:
        """Keep the state of ``rows`` (a boolean mask or indices) only: the others left."""
        if self.previous is not None:
            self.previous, self.count = self.previous[rows], self.count[rows]


def exit_points(all_logits: Sequence[np.ndarray], rule: str, threshold: float,
                regression: bool = False, tolerance: float = 0.1) -> Tuple[np.ndarray, np.ndarray]:
    """Each row's exit (index into the exits) and its logits there, from every exit's logits
    (``all_logits[k]``: ``[rows, classes]``, the model's own classifier last)."""
    exits = len(all_logits)
    rows = all_logits[0].shape[0]
    state = RuleState(rule, threshold, exits, regression, tolerance)
    where = np.full(rows, -1, dtype=np.int64)
    running = np.arange(rows)
    for k, logits in enumerate(all_logits):
        stop = state.step(np.asarray(logits)[running])
        where[running[stop]] = k
        running = running[~stop]
        state.keep(~stop)
        if not len(running):
            break
    chosen = np.stack([np.asarray(all_logits[k][i]) for i, k in enumerate(where)]) if rows else \
        np.zeros((0, all_logits[0].shape[-1]), np.float32)
    return where, chosen


def never_exits(rule: str, exits: int) -> float:
    """A threshold at which no row leaves before the model's own classifier."""
    return {"entropy": 0.0, "max_prob": 2.0, "patience": float(max(exits - 1, 1))}[rule]


def candidates(rule: str, exits: int) -> List[float]:
    """The thresholds the calibration tries, from never exiting early to exiting at once."""
    if rule == "entropy":
        return [round(float(t), 4) for t in np.concatenate([np.linspace(0, 0.1, 21)[:-1],
                                                            np.linspace(0.1, 1.0, 46)])]
    if rule == "max_prob":
        return [2.0] + [round(float(t), 4) for t in np.concatenate(
            [1 - np.logspace(-4, -1, 20), np.linspace(0.9, 0.5, 41)])]
    return [float(t) for t in range(exits - 1, -1, -1)]


# -- what an exit costs ---------------------------------------------------------

def layer_flops(length: int, hidden: int, heads_width: int, ffn: int, gated: bool = False) -> float:
    """Multiply-adds x 2 of one encoder layer over ``length`` tokens: query, key, value and output
    projections, attention scores and mixing, and the FFN (three matrices when gated)."""
    proj = 2 * length * hidden * heads_width * 4
    attention = 2 * 2 * length * length * heads_width
    ffn_cost = 2 * length * hidden * ffn * (3 if gated else 2)
    return float(proj + attention + ffn_cost)


def head_flops(hidden: int, classes: int) -> float:
    return float(2 * (hidden * hidden + hidden * classes))


def exit_costs(length: int, widths: Sequence[Tuple[int, int]], hidden: int, exit_layers: Sequence[int],
               classes: int, gated: bool = False) -> np.ndarray:
    """FLOPs spent on a row of ``length`` tokens that stops at each exit (``exit_layers``: 1-based
    layer after which each exit sits, the last being the final layer; each early exit runs its
    head, and the exits passed before it theirs)."""
    per_layer = np.cumsum([layer_flops(length, hidden, w, f, gated) for w, f in widths])
    head = head_flops(hidden, classes)
    return np.array([per_layer[layer - 1] + head * (k + 1 if k < len(exit_layers) - 1 else k)
                     for k, layer in enumerate(exit_layers)])


def flops_saved(lengths: Sequence[int], where: Sequence[int], widths, hidden: int,
                exit_layers: Sequence[int], classes: int, gated: bool = False) -> dict:
    """FLOPs of the rows as they exited against all of them running every layer (no heads)."""
    spent, full = 0.0, 0.0
    cache = {}
    for length, k in zip(lengths, where):
        if length not in cache:
            costs = exit_costs(length, widths, hidden, exit_layers, classes, gated)
            cache[length] = (costs, float(np.sum([layer_flops(length, hidden, w, f, gated)
                                                  for w, f in widths])))
        costs, whole = cache[length]
        spent += costs[k]
        full += whole
    return {"flops": spent, "flops_without_exits": full,
            "flops_saved": round(float(1 - spent / full), 4) if full else 0.0}


# -- calibration ----------------------------------------------------------------

def calibrate(all_logits: Sequence[np.ndarray], labels: np.ndarray, rule: str, target: float,
              score_fn, costs: np.ndarray, regression: bool = False, tolerance: float = 0.1,
              measure: str = "score") -> dict:
    """The threshold of ``rule`` with the lowest mean cost whose retention is at least ``target``.

    Retention is ``score_fn(predictions, labels)`` of the early-exit predictions over that of
    the model's own classifier on the same rows (``measure`` ``score``), or the share of rows
    whose prediction equals the model's own (``agreement``: needs no labels). ``costs`` is
    ``[rows, exits]``: what each row spends stopping at each exit. Returns the choice and
    every candidate tried.
    """
    exits = len(all_logits)
    final = np.asarray(all_logits[-1])
    preds_of = (lambda z: z[:, 0]) if regression else (lambda z: z.argmax(-1))
    full_score = score_fn(preds_of(final), labels) if measure == "score" else 1.0
    full_cost = float(costs[:, -1].mean())
    tried = []
    for threshold in candidates(rule, exits):
        where, chosen = exit_points(all_logits, rule, threshold, regression, tolerance)
        preds = preds_of(chosen)
        if measure == "score":
            value = score_fn(preds, labels)
            retention = value / full_score if full_score else 1.0
        else:
            same = (np.abs(preds - preds_of(final)) <= tolerance) if regression else preds == preds_of(final)
            value = retention = float(np.mean(same))
        cost = float(costs[np.arange(len(where)), where].mean())
        tried.append({"threshold": threshold, "retention": round(float(retention), 5),
                      "score": round(float(value), 5), "mean_exit": round(float(where.mean()) + 1, 4),
                      "relative_cost": round(cost / full_cost, 4) if full_cost else 1.0})
    meeting = [t for t in tried if t["retention"] >= target]
    best = min(meeting, key=lambda t: (t["relative_cost"], -t["retention"])) if meeting else None
    if best is None:   # nothing meets the target: never exit early
        best = {"threshold": never_exits(rule, exits), "retention": 1.0, "note":
                f"no threshold kept {target:.3f} of the score; the model never exits early"}
    return {"rule": rule, "threshold": best["threshold"], "target": target, "measure": measure,
            "full_score": round(float(full_score), 5), "chosen": best, "tried": tried}
