"""The one registry of recipe stages.

A stage is a config dataclass plus a function ``run(ctx, config) -> dict``.
The recipe runner only looks stages up here; a method adds itself with
``@register_stage`` in its own package and is listed in ``_STAGE_MODULES``.
"""
from __future__ import annotations

import dataclasses
import importlib
import typing
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

from ..errors import CompressorError
from ..settings import field_problems

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
_STAGE_MODULES = ("compressor.recipe.builtin", "compressor.distill.stage",
                  "compressor.quantize.stage", "export.stage", "bench.stage")
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


# -- configs from recipe mappings -------------------------------------------

class SettingsError(CompressorError):
    """Every bad setting of one config: unknown keys, wrong types, values it does not take."""

    def __init__(self, cls, unknown, invalid):
        self.cls, self.unknown, self.invalid = cls, list(unknown), list(invalid)
        super().__init__("; ".join(m for _, m in self.messages(cls.__name__)))

    def messages(self, what: str) -> List[Tuple[str, str]]:
        """``(key, message)`` per problem, in the order of the keys, each message naming ``what``."""
        known = ", ".join(f.name for f in dataclasses.fields(self.cls))
        return ([(key, f"{what} has no setting '{key}'; it takes {known}") for key in self.unknown]
                + [(key, message if message.startswith(f"{what} ") else f"{what}: {message}")
                   for key, message in self.invalid])


def config_from_dict(cls, values: dict, defaults: Optional[dict] = None):
    """Build ``cls`` from recipe values, or raise :class:`SettingsError` naming every bad key.

    Each value must have its field's type and be one of the field's legal values
    (``compressor.settings.setting``). ``defaults`` (recipe-wide settings such as
    device and seed) apply only to fields the class has and the stage does not set.
    """
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = [k for k in values if k not in names]
    invalid = []
    kwargs = {k: v for k, v in (defaults or {}).items() if k in names}
    for key, value in values.items():
        if key in names:
            try:
                kwargs[key] = coerce(value, hints[key], key)
            except ValueError as exc:
                kwargs.pop(key, None)
                invalid.append((key, str(exc)))
    config = cls(**kwargs)
    mistyped = {k for k, _ in invalid}
    invalid += [(k, m) for k, m in field_problems(config) if k not in mistyped]
    if unknown or invalid:
        order = {k: i for i, k in enumerate(values)}
        invalid.sort(key=lambda p: order.get(p[0], len(order)))
        raise SettingsError(cls, unknown, invalid)
    return config


def nested_config(cls, values: Optional[dict], what: str):
    """Build ``cls`` from a mapping inside a stage's settings (``losses:``, ``student:``).

    Every problem is in one CompressorError that names ``what`` and, for an unknown key,
    the keys ``cls`` takes.
    """
    if values is not None and not isinstance(values, dict):
        raise CompressorError(f"{what} must be a mapping, got {values!r}")
    try:
        return config_from_dict(cls, dict(values or {}))
    except SettingsError as exc:
        raise CompressorError("; ".join(m for _, m in exc.messages(what))) from None


def config_to_dict(config) -> dict:
    return dataclasses.asdict(config)


def coerce(value, hint, key: str):
    """Check one value against a type hint (YAML reads ``5e-5`` as a string: accept it as a float)."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Union:
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return coerce(value, arg, key)
            except ValueError as exc:
                errors.append(str(exc))
        raise ValueError(errors[0])
    if origin is typing.Literal:
        if value not in args:
            raise ValueError(f"{key} must be one of {', '.join(map(str, args))}, got {value!r}")
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"{key} must be a list, got {type(value).__name__}")
        inner = args[0] if args else typing.Any
        items = [coerce(v, inner, key) for v in value]
        return tuple(items) if origin is tuple else items
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            raise ValueError(f"{key} must be a mapping, got {type(value).__name__}")
        return dict(value)
    if hint is typing.Any:
        return value
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise ValueError(f"{key} must be true or false, got {value!r}")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ValueError(f"{key} must be an integer, got {value!r}")
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
        raise ValueError(f"{key} must be a number, got {value!r}")
    if hint is str:
        if isinstance(value, str):
            return value
        raise ValueError(f"{key} must be a string, got {value!r}")
    return value
