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


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
