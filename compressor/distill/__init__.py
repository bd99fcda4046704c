"""Knowledge distillation: soft targets, hidden states, attention, MiniLM relations, any student.

``distill(teacher, out, task, config)`` trains a student from a task checkpoint;
``losses`` holds the loss functions, ``students`` the student builders,
``small`` the BiLSTM/CNN classifiers; the recipe stage is ``distill``.
"""
from .distiller import DistillConfig, distill, distill_model  # noqa: F401
from .losses import LossConfig, layer_mapping  # noqa: F401
from .students import StudentSpec, build_student  # noqa: F401
