"""Registries, and how the toolkit finds what registers in them.

A stage is a config dataclass plus a function ``run(ctx, config) -> dict``.
The recipe runner only looks stages up here; a method adds itself with
``@register_stage`` in its own package's ``stage`` module. Nothing lists those
modules by hand: :func:`discover` imports ``compressor.<package>.<name>`` for every
package of the toolkit that has such a module (``stage`` for recipe stages,
``runtime`` for the ONNX folder runtimes).
"""
from __future__ import annotations

import dataclasses
import importlib
import os
import pkgutil
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple

from compressor.core.errors import CompressorError

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

_loaded = False


def discover(module: str) -> list:
    """Import ``compressor.<package>.<module>`` for every package of the toolkit that has a
    ``<module>.py``; returns the names imported. Only those modules (and their packages'
    light ``__init__``) are imported: a package without one is not touched."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # the compressor package
    found = []
    for info in sorted(pkgutil.iter_modules([root]), key=lambda i: i.name):
        if info.ispkg and os.path.isfile(os.path.join(root, info.name, f"{module}.py")):
            name = f"compressor.{info.name}.{module}"
            importlib.import_module(name)
            found.append(name)
    return found


class Registry:
    """Name -> object, filled by ``@registry.register(name)`` where each object is defined,
    and completed on the first miss by :func:`discover` of the registry's ``module``."""

    def __init__(self, what: str, module: Optional[str] = None):
        self.what, self.module = what, module
        self._items: Dict[str, object] = {}
        self._discovered = module is None

    def register(self, name: str):
        def wrap(obj):
            self._items[name] = obj
            return obj
        return wrap

    def _complete(self) -> None:
        if not self._discovered:
            self._discovered = True
            discover(self.module)

    def get(self, name: str, default=None):
        if name not in self._items:
            self._complete()
        return self._items.get(name, default)

    def __getitem__(self, name: str):
        item = self.get(name)
        if item is None:
            raise CompressorError(f"unknown {self.what} {name!r}; known: {', '.join(self.names()) or '(none)'}")
        return item

    def __contains__(self, name: str) -> bool:
        return self.get(name) is not None

    def names(self) -> list:
        self._complete()
        return sorted(self._items)


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
        discover("stage")
        _loaded = True


# -- configs from recipe mappings: built by compressor.core.settings.config_from_dict --

def config_to_dict(config) -> dict:
    return dataclasses.asdict(config)
