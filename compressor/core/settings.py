"""Typed configs: dataclasses whose fields declare their legal values, built from mappings.

A field made with :func:`setting` carries its ``choices`` (a tuple, or a function
returning one for lists kept elsewhere, such as the hardware presets) and/or a
``check(value, name, config)`` that returns what is wrong (or raises
``CompressorError``). :func:`config_from_dict` builds a config from a recipe
mapping (or ``KEY=VALUE`` options) and reports every bad setting at once, each
with the path of keys where it is, which the recipe checker turns into a line:

- a field typed as another config dataclass is a nested section, built the same way;
- a base config decorated with :func:`picks_type_by` is one of several types, the
  one its tag fields name (``kind: layers``; ``backend`` + ``method``); each type
  declares its tags with :func:`tag` and registers with :func:`variant`, and holds
  only its own settings, so a setting of another type is reported as such;
- a class with a ``from_settings`` classmethod builds itself (the losses section).

The command line and the Python API get the same messages through
:func:`check_fields` and :func:`from_values`. Nothing here imports the rest of the
toolkit, so any config module can use it.
"""
from __future__ import annotations

import dataclasses
import re
import typing
from typing import Callable, List, Optional, Tuple

from compressor.core.errors import CompressorError


def setting(default=dataclasses.MISSING, *, default_factory=dataclasses.MISSING, choices=None,
            check: Optional[Callable] = None, what: Optional[str] = None):
    """A dataclass field with its legal values: ``choices`` and/or ``check``.

    For a list field, every item must be one of ``choices``. ``what`` names one
    value in messages (``unknown peer 'x'``); the field name by default.
    """
    metadata = {}
    if choices is not None:
        metadata["choices"] = choices
    if check is not None:
        metadata["check"] = check
    if what:
        metadata["what"] = what
    return dataclasses.field(default=default, default_factory=default_factory, metadata=metadata)


def choices_of(f: dataclasses.Field) -> Optional[tuple]:
    allowed = f.metadata.get("choices")
    if allowed is None:
        return None
    return tuple(allowed() if callable(allowed) else allowed)


def value_problem(f: dataclasses.Field, value, config=None, name: Optional[str] = None) -> Optional[str]:
    """What is wrong with ``value`` for field ``f`` (None: nothing); ``name`` is how messages call it."""
    allowed = choices_of(f)
    if allowed is not None and value is not None:
        for item in (value if isinstance(value, (list, tuple)) else (value,)):
            if item not in allowed:
                what = f.metadata.get("what", f.name)
                return f"unknown {what} {item!r}; use {', '.join(map(str, allowed))}"
    check = f.metadata.get("check")
    if check is not None:
        try:
            return check(value, name or f.name, config) or None
        except CompressorError as exc:
            return str(exc)
    return None


def field_problems(config, names=None, prefix: str = "") -> List[Tuple[str, str]]:
    """``(field, message)`` for every field of ``config`` (or of ``names``) whose value is not legal."""
    out = []
    for f in dataclasses.fields(config):
        if names is not None and f.name not in names:
            continue
        message = value_problem(f, getattr(config, f.name), config, prefix + f.name)
        if message:
            out.append((f.name, message))
    return out


def check_fields(config) -> None:
    """Raise one ``CompressorError`` listing every illegal setting of ``config``."""
    problems = field_problems(config)
    if problems:
        raise CompressorError("; ".join(message for _, message in problems))


# -- checks many configs share -------------------------------------------------

def positive(value, name, config=None) -> Optional[str]:
    if value is not None and not value > 0:
        return f"{name} must be positive, got {value}"
    return None


def at_least_one(value, name, config=None) -> Optional[str]:
    """Each item of a list (or the value) must be at least 1."""
    for item in (value if isinstance(value, (list, tuple)) else (value,)):
        if item is not None and item < 1:
            return f"{name} must be at least 1, got {item}"
    return None


def not_negative(value, name, config=None) -> Optional[str]:
    if value is not None and value < 0:
        return f"{name} must not be negative, got {value}"
    return None


def share(value, name, config=None) -> Optional[str]:
    """A share of something, in [0, 1)."""
    if value is not None and not 0 <= value < 1:
        return f"{name} must be in [0, 1), got {value}"
    return None


DEVICE_NAMES = "auto, cpu or cuda[:N]"


def device_problem(name) -> Optional[str]:
    """Whether ``name`` is a device this toolkit can be asked for (not whether this machine has it)."""
    if not isinstance(name, str) or not re.fullmatch(r"auto|cpu|cuda(:\d+)?", name.lower()):
        return f"unknown device {name!r}; use {DEVICE_NAMES}"
    return None


def device(value, name, config=None) -> Optional[str]:
    return device_problem(value)


# -- building configs from mappings -------------------------------------------

