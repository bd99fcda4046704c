"""The teacher: one frozen copy of a model, and one loss that learns from it.

Every method that learns from a teacher (distillation recovery after pruning and sharing,
BERT-of-Theseus, QAT with distillation, early exit's soft targets) takes its frozen teacher
from :func:`frozen_copy` and its soft-target loss from :func:`compressor.engine.losses.soft_targets`
(the registered ``kd`` loss). :class:`TeacherLoss` is the loss of a method whose only signal from
the teacher is its logits: the task loss and the soft targets, each with its weight.
"""
from __future__ import annotations

import copy
from typing import Optional

import torch
from torch import nn

from compressor.engine.losses import soft_targets


def frozen_copy(model: nn.Module) -> nn.Module:
    """An eval-mode copy of ``model`` whose weights take no gradient (the unchanged teacher)."""
    teacher = copy.deepcopy(model).eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    return teacher


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
