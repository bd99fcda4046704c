"""Knowledge distillation: soft targets, hidden states, attention, MiniLM relations, any student.

``distill(teacher, out, task, config)`` trains a student from a task checkpoint;
``losses`` holds the loss functions, registered by name (``register_loss``),
``students`` the student configs (one per ``kind``) and builders,
``small`` the BiLSTM/CNN classifiers; the recipe stage is ``distill``.
"""
# imported on first use, so ``compressor --help`` does not load torch
_LAZY = {"DistillConfig": "distiller", "distill": "distiller", "distill_model": "distiller",
         "LOSSES": "losses", "Losses": "losses", "LossSettings": "losses", "Signals": "losses",
         "layer_mapping": "losses", "register_loss": "losses",
         "StudentConfig": "students", "build_student": "students", "student_config": "students"}
__all__ = sorted(_LAZY)


from ..lazy import lazy_getattr  # noqa: E402

__getattr__ = lazy_getattr(__name__, _LAZY)