Problem = Tuple[tuple, str]   # (the keys that lead to the bad setting, what is wrong)


class SettingsError(CompressorError):
    """Every bad setting of one config: unknown keys, wrong types, values it does not take."""

    def __init__(self, problems: List[Problem]):
        self.problems = list(problems)
        super().__init__("; ".join(message for _, message in self.problems))


def tag(value):
    """A field that says which type a config is (``kind``, ``method``): fixed for the type."""
    return dataclasses.field(default=value, init=False, metadata={"tag": True})


def picks_type_by(*tags: str):
    """Class decorator for a base config: a mapping for it is the :func:`variant` its ``tags`` name.

    Tags a mapping leaves out take the base's defaults (its own :func:`tag` fields).
    """
    def wrap(cls):
        cls.TAGS = tags
        cls._variants = {}
        return cls
    return wrap


def variant(cls):
    """Class decorator: register ``cls`` with every base above it that picks its type by tags."""
    for base in cls.__mro__[1:]:
        if "_variants" in base.__dict__:
            base._variants[tuple(getattr(cls, t) for t in base.TAGS)] = cls
    return cls


def variants(base) -> dict:
    """``{tag values: type}`` of a base made with :func:`picks_type_by` (empty for any other class)."""
    return dict(base.__dict__.get("_variants", {}))


def tag_names(cls) -> Tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls) if f.metadata.get("tag"))


def setting_names(cls) -> List[str]:
    """The keys a mapping for ``cls`` may have: its tags, then its settings."""
    return list(tag_names(cls)) + [f.name for f in dataclasses.fields(cls) if f.init]


def config_from_dict(cls, values: dict, defaults: Optional[dict] = None, what: Optional[str] = None):
    """Build ``cls`` from a mapping, or raise :class:`SettingsError` naming every bad setting.

    Each value must have its field's type and be one of the field's legal values;
    nested sections are built the same way, each problem keeping its path of keys.
    ``defaults`` (recipe-wide settings such as device and seed) apply only to
    fields the class has and the mapping does not set. ``what`` starts each
    message (``stage 'bench'``); the class name by default.
    """
    config, problems = build(cls, values, (), what or cls.__name__, "", defaults)
    if problems:
        raise SettingsError(problems)
    return config


def from_values(cls, values, what: str):
    """``values`` as a ``cls`` (a mapping is built, a ``cls`` kept), every problem in one error.

    ``what`` names the section (``student``) in messages, as a recipe's nested section is named.
    """
    if hasattr(cls, "from_settings"):
        config, problems = cls.from_settings(values, (), what, what + ".")
    elif isinstance(values, cls):
        return values
    else:
        config, problems = build(cls, values, (), what, what + ".")
    if problems:
        raise SettingsError(problems)
    return config


def build(cls, values, path: tuple, what: str, prefix: str, defaults: Optional[dict] = None):
    """``(config or None, problems)``: ``cls`` from ``values`` found at ``path``.

    ``prefix`` is the dotted name of the section (``losses.kd.``; empty at the top);
    messages name settings with it and start with ``what``.
    """
    name = prefix[:-1] or what

    def say(message: str) -> str:
        return message if message.startswith(what) else f"{what}: {message}"

    if not isinstance(values, dict):
        return None, [(path, say(f"{name} must be a mapping, got {values!r}"))]
    base = cls if variants(cls) else None
    if base is not None:
        cls, problem = _pick(base, values, name)
        if cls is None:
            return None, [((*path, problem[0]) if problem[0] in values else path, say(problem[1]))
                          ] + _loose_problems(base, values, path, prefix, name, what, say)
    hints = typing.get_type_hints(cls)
    tags = tag_names(cls)
    settable = [f.name for f in dataclasses.fields(cls) if f.init]
    problems: List[Problem] = []
    kwargs = {k: v for k, v in (defaults or {}).items() if k in settable}
    for key, value in values.items():
        if key in tags:
            continue   # the pick checked it
        if key not in settable:
            problems.append(((*path, key), say(_unknown_key(base, cls, name, key))))
            continue
        try:
            kwargs[key] = coerce(value, hints[key], prefix + key, (*path, key), what)
        except SettingsError as exc:
            problems += exc.problems
            kwargs.pop(key, None)
        except ValueError as exc:
            problems.append(((*path, key), say(str(exc))))
            kwargs.pop(key, None)
    try:
        config = cls(**kwargs)
    except CompressorError as exc:
        return None, problems + [(path, say(str(exc)))]
    bad = {p[len(path)] for p, _ in problems if len(p) > len(path)}
    problems += [((*path, key), say(message)) for key, message in field_problems(config, prefix=prefix)
                 if key not in bad]
    if not problems and hasattr(config, "check"):
        try:
            config.check()
        except CompressorError as exc:
            key = next((k for k in values if str(exc).startswith(f"{prefix}{k}")), None)
            problems.append(((*path, key) if key is not None else path, say(str(exc))))
    return config, problems


