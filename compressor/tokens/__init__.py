"""Learned token pruning: tokens dropped between layers by the attention they receive (LTP's
learnt thresholds, or PoWER-BERT-like fixed keep ratios); [CLS], separators and both texts of a
pair always stay.

``prune_tokens(model, config, tokenizer)`` wraps a model in memory; ``learn(...)`` trains it;
``token_prune(model, out, ...)`` (the recipe stage ``token_prune``, ``compressor token-prune``)
turns a task checkpoint into a folder of kind ``token-prune``, which ``export`` writes as one ONNX
graph that drops tokens at run time.
"""
# imported on first use, so ``compressor --help`` does not load torch
_LAZY = {"TokenPruneConfig": "config", "TokenPrunedModel": "model", "prune_tokens": "api",
         "learn": "api", "kept_tokens": "api", "token_prune": "stage"}
__all__ = sorted(_LAZY)


from compressor.core.lazy import lazy_getattr  # noqa: E402

__getattr__ = lazy_getattr(__name__, _LAZY)
