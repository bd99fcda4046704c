"""compressor: make pre-trained transformer encoders small and fast, and prove it.

The Python API is the product; the ``compressor`` command is a thin layer on it.
"""
import logging as _logging

from compressor.core.version import __version__  # noqa: E402,F401

# torchao (pulled in by transformers when installed) logs a warning for every
# GPU-only kernel it cannot load on a CPU machine; those are not the user's concern.
for _name in ("torchao", "torch.utils._pytree"):
    _logging.getLogger(_name).setLevel(_logging.ERROR)

from compressor.core.errors import CompressorError  # noqa: E402


def __getattr__(name):
    # The public API, imported on first use so that `import compressor` stays cheap.
    if name in ("finetune", "TrainConfig", "fit"):
        from compressor.engine import train
        return getattr(train, name)
    if name in ("evaluate", "predict"):
        from compressor.engine import scoring
        return getattr(scoring, name)
    if name in ("run_recipe", "load_recipe", "validate_recipe"):
        from compressor import recipe
        return getattr(recipe, name)
    if name in ("load_for_task", "count_parameters"):
        from compressor.core import models
        return getattr(models, name)
    raise AttributeError(name)


__all__ = ["CompressorError", "finetune", "TrainConfig", "fit", "evaluate", "predict",
           "run_recipe", "load_recipe", "validate_recipe", "load_for_task", "count_parameters"]