def _pick(base, values: dict, name: str):
    """``(type, None)`` the tags of ``values`` name, or ``(None, (tag, message))``."""
    chosen: List = []
    for i, key in enumerate(base.TAGS):
        value = values.get(key, getattr(base, key))
        offered = list(dict.fromkeys(k[i] for k in base._variants if list(k[:i]) == chosen))
        if value not in offered:
            hint = getattr(base, "tag_hint", None)
            message = hint(key, value) if hint else None
            if message is None and len(base.TAGS) == 1:
                message = f"{name} {key} '{value}' is unknown; use {', '.join(map(str, offered))}"
            elif message is None and i == 0:
                message = f"unknown {key} {value!r}; use {', '.join(map(str, offered))}"
            elif message is None:
                message = (f"{key} '{value}' is not available with {base.TAGS[i - 1]} {chosen[-1]}; "
                           f"it offers {', '.join(map(str, offered))}")
            return None, (key, message)
        chosen.append(value)
    return base._variants[tuple(chosen)], None


def _describe(base, cls) -> str:
    """``kind layers``; ``method dynamic of backend onnxruntime``."""
    parts = [f"{t} {getattr(cls, t)}" for t in reversed(base.TAGS)]
    return " of ".join(parts)


def _unknown_key(base, cls, name: str, key: str) -> str:
    if base is None:
        return f"{name} has no setting '{key}'; it takes {', '.join(setting_names(cls))}"
    groups: dict = {}
    for tags, other in base._variants.items():
        if key in [f.name for f in dataclasses.fields(other) if f.init]:
            groups.setdefault(" ".join(map(str, tags[:-1])), []).append(str(tags[-1]))
    taking = "; ".join(f"{lead} {', '.join(lasts)}".strip() for lead, lasts in groups.items())
    elsewhere = f" ({base.TAGS[-1]}s taking it: {taking})" if groups else ""
    return (f"{name} has no setting '{key}'{elsewhere}; {_describe(base, cls)} takes "
            f"{', '.join(setting_names(cls))}")


def _loose_problems(base, values: dict, path: tuple, prefix: str, name: str, what: str, say) -> List[Problem]:
    """With no type picked, check each other setting as the first type that has it would."""
    problems = []
    for key, value in values.items():
        if key in base.TAGS:
            continue
        owner = next((v for v in base._variants.values()
                      if key in [f.name for f in dataclasses.fields(v) if f.init]), None)
        if owner is None:
            problems.append(((*path, key), say(f"{name} has no setting '{key}'")))
            continue
        f = next(f for f in dataclasses.fields(owner) if f.name == key)
        try:
            value = coerce(value, typing.get_type_hints(owner)[key], prefix + key, (*path, key), what)
        except SettingsError as exc:
            problems += exc.problems
            continue
        except ValueError as exc:
            problems.append(((*path, key), say(str(exc))))
            continue
        message = value_problem(f, value, None, prefix + key)
        if message:
            problems.append(((*path, key), say(message)))
    return problems


def coerce(value, hint, key: str, path: tuple = (), what: str = ""):
    """Check one value against a type hint (YAML reads ``5e-5`` as a string: accept it as a float).

    A config type is built as a nested section (raising :class:`SettingsError`).
    """
    if isinstance(hint, type) and (dataclasses.is_dataclass(hint) or hasattr(hint, "from_settings")):
        if hasattr(hint, "from_settings"):
            config, problems = hint.from_settings(value, path, what, key + ".")
        elif isinstance(value, hint):
            return value
        else:
            config, problems = build(hint, value, path, what, key + ".")
        if problems:
            raise SettingsError(problems)
        return config
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
                return coerce(value, arg, key, path, what)
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
        items = [coerce(v, inner, key, path, what) for v in value]
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


def describe(cls, prefix: str = "") -> List[str]:
    """Lines listing the settings a mapping for ``cls`` takes, one per type, nested sections after."""
    if hasattr(cls, "describe"):
        return cls.describe(prefix)
    if variants(cls):
        lines = []
        for other in variants(cls).values():
            lines += [f"{prefix}{_describe(cls, other)}: {line}" for line in describe(other)]
        return lines
    hints = typing.get_type_hints(cls)
    fields = [f for f in dataclasses.fields(cls) if f.init]
    lines = [", ".join(f.name for f in fields) or "(no settings)"]
    for f in fields:
        hint = hints[f.name]
        if isinstance(hint, type) and (dataclasses.is_dataclass(hint) or hasattr(hint, "describe")):
            lines += [f"{f.name}: {line}" for line in describe(hint)]
    return [prefix + line for line in lines]
