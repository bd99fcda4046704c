"""The teacher: which model it is, one frozen copy of it, and one loss that learns from it.

Every method that learns from a teacher (distillation, distillation recovery after pruning and
sharing, BERT-of-Theseus, QAT with distillation, early exit's soft targets, augmentation's
labels) takes a ``teacher:`` setting (:func:`compressor.engine.train_config.teacher_setting`) with
one default and one meaning: ``input`` (the model the stage starts from, unchanged: the
default), ``recipe`` (the recipe's teacher) or a folder. :func:`resolve_teacher` says which
folder that is and :func:`load_teacher` gives the frozen teacher (:func:`frozen_copy` of the
input the method already holds, or the folder loaded). The soft-target loss is
:func:`compressor.engine.losses.soft_targets` (the registered ``kd`` loss); :class:`TeacherLoss`
is the loss of a method whose only signal from the teacher is its logits: the task loss and the
soft targets, each with its weight.
"""
from __future__ import annotations

import copy
import os
from typing import Optional, Tuple

import torch
from torch import nn

from compressor.core.errors import CompressorError
from compressor.engine.losses import soft_targets
from compressor.engine.train_config import DEFAULT_TEACHER, TEACHER_VALUES  # noqa: F401 - re-exported

OUTSIDE_RECIPE = ("teacher: recipe means the recipe's teacher, and there is none outside a recipe; "
                  "use teacher: input (the model given) or a folder")


def resolve_teacher(setting: str, input_dir: Optional[str], recipe_teacher_dir: Optional[str]) -> Optional[str]:
    """The folder a method's teacher loads from, as its ``teacher`` setting says: ``input`` is
    ``input_dir``, the model the stage starts from (None where a method holds that model only in
    memory: its teacher is then a frozen copy of it); ``recipe`` is ``recipe_teacher_dir`` (one
    line of error outside a recipe, where there is none); anything else names a folder (an alias
    or hub id is resolved)."""
    from compressor.core.models import resolve_model

    if setting == "input":
        return input_dir
    if setting == "recipe":
        if not recipe_teacher_dir:
            raise CompressorError(OUTSIDE_RECIPE)
        return recipe_teacher_dir
    return resolve_model(setting)


def _same_folder(a: Optional[str], b: Optional[str]) -> bool:
    return bool(a and b) and os.path.abspath(a) == os.path.abspath(b)


def load_teacher(setting: str, model: Optional[nn.Module], task, recipe_teacher_dir: Optional[str] = None,
                 input_dir: Optional[str] = None, attn: Optional[str] = None,
                 tokenizer=None, frozen: bool = True) -> Tuple[nn.Module, object, Optional[str]]:
    """``(teacher, its tokenizer, its folder)``: the frozen teacher ``setting`` names (see
    :func:`resolve_teacher`). The input itself is a :func:`frozen_copy` of ``model`` where the
    method holds it (tokenizer None: the input's own; folder ``input_dir``), else its folder is
    loaded; a folder must be a classifier of ``task``. With ``tokenizer`` (a method that feeds
    the teacher its own token ids), a teacher that tokenises differently is refused. ``frozen``
    False leaves a loaded folder trainable (distillation builds its student from the teacher's
    layers first, and freezes the teacher itself)."""
    from compressor.core.models import load_for_task

    folder = resolve_teacher(setting, input_dir, recipe_teacher_dir)
    if model is not None and (folder is None or (setting == "input" or _same_folder(folder, input_dir))):
        return frozen_copy(model), None, folder
    if folder is None:
        raise CompressorError("teacher: input needs the stage's input model")
    teacher, teacher_tokenizer = load_for_task(folder, task, attn_implementation=attn)
    if getattr(teacher.config, "num_labels", None) != task.num_labels:
        raise CompressorError(f"teacher {folder} is not a {task.name} classifier")
    if tokenizer is not None:
        from compressor.engine.students import same_tokenizer

        if not same_tokenizer(tokenizer, teacher_tokenizer):
            raise CompressorError(f"teacher {folder} tokenises differently from the model it teaches, "
                                  "which this method feeds its own token ids; give a teacher with "
                                  "the same tokenizer")
    return (freeze(teacher) if frozen else teacher), teacher_tokenizer, folder


def frozen_copy(model: nn.Module) -> nn.Module:
    """An eval-mode copy of ``model`` whose weights take no gradient (the unchanged teacher)."""
    return freeze(copy.deepcopy(model))


def freeze(model: nn.Module) -> nn.Module:
    """``model`` in eval mode, its weights taking no gradient (a teacher)."""
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


class TeacherLoss:
    """``loss_fn(model, batch)`` for ``compressor.engine.train.fit``: ``task_weight`` times the
    model's task loss plus ``kd_weight`` times the soft targets of the frozen ``teacher`` at
    ``temperature`` (no teacher, or a zero weight: the task loss alone)."""

    def __init__(self, teacher: Optional[nn.Module] = None, kd_weight: float = 0.0,
                 temperature: float = 1.0, task_weight: float = 1.0):
        self.teacher, self.kd_weight = teacher, float(kd_weight)
        self.temperature, self.task_weight = float(temperature), float(task_weight)

    def __call__(self, model, batch: dict) -> torch.Tensor:
        out = model(**batch)
        if self.teacher is None or not self.kd_weight:
            return out.loss
        inputs = {k: v for k, v in batch.items() if k != "labels"}
        with torch.no_grad():
            teacher_logits = self.teacher(**inputs).logits
        soft = soft_targets(out.logits, teacher_logits, self.temperature)
        if self.task_weight == 1.0:
            return out.loss + self.kd_weight * soft
        return self.task_weight * out.loss + self.kd_weight * soft
