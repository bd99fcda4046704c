"""Settings whose legal values are known, declared once on the config dataclass field.

A field made with :func:`setting` carries its ``choices`` (a tuple, or a function
returning one for lists kept elsewhere, such as the hardware presets) and/or a
``check(value, name, config)`` that returns what is wrong (or raises
``CompressorError``). The recipe checker reads these declarations and reports
every bad setting of a stage with its line; the command line and the Python API
get the same messages through :func:`check_fields`. Nothing here imports the
rest of the toolkit, so any config module can use it.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Callable, List, Optional, Tuple

from .errors import CompressorError


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


def value_problem(f: dataclasses.Field, value, config=None) -> Optional[str]:
    """What is wrong with ``value`` for field ``f`` (None: nothing)."""
    allowed = choices_of(f)
    if allowed is not None and value is not None:
        for item in (value if isinstance(value, (list, tuple)) else (value,)):
            if item not in allowed:
                what = f.metadata.get("what", f.name)
                return f"unknown {what} {item!r}; use {', '.join(map(str, allowed))}"
    check = f.metadata.get("check")
    if check is not None:
        try:
            return check(value, f.name, config) or None
        except CompressorError as exc:
            return str(exc)
    return None


def field_problems(config, names=None) -> List[Tuple[str, str]]:
    """``(field, message)`` for every field of ``config`` (or of ``names``) whose value is not legal."""
    out = []
    for f in dataclasses.fields(config):
        if names is not None and f.name not in names:
            continue
        message = value_problem(f, getattr(config, f.name), config)
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
