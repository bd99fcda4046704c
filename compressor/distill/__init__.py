"""Knowledge distillation: soft targets, hidden states, attention, MiniLM relations, any student.

``distill(teacher, out, task, config)`` trains a student from a task checkpoint;
``losses`` holds the loss functions, registered by name (``register_loss``),
``students`` the student configs (one per ``kind``) and builders,
``small`` the BiLSTM/CNN classifiers; the recipe stage is ``distill``.
"""
from .distiller import DistillConfig, distill, distill_model  # noqa: F401
from .losses import LOSSES, Losses, LossSettings, Signals, layer_mapping, register_loss  # noqa: F401
from .students import StudentConfig, build_student, student_config  # noqa: F401
