"""The settings of early exit (no torch here: the command line reads them)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import List, Optional

from compressor.core.presets import PRESET_NAMES
from compressor.core.settings import check_fields, from_values, not_negative, positive, section_of, setting
from compressor.engine.train_config import TrainConfig, teacher_setting, train_setting
from compressor.exit.rules import RULES

TRAINING = ("two_stage", "self_distill", "joint")
WEIGHTINGS = ("linear", "uniform")
MEASURES = ("score", "agreement")


def _layers(value, name, config=None):
    if value is None or value == "all":
        return None
    if not isinstance(value, list) or not all(isinstance(v, int) and v >= 1 for v in value):
        return f"{name} is 'all' or a list of layer numbers from 1, got {value!r}"
    return None


def _units(value, name, config=None):
    bad = [v for v in value if not isinstance(v, str) or not re.fullmatch(r"layer\.\d+|embeddings", v)]
    if bad:
        return (f"{name} holds units as a mixed-precision search names them (layer.0 for the first "
                f"encoder layer, or embeddings), got {bad!r}")
    return None


def _share(value, name, config=None):
    if not 0 < value <= 1:
        return f"{name} is a share in (0, 1], got {value}"
    return None


@dataclass
class CalibrateSettings:
    """Picking the threshold: on ``rows`` training rows held out from exit training (never dev),
    the cheapest threshold whose score keeps ``target`` of the model's own. ``split: holdout``
    draws them from the rows the teacher was fine-tuned without (``finetune --holdout``), so the
    model never learned from them either; the exits then train on every training row."""

    rows: int = setting(2000, check=positive)     # training rows held out for the choice
    # which training rows (not "on": YAML reads an unquoted on as true)
    split: str = setting("train", choices=("train", "holdout"))
    target: float = setting(0.99, check=_share)   # retention to meet on them
    measure: str = setting("score", choices=MEASURES)   # score (labels) or agreement (with the model's own predictions)


@dataclass
class EarlyExitConfig:
    """Exit heads after ``layers`` (``all``: every layer but the last, whose exit is the model's
    own classifier), trained by ``training``:

    - ``two_stage`` (DeeBERT's second stage): the model fixed, each exit learns the labels;
    - ``self_distill`` (FastBERT): the model fixed, each exit learns the teacher's soft
      targets at ``temperature`` (labels unused: unlabelled text suffices); the teacher is the
      model itself (``teacher: input``), the recipe's teacher or a folder;
    - ``joint``: the model and its exits together on a weighted sum of every exit's task loss
      (``weighting`` linear: exit i weighs i, as PABEE and DeeBERT's joint baseline).

    With the model fixed, the pooled states at each exit are computed once for all
    training rows (``cache``) and the heads train on them alone (``train``: the run's settings).
    Then ``rule`` is calibrated.
    """

    train: TrainConfig = train_setting(epochs=2.0, lr=5e-4, warmup=0.0)   # the exits' training run
    layers: Optional[List[int]] = setting(None, check=_layers)   # None / all: every layer but the last
    training: str = setting("two_stage", choices=TRAINING)
    temperature: float = setting(2.0, check=positive)    # self_distill
    teacher: str = teacher_setting()   # self_distill's soft targets: input (the model's own, fixed), recipe (the recipe's teacher) or a folder
    weighting: str = setting("linear", choices=WEIGHTINGS)   # joint
    dropout: float = setting(0.1, check=not_negative)
    pooling: str = setting("mean", choices=("mean", "cls"))   # what a head reads: the mean of the real tokens' states, or the first token's
    cache: bool = True            # model fixed: compute each exit's input once
    rule: str = setting("auto", choices=RULES + ("auto",))   # auto: entropy, patience on a regression task
    tolerance: float = setting(0.1, check=not_negative)   # patience on a regression task
    calibrate: CalibrateSettings = field(default_factory=CalibrateSettings)

    def __post_init__(self):
        self.train = section_of(self, "train")
        if self.layers == "all":
            self.layers = None
        self.calibrate = from_values(CalibrateSettings, self.calibrate, "calibrate")

    def check(self) -> None:
        check_fields(self)
        self.train.check()
        check_fields(self.calibrate)

    def task_rule(self, regression: bool) -> str:
        """The rule for a task: ``auto`` is entropy, or patience where outputs are a regression
        score (no probabilities to threshold)."""
        if self.rule == "auto":
            return "patience" if regression else "entropy"
        return self.rule

    def check_task(self, task):
        """(setting path, problem) where the task cannot use these settings, else None: read by
        recipe validation, so a recipe run with ``--task stsb`` says so before any stage."""
        from compressor.exit.rules import RuleError, check_rule

        try:
            check_rule(self.task_rule(task.is_regression), 1, task.is_regression)
        except RuleError as exc:
            return ("rule",), f"{task.name}: {exc}"
        return None


@dataclass
class ExitExportConfig:
    """The exits as ONNX segments: fused, and dynamic INT8 with ``preset`` unless ``int8`` is off
    (``fp32_units``: the encoder layers kept FP32 there, Q-BERT-style)."""

    opset: int = 17
    optimize: bool = True
    int8: bool = True
    preset: str = setting("auto", choices=PRESET_NAMES)
    # units kept FP32 in the INT8 segments, named as a mixed-precision search names them
    # (``layer.7``: the eighth encoder layer, wherever its segment is; ``embeddings``)
    fp32_units: List[str] = setting(default_factory=list, check=_units)
    parity: bool = True           # chained segments against the PyTorch early-exit model on dev rows
    parity_rows: int = setting(200, check=positive)
    threads: Optional[int] = setting(None, check=lambda v, n, c=None: None if v is None or v >= 1
                                     else f"{n} must be at least 1, got {v}")

    def check(self) -> None:
        check_fields(self)
