"""Knowledge distillation: soft targets, hidden states, attention, MiniLM relations, any student.

``distill(teacher, out, task, config)`` trains a student from a task checkpoint;
``losses`` holds the loss functions, registered by name (``register_loss``),
``students`` the student configs (one per ``kind``) and builders,
``small`` the BiLSTM/CNN classifiers; the recipe stage is ``distill``.
"""
# imported on first use, so ``compressor --help`` does not load torch
_LAZY = {"DistillConfig": "compressor.engine.distiller", "distill": "compressor.engine.distiller", "distill_model": "compressor.engine.distiller",
         "LOSSES": "compressor.engine.losses", "Losses": "compressor.engine.losses", "LossSettings": "compressor.engine.losses", "Signals": "compressor.engine.losses",
         "layer_mapping": "compressor.engine.losses", "register_loss": "compressor.engine.losses",
         "StudentConfig": "compressor.engine.students", "build_student": "compressor.engine.students", "student_config": "compressor.engine.students"}
__all__ = sorted(_LAZY)


from compressor.core.lazy import lazy_getattr  # noqa: E402

__getattr__ = lazy_getattr(__name__, _LAZY)
