"""The ``token_prune`` stage's settings: which tokens each layer passes on, and how that is learnt.

After each layer but the last, a token's importance is the attention it received: the mean
over heads and (kept) query positions of the attention probability to it (LTP, Kim et al.
2022). The layers after it compute only on the tokens kept:

* ``by: threshold`` keeps the tokens whose importance is at least the layer's threshold
  (``threshold``: one value for the last pruning layer, ramped linearly from the first, or a
  list, one per layer). With ``learn`` the thresholds are learnt as LTP does: a soft phase
  (``train``: masks ``sigmoid((importance - threshold) / temperature)``, a cost of
  ``kept_weight`` times the mean share of tokens kept, soft targets from the teacher) and a
  hard phase (``hard_epochs``: tokens below the frozen thresholds dropped, the weights tuned).
* ``by: ratio`` keeps the ``keep`` share of each layer's tokens with the highest importance
  (PoWER-BERT's progressive elimination with fixed ratios; no training needed).

``[CLS]`` (the first token) and the separators are never dropped, and each segment of a pair
keeps at least its most important token. ``threshold: 0`` or ``keep: 1`` drops nothing.

``search_on: holdout`` chooses the rule's values instead of taking them as set: each of
``candidates`` (a value as ``keep`` or ``threshold`` takes it: a number or one per layer) is
scored on the training rows the teacher was fine-tuned without (``compressor finetune --holdout
N``), and the one whose layers compute on the fewest tokens while its score there is at most
``max_drop`` points below the unpruned model's is kept (none within: nothing is dropped). Dev is
scored once, on the choice.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Union

from compressor.core.errors import CompressorError
from compressor.core.settings import check_fields, not_negative, positive, section_of, setting
from compressor.engine.train_config import TrainConfig, teacher_setting, train_setting

BY = ("threshold", "ratio")
SEARCH = ("none", "holdout")
# the candidates a search tries when none are given: keep shares (by ratio), last-layer thresholds (by threshold)
DEFAULT_CANDIDATES = {"ratio": [0.9, 0.8, 0.7, 0.6, 0.5], "threshold": [0.002, 0.005, 0.01, 0.02, 0.04]}


def _per_layer(low: float, high: float, closed_low: bool):
    def check(value, name, config=None) -> Optional[str]:
        items = value if isinstance(value, (list, tuple)) else [value]
        if not items:
            return f"{name} is a number or a list of numbers, one per layer; got an empty list"
        for item in items:
            if isinstance(item, bool) or not isinstance(item, (int, float)):
                return f"{name} is a number or a list of numbers, one per layer; got {item!r}"
            if not ((low <= item if closed_low else low < item) and item <= high):
                bracket = "[" if closed_low else "("
                return f"{name} must be in {bracket}{low:g}, {high:g}], got {item}"
        return None
    return check


def _candidates(value, name, config=None) -> Optional[str]:
    """Each candidate is a value the rule takes (``keep`` for by ratio, ``threshold`` for by threshold)."""
    by = getattr(config, "by", "ratio")
    check = _per_layer(0.0, 1.0, by == "threshold")
    for item in value:
        problem = check(item, f"{name} ({'keep' if by == 'ratio' else 'threshold'} values)")
        if problem:
            return problem
    return None


@dataclass
class TokenPruneConfig:
    """Drop tokens between layers by their attention-derived importance (LTP or fixed ratios)."""

    by: str = setting("threshold", choices=BY)     # threshold (LTP, learnable) or ratio (top-k share)
    threshold: Union[float, List[float]] = setting(0.01, check=_per_layer(0.0, 1.0, True))   # the last pruning layer's (ramped from the first), or one per layer
    keep: Union[float, List[float]] = setting(1.0, check=_per_layer(0.0, 1.0, False))      # by ratio: share of each layer's tokens kept, or one per layer
    learn: bool = True                  # by threshold: learn the thresholds (soft phase, then hard phase)
    temperature: float = setting(1e-3, check=positive)     # soft masks: sigmoid((importance - threshold) / temperature)
    kept_weight: float = setting(0.1, check=not_negative)  # soft phase: weight of the mean share of tokens kept
    threshold_lr: float = setting(1e-2, check=positive)    # soft phase: learning rate of the thresholds
    hard_epochs: float = setting(1.0, check=not_negative)  # hard phase: epochs tuning the weights under the frozen rule (any by); 0 = none
    kd_weight: float = setting(1.0, check=not_negative)    # soft targets from the teacher (0: the task loss alone)
    kd_temperature: float = setting(2.0, check=positive)
    search_on: str = setting("none", choices=SEARCH)   # holdout: choose among candidates on the teacher's held-out rows
    candidates: List[Union[float, List[float]]] = setting(default_factory=list, check=_candidates)   # search: values tried ([]: 0.9..0.5 kept by ratio, thresholds 0.002..0.04)
    max_drop: float = setting(1.0, check=not_negative)   # search: tolerated score drop (points) on the held-out rows
    teacher: str = teacher_setting()   # the soft targets' model: input (the unpruned model), recipe, or a folder
    train: TrainConfig = train_setting(epochs=1.0)   # the soft phase's run (and the hard phase's other settings)

    def __post_init__(self):
        self.train = section_of(self, "train")

    @property
    def max_length(self) -> int:
        return self.train.max_length

    @property
    def seed(self) -> int:
        return self.train.seed

    @property
    def device(self) -> str:
        return self.train.device

    def check(self) -> None:
        check_fields(self)
        self.train.check()
        if self.learn and self.by != "threshold":
            raise CompressorError("token_prune: learn trains thresholds; it needs by: threshold")
        if self.search_on != "none" and self.learn:
            raise CompressorError("token_prune: search_on chooses the values on held-out rows; learn "
                                  "learns them: set learn: false to search")

    def search_candidates(self) -> list:
        """The values a search tries, each as ``keep`` or ``threshold`` takes it."""
        return list(self.candidates) or list(DEFAULT_CANDIDATES[self.by])

    def values_of(self, candidate, layers: int) -> List[float]:
        """:meth:`values` of one search candidate."""
        from dataclasses import replace

        return replace(self, **{"threshold" if self.by == "threshold" else "keep": candidate}).values(layers)

    def values(self, layers: int) -> List[float]:
        """The threshold (by threshold) or kept share (by ratio) after each layer but the last."""
        points = max(layers - 1, 0)
        value = self.threshold if self.by == "threshold" else self.keep
        if isinstance(value, (list, tuple)):
            if len(value) != points:
                raise CompressorError(
                    f"token_prune: {'threshold' if self.by == 'threshold' else 'keep'} lists "
                    f"{len(value)} values; the model's {layers} layers prune after {points} of them")
            return [float(v) for v in value]
        if self.by == "ratio":
            return [float(value)] * points
        # LTP's start: thresholds rising linearly to the given one at the last pruning layer
        return [float(value) * (i + 1) / points for i in range(points)]
