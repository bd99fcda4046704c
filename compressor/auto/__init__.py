"""``compressor auto``: a multi-objective search across the toolkit's own methods (issue 34).

Give it a teacher fine-tuned with ``--holdout N``, a score budget (``max_drop``) and a target;
each trial builds a candidate from the teacher through the methods' public calls (keep k layers,
prune heads and FFN neurons by importance without recovery, prune the vocabulary, drop tokens by
fixed ratios, export, INT8), scores it on the held-out rows, takes its latency from a table
measured on the target (:mod:`compressor.auto.latency`) and its size from disk. Optuna runs the
search (a study in SQLite, a shared database or a journal file; several workers join one study; a
stopped search resumes). The result is the Pareto front (held-out score x latency x size) and the
fastest candidate inside the budget, verified on dev once and written as a deployable ONNX folder.

``run_auto(teacher, out, config)`` is the API, ``compressor auto`` the command and ``auto`` the
recipe stage. A search can run on one machine for another: ``measure_table(model, path, config)``
(``--measure-table``) fills the target's table there, ``target_table`` (``--target-table``) reads
it elsewhere (:mod:`compressor.auto.target`). Needs the ``auto`` extra: ``pip install 'compressor[auto]'``.
"""
# imported on first use, so ``compressor --help`` does not load torch or optuna
_LAZY = {"AutoConfig": "config", "run_auto": "study", "LatencyTable": "latency", "measure_table": "target"}
__all__ = sorted(_LAZY)


from compressor.core.lazy import lazy_getattr  # noqa: E402

__getattr__ = lazy_getattr(__name__, _LAZY)
