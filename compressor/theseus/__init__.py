"""BERT-of-Theseus progressive module replacing (Xu et al. 2020).

``theseus(model, out, config)`` compresses a task checkpoint; ``replace`` holds the group
wrapper and the replacing callback, ``config`` the settings; the recipe stage is ``theseus``.
"""
# imported on first use, so ``compressor --help`` does not load torch
_LAZY = {"TheseusConfig": "config", "theseus": "stage", "run_theseus": "stage",
         "theseus_model": "replace", "successor_model": "replace", "Replacing": "replace",
         "replacement_rate": "replace"}
__all__ = sorted(_LAZY)


from compressor.core.lazy import lazy_getattr  # noqa: E402

__getattr__ = lazy_getattr(__name__, _LAZY)
