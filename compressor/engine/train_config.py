"""The settings of a training run, apart from the loop that runs them.

Nothing here imports torch, so the command line can build its options from
these fields (and answer ``--help``) without loading the training stack.
``compressor.engine.train`` re-exports :class:`TrainConfig`.

Every method that trains composes one as its ``train`` section (:func:`train_setting`,
with the method's own defaults): ``distill: {train: {epochs: 3, lr: 5e-5}, ...}`` in a
recipe, ``DistillConfig(train=TrainConfig(epochs=3))`` in Python. The same keys written
flat in the stage (the older form) are moved into it with a deprecation note.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar, List, Optional

from compressor.core.device import PRECISIONS
from compressor.core.settings import check_fields, not_negative, positive, setting
from compressor.core.settings import device as device_setting


@dataclass
class TrainConfig:
    """Settings of one training run; the names are the recipe keys (under ``train:`` in a
    method's stage) and the CLI options."""

    # a method's train section also takes these keys written flat in the stage (deprecated)
    FLAT_KEYS: ClassVar[str] = "training"

    epochs: float = setting(3.0, check=lambda v, name, c: _epochs(v, c))   # passes over the training rows (fractions allowed)
    lr: float = setting(5e-5, check=positive)          # peak learning rate (AdamW, linear warmup then decay)
    batch_size: int = setting(32, check=positive)      # the global batch (with several processes too)
    max_length: int = setting(128, check=positive)     # longest input in tokens; longer ones are cut
    seed: int = 42                                     # initialisation, shuffling, sampled rows
    warmup: float = setting(0.1, check=lambda v, name, c: None if 0 <= v < 1 else  # share of the steps
                            f"warmup is a share of the steps in [0, 1), got {v}")   # spent warming up the lr
    weight_decay: float = 0.01                         # AdamW weight decay
    grad_accum: int = setting(1, check=positive)       # batches whose gradients add up before each optimiser step
    # shuffle, sort within mega-batches of 50 batches, shuffle the batches (widest first); the
    # attention's cost grows with the square of a batch's width. Off: recipes keep their batches
    group_by_length: bool = False   # shuffled batches of rows of nearly one length, as HF Trainer's: less padding on short texts
    max_grad_norm: float = 1.0                         # clip the gradient norm to this; 0 = no clipping
    eval_every: int = setting(0, check=not_negative)   # optimiser steps between dev evaluations; 0 = once per epoch
    max_steps: int = setting(0, check=not_negative)    # stop after this many optimiser steps; 0 = no limit
    device: str = setting("auto", check=device_setting)   # cpu, cuda, cuda:N or auto (CUDA when present)
    precision: str = setting("fp32", choices=PRECISIONS)   # fp32, bf16 or fp16 (fp16 needs CUDA)
    # trackers that get the loss and dev scores, through accelerate, into OUT/runs/:
    # none, or tensorboard, mlflow, wandb (several: comma-separated); all work offline
    report_to: str = setting("none", check=lambda v, name, c: report_to_problem(v, name))   # none, or trackers: tensorboard, mlflow, wandb

    def check(self) -> None:
        check_fields(self)


TRAIN_HELP = "the training run's settings (epochs, lr, batch_size ...){}"


def train_setting(refuse: Optional[dict] = None, **defaults):
    """The ``train`` field of a method's config: a :class:`TrainConfig` whose defaults are the
    method's own where given (early exit trains 2 epochs at lr 5e-4, say). A config's
    ``__post_init__`` turns a mapping into the section with
    ``compressor.core.settings.section_of(self, "train")``, on these defaults. ``refuse``:
    ``{key: why}``, the keys this method takes elsewhere (Theseus's two phases' epochs)."""
    shown = ", ".join(f"{k} {v}" for k, v in defaults.items())
    metadata = {"help": TRAIN_HELP.format(f"; this method's defaults: {shown}" if shown else "")}
    if refuse:
        metadata["help"] += "".join(f"; no {key}: {why}" for key, why in refuse.items())
        metadata["refuse"] = dict(refuse)
    return dataclasses.field(default_factory=lambda: TrainConfig(**defaults), metadata=metadata)


# -- the teacher ---------------------------------------------------------------

# Every method that learns from a teacher takes ``teacher:`` with these values and this default;
# compressor.engine.teacher resolves it (resolve_teacher, load_teacher).
TEACHER_VALUES = ("input", "recipe")   # or a folder (an alias or hub id)
DEFAULT_TEACHER = "input"
TEACHER_HELP = ("the model this method learns from: input (the model the stage starts from, "
                "unchanged), recipe (the recipe's teacher; only in a recipe) or a folder")


def _teacher_problem(value, name, config=None) -> Optional[str]:
    if not isinstance(value, str) or not value.strip():
        return (f"{name} is input (the model the stage starts from), recipe (the recipe's teacher) "
                f"or a folder, got {value!r}")
    return None


def teacher_setting():
    """The ``teacher`` field of a method's config: one default and one meaning everywhere."""
    return dataclasses.field(default=DEFAULT_TEACHER, metadata={"check": _teacher_problem,
                                                                "help": TEACHER_HELP})


# --report-to name -> the module that provides it, and how to install it
TRACKERS = {"tensorboard": ("tensorboard", "pip install 'compressor[trackers]' (or pip install tensorboard)"),
            "mlflow": ("mlflow", "pip install mlflow"), "wandb": ("wandb", "pip install wandb")}


def trackers(value) -> List[str]:
    """The tracker names of a ``report_to`` value ("none", "tensorboard", "tensorboard,wandb", a list)."""
    items = value if isinstance(value, (list, tuple)) else str(value or "none").split(",")
    names = [str(v).strip().lower() for v in items if str(v).strip()]
    return [n for n in names if n != "none"]


def report_to_problem(value, name: str = "report_to") -> Optional[str]:
    """What is wrong with ``report_to``: an unknown tracker, or one whose package is missing
    (one line saying what to install)."""
    import importlib.util

    for tracker in trackers(value):
        if tracker not in TRACKERS:
            return f"unknown {name} {tracker!r}; use none, {', '.join(TRACKERS)}"
        module, install = TRACKERS[tracker]
        if importlib.util.find_spec(module) is None:
            return f"{name} {tracker} needs the {module} package, which is not installed: {install}"
    return None


def _epochs(value, config) -> Optional[str]:
    if value <= 0 and (config is None or config.max_steps <= 0):
        return "epochs must be positive (or set max_steps)"
    return None
