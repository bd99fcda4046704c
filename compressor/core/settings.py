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
- a class with a ``from_settings`` classmethod builds itself (the losses section);
- a nested section given as a mapping starts from the field's default (a method's own
  training defaults), the mapping's keys over it;
- a section type that sets ``FLAT_KEYS`` (the ``train`` section) also takes its keys written
  flat beside it, the older form: they are moved into it and each move is noted
  (:func:`config_from_dict`'s ``moved``), and recipe-wide ``defaults`` reach it.

The command line and the Python API get the same messages through
:func:`check_fields` and :func:`from_values`. Nothing here imports the rest of the
toolkit, so any config module can use it.
"""
from __future__ import annotations

import contextvars
import dataclasses
import re
import typing
import warnings
from typing import Callable, List, Optional, Tuple

from compressor.core.errors import CompressorError


def setting(default=dataclasses.MISSING, *, default_factory=dataclasses.MISSING, choices=None,
            check: Optional[Callable] = None, what: Optional[str] = None,
            refuse: Optional[dict] = None):
    """A dataclass field with its legal values: ``choices`` and/or ``check``.

    For a list field, every item must be one of ``choices``. ``what`` names one
    value in messages (``unknown peer 'x'``); the field name by default. ``refuse``
    (a nested section only): ``{key: why}``, keys of the section this config does not
    let a user set (Theseus's ``train.epochs``), each refused with its line.
    """
    metadata = {}
    if refuse:
        metadata["refuse"] = dict(refuse)
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


def config_from_dict(cls, values: dict, defaults: Optional[dict] = None, what: Optional[str] = None,
                     moved: Optional[list] = None):
    """Build ``cls`` from a mapping, or raise :class:`SettingsError` naming every bad setting.

    Each value must have its field's type and be one of the field's legal values;
    nested sections are built the same way, each problem keeping its path of keys.
    ``defaults`` (recipe-wide settings such as device and seed) apply only to
    fields the class has (or its ``train``-like section has) and the mapping does not
    set. ``what`` starts each message (``stage 'bench'``); the class name by default.
    Keys written flat beside the section that takes them are moved into it: each move,
    ``(section, keys, what they are)``, is added to ``moved``, or said as a
    ``FutureWarning`` when no list is given (:func:`moved_message`).
    """
    notes: list = []
    token = _MOVED.set(notes)
    try:
        config, problems = build(cls, values, (), what or cls.__name__, "", defaults)
    finally:
        _MOVED.reset(token)
    if moved is not None:
        moved.extend(notes)
    elif notes:
        warnings.warn(moved_message(what or cls.__name__, notes), FutureWarning, stacklevel=2)
    if problems:
        raise SettingsError(problems)
    return config


def stage_folder(stage: str, default: str = ""):
    """A setting naming a folder, where the value ``recipe`` means the folder of the recipe's last
    ``stage`` stage before this one (``augment: recipe``); :func:`resolve_stage_folders` puts it in."""
    return dataclasses.field(default=default, metadata={"stage_folder": stage})


def resolve_stage_folders(config, folder_of: Callable[[str], str]):
    """``config`` with every :func:`stage_folder` setting whose value is ``recipe`` replaced by
    ``folder_of(stage)``, nested sections too; ``config`` itself is left as it is."""
    import copy

    if not dataclasses.is_dataclass(config) or isinstance(config, type):
        return config
    changes = {}
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        stage = f.metadata.get("stage_folder")
        if stage and value == "recipe":
            changes[f.name] = folder_of(stage)
        else:
            inner = resolve_stage_folders(value, folder_of)
            if inner is not value:
                changes[f.name] = inner
    if not changes:
        return config
    resolved = copy.copy(config)   # no __init__ again: its checks ran when the recipe was read
    for name, value in changes.items():
        setattr(resolved, name, value)
    return resolved


def from_values(cls, values, what: str):
    """``values`` as a ``cls`` (a mapping is built, a ``cls`` kept), every problem in one error.

    ``what`` names the section (``student``) in messages, as a recipe's nested section is named.
    """
    if hasattr(cls, "from_settings"):
        config, problems = cls.from_settings(values, (), what, what + ".")
    elif isinstance(values, cls):
        return values
    else:
        notes: list = []
        token = _MOVED.set(notes)
        try:
            config, problems = build(cls, values, (), what, what + ".")
        finally:
            _MOVED.reset(token)
        if notes:
            warnings.warn(moved_message(what, notes), FutureWarning, stacklevel=2)
    if problems:
        raise SettingsError(problems)
    return config


def section_of(config, name: str, what: Optional[str] = None):
    """``config.<name>`` as its section type, for a config's ``__post_init__``: a section kept, a
    mapping (a Python caller's) built on the field's default (``TrainConfig(epochs=1)`` for a
    method whose training takes one epoch), the keys the field refuses refused; ``what`` names
    the section in messages (``name`` by default)."""
    what = what or name
    f = next(f for f in dataclasses.fields(config) if f.name == name)
    hint = typing.get_type_hints(type(config))[name]
    value = getattr(config, name)
    if isinstance(value, hint) or not isinstance(value, dict):
        return from_values(hint, value, what)
    value, problems = _refused(f, value, (name,), what, lambda message: message)
    if problems:
        raise SettingsError(problems)
    return from_values(hint, _on_default(f, hint, value), what)


# -- sections that take their keys flat (the older form) ---------------------------

# the moves of keys written flat, noted while config_from_dict / from_values build
_MOVED: contextvars.ContextVar = contextvars.ContextVar("compressor_moved_keys", default=None)


def flat_sections(cls) -> List[str]:
    """The fields of ``cls`` whose section type sets ``FLAT_KEYS``: sections (``train``) whose
    keys may also be written flat beside them, the form older recipes use."""
    hints = typing.get_type_hints(cls)
    return [f.name for f in dataclasses.fields(cls)
            if f.init and isinstance(hints[f.name], type) and getattr(hints[f.name], "FLAT_KEYS", None)]


def lift_flat_keys(cls, values: dict, prefix: str = "", path: tuple = ()):
    """``(values, moves, problems)``: ``values`` with the keys of a flat-taking section of ``cls``
    written beside it moved into it. ``moves`` are ``(section, keys, what they are)``; a key
    given both ways is a problem. ``cls`` must be the type itself (not a base picking one)."""
    sections = flat_sections(cls) if isinstance(values, dict) else []
    if not sections:
        return values, [], []
    hints = typing.get_type_hints(cls)
    own = set(setting_names(cls))
    out, moves, problems = dict(values), [], []
    for name in sections:
        takes = set(setting_names(hints[name]))
        keys = [k for k in values if k not in own and k in takes]
        inner = values.get(name)
        if not keys or not isinstance(inner, (dict, type(None))):
            continue   # nothing to move, or a section that is no mapping (its own error follows)
        inner = dict(inner or {})
        for key in keys:
            value = out.pop(key)
            if key in inner:
                problems.append(((*path, key), f"{prefix}{key} is set twice, flat and under "
                                                f"{prefix}{name}: keep {prefix}{name}.{key} only"))
            else:
                inner[key] = value
        out[name] = inner
        refused = next(f for f in dataclasses.fields(cls) if f.name == name).metadata.get("refuse") or {}
        moves.append((prefix + name, [k for k in keys if k not in (values.get(name) or {}) and k not in refused],
                      hints[name].FLAT_KEYS))   # a refused key gets its own line, not a note
    return out, [m for m in moves if m[1]], problems


def moved_message(where: str, moves) -> str:
    """One line for the keys moved into their sections: ``WHERE: put epochs, lr under train: —
    flat training keys are deprecated``."""
    parts = [f"{', '.join(keys)} under {section}:" for section, keys, _ in moves]
    kinds = " and ".join(dict.fromkeys(kind for _, _, kind in moves))
    return f"{where}: put {' and '.join(parts)} — flat {kinds} keys are deprecated"


def _refused(f: dataclasses.Field, values: dict, path: tuple, name: str, say):
    """``(values, problems)``: the section ``values`` without the keys field ``f`` refuses."""
    refuse = f.metadata.get("refuse") or {}
    problems = [((*path, key), say(f"{name}.{key}: {why}")) for key, why in refuse.items() if key in values]
    return {k: v for k, v in values.items() if k not in refuse}, problems


def _on_default(f: dataclasses.Field, hint, values: dict, defaults: Optional[dict] = None) -> dict:
    """A plain section's mapping over the field's default: the settings where the default differs
    from the section type's own (a method's training defaults), then ``defaults``, then ``values``."""
    if (not isinstance(hint, type) or not dataclasses.is_dataclass(hint) or variants(hint)
            or hasattr(hint, "from_settings") or f.default_factory is dataclasses.MISSING):
        return values
    default = f.default_factory()
    if not isinstance(default, hint):
        return values
    plain = {g.name: g for g in dataclasses.fields(hint) if g.init}
    base = {}
    for name, g in plain.items():
        value = getattr(default, name)
        own = (g.default if g.default is not dataclasses.MISSING else
               g.default_factory() if g.default_factory is not dataclasses.MISSING else dataclasses.MISSING)
        if own is dataclasses.MISSING or own != value:
            base[name] = value
    return {**base, **(defaults or {}), **values}


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
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    settable = list(fields)
    values, moves, problems = lift_flat_keys(cls, values, prefix, path)
    problems = [(keys, say(message)) for keys, message in problems]
    if moves and _MOVED.get() is not None:
        _MOVED.get().extend(moves)
    kwargs = {k: v for k, v in (defaults or {}).items() if k in settable}
    # recipe-wide defaults reach a flat-taking section (train) for the keys its config lacks
    flat = {s: {k: v for k, v in (defaults or {}).items()
                if k not in settable and k in setting_names(hints[s])} for s in flat_sections(cls)}
    values = {**{s: {} for s, d in flat.items() if d and s not in values}, **values}
    for key, value in values.items():
        if key in tags:
            continue   # the pick checked it
        if key not in settable:
            problems.append(((*path, key), say(_unknown_key(base, cls, name, key))))
            continue
        if isinstance(value, dict):
            value, refused = _refused(fields[key], value, (*path, key), prefix + key, say)
            problems += refused
            value = _on_default(fields[key], hints[key], value, flat.get(key))
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
    _note_given(config, kwargs)
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


_GIVEN = "_settings_given"   # the attribute that keeps the keys a config was built from


def _note_given(config, keys) -> None:
    try:
        object.__setattr__(config, _GIVEN, frozenset(keys))
    except (AttributeError, TypeError):   # a config with __slots__: only its values tell
        pass


def given(config) -> frozenset:
    """The settings of ``config`` set on purpose: the keys of the mapping it was built from
    (a recipe's, ``KEY=VALUE`` options', a Python caller's; recipe-wide defaults that reached it
    included), and every setting whose value differs from its field's default (a config made
    in Python, or copied with ``dataclasses.replace``). A setting left out keeps its default, which
    a caller may fill from elsewhere (recovery training takes the stage's device)."""
    keys = set(getattr(config, _GIVEN, ()))
    for f in dataclasses.fields(config):
        if not f.init or f.name in keys:
            continue
        default = (f.default if f.default is not dataclasses.MISSING else
                   f.default_factory() if f.default_factory is not dataclasses.MISSING else dataclasses.MISSING)
        if default is dataclasses.MISSING or getattr(config, f.name) != default:
            keys.add(f.name)
    return frozenset(keys)


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
