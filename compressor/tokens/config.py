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
``candidates`` (a value as ``keep`` or ``threshold`` takes it: a number or one per layer; with
``learn``, a ``kept_weight``) is tuned for ``search_epochs`` (at most ``search_steps`` optimiser
steps) from the same starting
weights (soft targets from ``teacher``, on the training rows and ``augment``'s rows), then scored
on the training rows the teacher was fine-tuned without (``compressor finetune --holdout N``);
the unpruned model is given the same tuning and scored there too. The candidate whose layers
compute on the fewest tokens while its score is at most ``max_drop`` points below the tuned
unpruned model's is kept with its tuned weights (none within: nothing is dropped, the tuned
unpruned weights go on), and the hard phase continues from them. Candidates run from the least
to the most pruning; one that loses more than ``search_skip_drop`` points rules out those that
keep no more tokens after any layer. Dev is scored once, on the choice.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Union

from compressor.core.errors import CompressorError
from compressor.core.settings import (
    check_fields,
    not_negative,
    positive,
    section_of,
    setting,
    stage_folder,
)
from compressor.engine.train_config import TrainConfig, teacher_setting, train_setting

BY = ("threshold", "ratio")
SEARCH = ("none", "holdout")
# the candidates a search tries when none are given: keep shares (by ratio), last-layer thresholds
# (by threshold), kept_weight values (learn)
DEFAULT_CANDIDATES = {"ratio": [0.9, 0.8, 0.7, 0.6, 0.5], "threshold": [0.002, 0.005, 0.01, 0.02, 0.04],
                      "learn": [0.05, 0.1, 0.2, 0.5, 1.0]}


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
    """Each candidate is a value the rule takes (``keep`` for by ratio, ``threshold`` for by
    threshold), or with ``learn`` a ``kept_weight``."""
    if getattr(config, "learn", False) and getattr(config, "search_on", "none") != "none":
        for item in value:
            if isinstance(item, bool) or not isinstance(item, (int, float)) or item < 0:
                return (f"{name} (kept_weight values, as learn searches) must be numbers >= 0, "
                        f"got {item!r}")
        return None
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
    candidates: List[Union[float, List[float]]] = setting(default_factory=list, check=_candidates)   # search: values tried ([]: 0.9..0.5 kept by ratio, thresholds 0.002..0.04; learn: kept_weight 0.05..1)
    max_drop: float = setting(1.0, check=not_negative)   # search: tolerated score drop (points) on the held-out rows, against the unpruned model given the same tuning
    search_epochs: float = setting(0.0, check=not_negative)   # search: passes over the training rows tuning under each candidate (and the unpruned model) before its held-out score
    search_steps: int = setting(0, check=not_negative)   # search: optimiser steps of that tuning (with search_epochs: at most); both 0: scored untuned (learn needs tuning)
    search_skip_drop: float = setting(5.0, check=not_negative)   # search: a candidate losing more points than this rules out those keeping no more tokens after any layer; 0: none ruled out
    augment: str = stage_folder("augment")   # a folder of augmented rows (compressor augment; in a recipe, "recipe": its augment stage's) trained on beside the training rows, the teacher's soft targets their only targets
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
        if self.search_on != "none" and self.learn and not self.search_tunes:
            raise CompressorError("token_prune: search_on with learn chooses kept_weight by learning "
                                  "thresholds under each candidate: set search_epochs or search_steps "
                                  "(or learn: false to search fixed values)")
        if self.augment and not self.kd_weight:
            raise CompressorError("token_prune: augment's rows have no labels, the teacher's soft targets "
                                  "are their only target: set kd_weight > 0")
        if self.augment and not (self.learn or self.hard_epochs > 0 or self.search_tunes):
            raise CompressorError("token_prune: augment gives rows to train on, and this stage trains "
                                  "nothing (learn: false, hard_epochs: 0, no search tuning)")

    @property
    def search_tunes(self) -> bool:
        """Whether a search tunes under each candidate before scoring it."""
        return self.search_on != "none" and (self.search_epochs > 0 or self.search_steps > 0)

    def search_train(self) -> TrainConfig:
        """The training run of the search's tuning: ``train`` for ``search_epochs`` (at most
        ``search_steps`` steps), evaluated once, at its end, on the rows it is given."""
        from dataclasses import replace

        return replace(self.train, epochs=self.search_epochs, max_steps=self.search_steps, eval_every=10 ** 9)

    @property
    def searches_weight(self) -> bool:
        """Whether the search's candidates are ``kept_weight`` values (learnt thresholds)."""
        return self.search_on != "none" and self.learn

    def search_candidates(self) -> list:
        """The values a search tries, each as ``keep`` or ``threshold`` takes it (with
        ``learn``: ``kept_weight`` values)."""
        return list(self.candidates) or list(DEFAULT_CANDIDATES["learn" if self.searches_weight else self.by])

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
