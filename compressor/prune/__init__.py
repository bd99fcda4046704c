"""Pruning: attention heads, FFN neurons, whole layers, word pieces, unstructured weights (mask, then materialise).

``prune(model, out, config)`` prunes a task checkpoint folder (and recovers it);
``prune_loaded(model_dir, task, train_set, dev_set, config, out_dir, meta)`` does the same on
data already loaded (what the recipe stage and ``compressor auto`` call). The config's type is
the method (``configs.py``: structured, layers, vocab, magnitude); the stage is ``prune``.
"""
# imported on first use, so ``compressor --help`` does not load torch
_LAZY = {"prune": "api", "prune_loaded": "api", "PruneConfig": "configs", "StructuredPruneConfig": "configs",
         "LayersPruneConfig": "configs", "VocabPruneConfig": "configs", "MagnitudePruneConfig": "configs",
         "RecoverSettings": "configs"}
__all__ = sorted(_LAZY)


from compressor.core.lazy import lazy_getattr  # noqa: E402

__getattr__ = lazy_getattr(__name__, _LAZY)
