"""BERT-of-Theseus progressive module replacing (Xu et al. 2020).

``theseus(model, out, config)`` compresses a task checkpoint; ``replace`` holds the group
wrapper and the replacing callback, ``config`` the settings; the recipe stage is ``theseus``.
"""
# imported on first use, so ``compressor --help`` does not load torch
_LAZY = {"TheseusConfig": "config", "theseus": "stage", "run_theseus": "stage",
         "theseus_model": "replace", "successor_model": "replace", "Replacing": "replace",
         "replacement_rate": "replace"}
__all__ = sorted(_LAZY)


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
