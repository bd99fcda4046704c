"""Lazy package attributes: a package names where each public name lives and imports that
module on first use, so ``import compressor`` and ``compressor --help`` stay free of torch."""
import importlib


def lazy_getattr(package: str, table: dict):
    """A module ``__getattr__`` that imports ``package.<table[name]>`` on first use of ``name``."""

    def __getattr__(name):
        if name in table:
            where = table[name]
            module = where if "." in where else f"{package}.{where}"
            return getattr(importlib.import_module(module), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
