"""The one registry of recipe stages.

A stage is a config dataclass plus a function ``run(ctx, config) -> dict``.
The recipe runner only looks stages up here; a method adds itself with
``@register_stage`` in its own package and is listed in ``_STAGE_MODULES``.
"""
from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple

from ..errors import CompressorError

# A model "kind" says what later stages can do with it: "hf" is a trainable
# transformers checkpoint; methods that make models which cannot be trained
# further (quantised, ONNX) declare their own kinds.
TRAINABLE = "hf"


@dataclass(frozen=True)
class StageType:
    name: str
    config_cls: type
    run: Callable
    accepts: Tuple[str, ...] = (TRAINABLE,)
    produces: Optional[str] = TRAINABLE      # None: the stage passes its input model on unchanged
    summary: str = ""


STAGES: Dict[str, StageType] = {}

# Each method's package registers its stages in its own module, listed here.
_STAGE_MODULES = ("compressor.recipe.builtin", "compressor.distill.stage", "compressor.prune.stage",
                  "compressor.quantize.stage", "compressor.export.stage", "compressor.bench.stage",
                  "compressor.theseus.stage",
                  "compressor.share.stage", "compressor.exit.stage")
_loaded = False


def register_stage(name: str, config_cls: type, accepts=(TRAINABLE,), produces=TRAINABLE):
    """Decorator: make ``fn(ctx, config)`` available to recipes as stage ``name``."""
    def wrap(fn):
        STAGES[name] = StageType(name, config_cls, fn, tuple(accepts), produces,
                                 (fn.__doc__ or "").strip().splitlines()[0] if fn.__doc__ else "")
        return fn
    return wrap


def get_stage(name: str) -> StageType:
    _load()
    try:
        return STAGES[name]
    except KeyError:
        raise CompressorError(f"unknown stage '{name}'; known stages: {', '.join(sorted(STAGES))}") from None


def all_stages() -> Dict[str, StageType]:
    _load()
    return dict(STAGES)


def _load() -> None:
    global _loaded
    if not _loaded:
        for module in _STAGE_MODULES:
            importlib.import_module(module)
        _loaded = True


# -- configs from recipe mappings: built by compressor.settings.config_from_dict --

def config_to_dict(config) -> dict:
    return dataclasses.asdict(config)
