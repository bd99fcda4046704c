"""Early exit: exit heads after chosen layers, trained (DeeBERT's two stages, FastBERT's
self-distillation, joint), a rule (entropy, patience, maximum probability) calibrated on held-out
training rows, and ONNX segments chained by a torch-free runtime where rows that exit leave the
batch.

``early_exit(model, out, config)`` adds and trains the exits of a task checkpoint;
``export_segments(model, out)`` writes the segments; ``SegmentChain(folder)`` runs them.
Stages ``early_exit`` and ``early_exit_export``.
"""
# imported on first use, so ``compressor --help`` does not load torch
_LAZY = {"EarlyExitConfig": "configs", "ExitExportConfig": "configs", "early_exit": "stage",
         "run_early_exit": "stage", "export_exits": "stage",
         "early_exit_loaded": "stage", "score_segments": "stage", "EarlyExitModel": "model",
         "segments_of": "model", "run_segments": "model", "export_segments": "segments",
         "SegmentChain": "runtime", "RuleState": "rules", "exit_points": "rules",
         "calibrate": "rules"}
__all__ = sorted(_LAZY)


from compressor.core.lazy import lazy_getattr  # noqa: E402

__getattr__ = lazy_getattr(__name__, _LAZY)
