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
from collections.abc import MutableMapping
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


def discover_package(package: str) -> list:
    """Import every module of ``package`` (a package of the toolkit): where a method family
    keeps one module per method, each registering itself."""
    pkg = importlib.import_module(package)
    names = []
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
        if not info.name.startswith("_"):
            names.append(f"{package}.{info.name}")
            importlib.import_module(names[-1])
    return names


class Registry(MutableMapping):
    """Key -> object, filled by ``@registry.register(key)`` where each object is defined, and
    completed on the first miss by importing where such objects live: every
    ``compressor.<package>.<module>`` (``module=``, see :func:`discover`) or every module of one
    package (``package=``). Stages, folder loaders, pruning and quantisation methods, losses
    and folder runtimes are registries of this one type. ``registry[key]`` raises KeyError;
    :meth:`lookup` says in one line what is known instead."""

    def __init__(self, what: str, module: Optional[str] = None, package: Optional[str] = None):
        self.what, self.module, self.package = what, module, package
        self._items: Dict[object, object] = {}
        self._discovered = module is None and package is None

    def register(self, key):
        def wrap(obj):
            self._items[key] = obj
            return obj
        return wrap

    def _complete(self) -> None:
        if not self._discovered:
            self._discovered = True
            if self.module:
                discover(self.module)
            if self.package:
                discover_package(self.package)

    def __getitem__(self, key):
        if key not in self._items:
            self._complete()
        return self._items[key]

    def __setitem__(self, key, value) -> None:
        self._items[key] = value

    def __delitem__(self, key) -> None:
        del self._items[key]

    def __contains__(self, key) -> bool:
        if key not in self._items:
            self._complete()
        return key in self._items

    def __iter__(self):
        self._complete()
        return iter(list(self._items))

    def __len__(self) -> int:
        self._complete()
        return len(self._items)

    def lookup(self, key, hint: str = ""):
        """``self[key]``, or one line naming what is known."""
        if key in self:
            return self._items[key]
        known = ", ".join(sorted(k if isinstance(k, str) else getattr(k, "__name__", str(k)) for k in self))
        raise CompressorError(f"unknown {self.what} {key!r}{hint}; known {self.what}s: {known or '(none)'}")

    def names(self) -> list:
        return sorted(self)


STAGES = Registry("stage", module="stage")


def register_stage(name: str, config_cls: type, accepts=(TRAINABLE,), produces=TRAINABLE):
    """Decorator: make ``fn(ctx, config)`` available to recipes as stage ``name``."""
    def wrap(fn):
        STAGES[name] = StageType(name, config_cls, fn, tuple(accepts), produces,
                                 (fn.__doc__ or "").strip().splitlines()[0] if fn.__doc__ else "")
        return fn
    return wrap


def get_stage(name: str) -> StageType:
    return STAGES.lookup(name)


def all_stages() -> Dict[str, StageType]:
    return {name: STAGES[name] for name in STAGES.names()}


# -- configs from recipe mappings: built by compressor.core.settings.config_from_dict --

def config_to_dict(config) -> dict:
    return dataclasses.asdict(config)
