"""MkDocs hook: the settings reference (``reference/settings.md``), generated at build time.

Registered in ``mkdocs.yml`` under ``hooks:``. It imports the toolkit's stage registry,
walks every registered stage's config dataclass (and, where a key picks the type, every
type it can pick: pruning and quantisation methods, student kinds) and writes one table
per config: each setting's name, type, default, legal values and the help text it
carries. Nothing on that page is written by hand; change a config and the page follows.

The help text of a field is, in this order: ``metadata["help"]`` (or ``"doc"``) of the
``dataclasses.field`` / ``compressor ... settings.setting(...)`` that made it, else the
``# comment`` at the end of the line(s) where the field is declared.

It also writes ``reference/commands.md``: every command's ``--help`` from the click commands.
Both pages are added to the site in memory (``mkdocs.structure.files.File.generated``), so a
build writes nothing under ``docs/`` and ``mkdocs serve`` does not rebuild in a loop.

Run it alone to see a page: ``python docs/hooks.py settings|commands [OUT.md]`` (standard
output by default).
"""
from __future__ import annotations

import ast
import dataclasses
import enum
import functools
import importlib
import inspect
import io
import re
import sys
import textwrap
import tokenize
import typing
from typing import Dict, List, Optional, Tuple

PAGE = "reference/settings.md"

# The registry and the settings helpers have lived in more than one module; try each.
REGISTRY_MODULES = ("compressor.core.registry", "compressor.recipe.registry")
SETTINGS_MODULES = ("compressor.core.settings", "compressor.settings")


# -- finding the registry -------------------------------------------------------

def _import_first(names):
    """The first of ``names`` that is a module of the imported ``compressor`` package."""
    import os

    import compressor

    home = os.path.dirname(os.path.abspath(compressor.__file__))
    errors = []
    for name in names:
        try:
            module = importlib.import_module(name)
            if not os.path.abspath(getattr(module, "__file__", "") or "").startswith(home + os.sep):
                errors.append(f"{name}: not inside {home}")
                continue
            return module
        except ModuleNotFoundError as exc:
            # only "this module does not exist" moves on; a broken module is a real error
            if exc.name and (name == exc.name or name.startswith(exc.name + ".")):
                errors.append(f"{name}: {exc}")
                continue
            raise
    raise ImportError("none of " + ", ".join(names) + " could be imported (" + "; ".join(errors) + ")")


def registered_stages() -> Dict[str, object]:
    """``{stage name: its registry entry}``, loading every module that registers stages."""
    registry = _import_first(REGISTRY_MODULES)
    if hasattr(registry, "all_stages"):
        stages = registry.all_stages()
    else:
        stages = getattr(registry, "STAGES")
        for loader in ("load", "_load", "all"):
            if callable(getattr(stages, loader, None)):
                result = getattr(stages, loader)()
                if isinstance(result, dict):
                    stages = result
                break
    if hasattr(stages, "items"):
        stages = dict(stages.items())
    else:
        stages = {getattr(entry, "name"): entry for entry in stages}
    if not stages:
        raise RuntimeError("the stage registry is empty: no stage to document")
    return dict(sorted(stages.items()))


def _config_class(entry) -> type:
    for attribute in ("config_cls", "config_class", "config", "settings"):
        value = getattr(entry, attribute, None)
        if isinstance(value, type):
            return value
    raise RuntimeError(f"registry entry {entry!r} names no config class")


def _summary(entry) -> str:
    text = getattr(entry, "summary", "") or ""
    if not text:
        fn = getattr(entry, "run", None) or getattr(entry, "fn", None)
        doc = inspect.getdoc(fn) if fn is not None else None
        text = doc.splitlines()[0] if doc else ""
    return text.replace("``", "`")


# -- reading one config class ------------------------------------------------------

def _settings_module():
    try:
        return _import_first(SETTINGS_MODULES)
    except ImportError:
        return None


def variants_of(cls) -> Dict[tuple, type]:
    """The types a base config picks between by its tags (empty for an ordinary config)."""
    settings = _settings_module()
    if settings is not None and hasattr(settings, "variants"):
        return dict(settings.variants(cls))
    return dict(cls.__dict__.get("_variants", {}))


def tags_of(cls) -> Tuple[str, ...]:
    return tuple(getattr(cls, "TAGS", ()))


@functools.lru_cache(maxsize=None)   # read once per class, not once per field (the page: 2 s -> 0.3 s)
def _trailing_comments(cls) -> Dict[str, str]:
    """``{field: the comments at the end of its declaration's lines}`` in ``cls``'s own body."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    body = next((node for node in tree.body if isinstance(node, ast.ClassDef)), None)
    if body is None:
        return {}
    comments: Dict[int, str] = {}
    code_lines = set()
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT:
                comments[token.start[0]] = token.string.lstrip("#").strip()
            elif token.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
                                    tokenize.ENDMARKER):
                code_lines.add(token.start[0])
    except tokenize.TokenError:
        return {}
    out = {}
    for node in body.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            lines = range(node.lineno, (node.end_lineno or node.lineno) + 1)
            parts = [comments[n] for n in lines if n in comments and n in code_lines]
            if parts:
                out[node.target.id] = " ".join(parts)
    return out


def field_help(cls, f: dataclasses.Field) -> str:
    for key in ("help", "doc", "description"):
        text = f.metadata.get(key) if f.metadata else None
        if text:
            return " ".join(str(text).split())
    for owner in cls.__mro__:
        if f.name in owner.__dict__.get("__annotations__", {}):
            text = _trailing_comments(owner).get(f.name)
            if text:
                return text
            # a subclass re-declaring a field without a comment: look further up
    return ""


def _type_name(hint) -> str:
    if hint is type(None):
        return "None"
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Union:
        inner = [a for a in args if a is not type(None)]
        names = " or ".join(_type_name(a) for a in inner)
        return f"{names} or null" if len(inner) < len(args) else names
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin in (list, tuple, set, frozenset):
        if args:
            items = [a for a in args if a is not Ellipsis]
            return f"list of {' or '.join(_type_name(a) for a in items)}"
        return "list"
    if origin is dict:
        return "mapping"
    if isinstance(hint, type):
        if dataclasses.is_dataclass(hint) or hasattr(hint, "from_settings"):
            return "section"
        return {"str": "string", "int": "integer", "float": "number", "bool": "true/false",
                "dict": "mapping", "list": "list"}.get(hint.__name__, hint.__name__)
    return str(hint).replace("typing.", "")


def _value(value) -> str:
    if isinstance(value, enum.Enum):
        value = value.value
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"' if value == "" else value
    if dataclasses.is_dataclass(value):
        tags = [f for f in dataclasses.fields(value) if f.metadata.get("tag")]
        changed = [f for f in dataclasses.fields(value) if f.init and _differs(value, f)]
        parts = [f"{f.name}: {_value(getattr(value, f.name))}" for f in tags + changed]
        return "{" + ", ".join(parts) + "}" if parts else "its defaults"
    if isinstance(value, dict):
        parts = []
        for k, v in value.items():
            parts.append(f"{k}: {_value(v)}")
        return "{" + ", ".join(parts) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    return repr(value)


def _differs(instance, f: dataclasses.Field) -> bool:
    default = _default_of(f)
    return default is _NO_DEFAULT or default != getattr(instance, f.name)


_NO_DEFAULT = object()


def _default_of(f: dataclasses.Field):
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        try:
            return f.default_factory()
        except Exception:  # a factory that needs more than nothing: say there is no simple default
            return _NO_DEFAULT
    return _NO_DEFAULT


def _default_text(f: dataclasses.Field) -> str:
    default = _default_of(f)
    return "required" if default is _NO_DEFAULT else _value(default)


def _check_name(check) -> str:
    name = getattr(check, "__name__", "")
    if not name or name == "<lambda>" or name.startswith("_"):
        return "checked"
    return name.replace("_", " ")


def legal_values(f: dataclasses.Field) -> str:
    meta = f.metadata or {}
    parts = []
    choices = meta.get("choices")
    if choices is not None:
        try:
            values = tuple(choices() if callable(choices) else choices)
            parts.append(", ".join(_value(v) for v in values))
        except Exception:
            parts.append("a fixed list")
    if meta.get("check") is not None:
        parts.append(_check_name(meta["check"]))
    return "; ".join(parts)


def class_doc(cls) -> str:
    """``cls``'s own docstring as Markdown (none for the one ``dataclass`` makes up)."""
    if not cls.__dict__.get("__doc__"):
        return ""
    doc = inspect.getdoc(cls) or ""
    if doc.startswith(cls.__name__ + "("):
        return ""
    doc = re.sub(r":(?:class|func|meth|attr|mod):`~?([^`]+)`", r"`\1`", doc)
    return doc.replace("``", "`")


def _cell(text: str) -> str:
    text = " ".join(str(text).split())
    return text.replace("|", "\\|") if text else ""


def _is_section(hint) -> bool:
    return isinstance(hint, type) and (dataclasses.is_dataclass(hint) or hasattr(hint, "from_settings"))


# -- writing the page --------------------------------------------------------------

class Page:
    """The page's lines, and where each nested section type was first documented."""

    def __init__(self):
        self.lines: List[str] = []
        self.stage = ""
        self.documented: Dict[type, Tuple[str, str]] = {}   # section type -> (anchor, title)

    def add(self, *lines: str) -> None:
        self.lines.extend(lines)

    def heading(self, level: int, title: str, anchor: str) -> None:
        self.add(f"{'#' * min(level, 6)} {title} {{#{anchor}}}", "")

    def text(self) -> str:
        return "\n".join(self.lines).rstrip() + "\n"


def _slug(*parts: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", "-".join(p for p in parts if p).lower()).strip("-")


def document(page: Page, cls: type, path: str, level: int, anchor: str, seen: Tuple[type, ...] = (),
             own_doc: bool = True) -> None:
    """A table of ``cls``'s settings, then a subsection for every nested section."""
    if cls in seen:
        page.add(f"`{path}` is a section of the same type as the one it is in.", "")
        return
    seen = seen + (cls,)
    choices = variants_of(cls)
    if choices:
        _document_variants(page, cls, choices, path, level, anchor, seen)
        return
    if not dataclasses.is_dataclass(cls):
        _document_custom(page, cls, path, level, anchor, seen)
        return
    doc = class_doc(cls) if own_doc else ""
    if doc:
        page.add(doc, "")
    try:
        hints = typing.get_type_hints(cls)
    except Exception:
        hints = {}
    fields = [f for f in dataclasses.fields(cls) if f.init]
    if not fields:
        page.add("No settings.", "")
        return
    page.add(f"Python type: `{cls.__module__}.{cls.__qualname__}`", "",
             "| setting | type | default | legal values | what it does |",
             "|---|---|---|---|---|")
    nested = []
    for f in fields:
        hint = hints.get(f.name, f.type)
        key = f"{path}.{f.name}" if path else f.name
        if _is_section(hint):
            nested.append((f, hint, key))
        page.add(f"| `{key}` | {_cell(_type_name(hint))} | {_cell(_default_text(f))} | "
                 f"{_cell(legal_values(f))} | {_cell(field_help(cls, f))} |")
    page.add("")
    for f, hint, key in nested:
        if hint in page.documented:
            first, title = page.documented[hint]
            page.add(f"`{key}` takes the settings of [{title}](#{first}), its keys starting "
                     f"`{key}.` here.", "")
            continue
        sub = _slug(page.stage, key) if not anchor else _slug(anchor, f.name)
        title = f"`{key}`"
        if "." not in key:   # the others point at a stage's own section, not one nested deeper
            page.documented[hint] = (sub, f"{title} of `{page.stage}`")
        page.heading(level + 1, title, sub)
        document(page, hint, key, level + 1, sub, seen)


def _document_variants(page: Page, base: type, choices: Dict[tuple, type], path: str, level: int,
                       anchor: str, seen: Tuple[type, ...]) -> None:
    tags = tags_of(base)
    where = f"`{path}` " if path else ""
    names = " and ".join(f"`{t}`" for t in tags) or "its tags"
    doc = class_doc(base)
    if doc:
        page.add(doc, "")
    defaults = [f"`{t}: {_value(getattr(base, t, None))}`" for t in tags]
    page.add(f"This section {where}is one of {len(choices)} types, picked by {names} "
             f"(default {', '.join(defaults)}). Each type takes only its own settings:", "")
    entries = []
    for values, cls in choices.items():
        label = ", ".join(f"{t}: {v}" for t, v in zip(tags, values))
        sub = _slug(anchor or page.stage, *map(str, values))
        entries.append((label, cls, sub))
    page.add(*[f"- [{label}](#{sub})" for label, _, sub in entries], "")
    for label, cls, sub in entries:
        page.heading(level + 1, f"{label}" + (f" (`{path}`)" if path else ""), sub)
        document(page, cls, path, level + 1, sub, seen)


def _document_custom(page: Page, cls: type, path: str, level: int, anchor: str,
                     seen: Tuple[type, ...]) -> None:
    """A section that builds itself (``from_settings``), such as ``losses``: its registered entries."""
    doc = class_doc(cls)
    if doc:
        page.add(doc, "")
    entries = _registered_entries(cls)
    if entries:
        page.add("Each key is one of these names; its value is a weight alone or a mapping of its "
                 "settings.", "")
        for name, entry, settings_cls in entries:
            key = f"{path}.{name}" if path else name
            sub = _slug(anchor or page.stage, name)
            page.heading(level + 1, f"`{key}`", sub)
            summary = _summary(entry)
            if summary:
                page.add(summary, "")
            document(page, settings_cls, key, level + 1, sub, seen, own_doc=False)
        return
    describe = getattr(cls, "describe", None)
    if callable(describe):
        page.add("Settings:", "")
        page.add(*[f"- `{line}`" for line in describe(path + "." if path else "")], "")
    else:
        page.add(f"A section of type `{cls.__name__}`.", "")


def _registered_entries(cls) -> List[tuple]:
    """For a self-building section: ``(name, entry, settings class)`` of the registry beside it."""
    module = sys.modules.get(cls.__module__)
    if module is None:
        return []
    for value in vars(module).values():
        if value is cls or isinstance(value, type) or inspect.ismodule(value):
            continue
        try:
            items = list(value.items()) if callable(getattr(value, "items", None)) else None
        except Exception:   # typing aliases and the like
            items = None
        if not items:
            continue
        found = []
        for name, entry in items:
            settings_cls = getattr(entry, "settings", None)
            if not (isinstance(name, str) and isinstance(settings_cls, type)
                    and dataclasses.is_dataclass(settings_cls)):
                found = []
                break
            found.append((name, entry, settings_cls))
        if found:
            return found
    return []


def recipe_header() -> Optional[type]:
    """The config dataclass of a recipe's header (None where the toolkit has none)."""
    try:
        module = importlib.import_module("compressor.recipe.header")
    except ModuleNotFoundError:
        return None
    cls = getattr(module, "RecipeHeader", None)
    return cls if isinstance(cls, type) and dataclasses.is_dataclass(cls) else None


def render() -> str:
    page = Page()
    stages = registered_stages()
    page.add(
        "# Settings reference",
        "",
        "<!-- Generated by docs/hooks.py from the config dataclasses at build time; do not edit. -->",
        "",
        "Every recipe stage the toolkit registers, and every type a stage's `method`, `backend` or "
        "`kind` can pick, with each setting its config takes: the key (dotted inside a nested "
        "section), its type, its default, the values it accepts and what it does. These are the "
        "keys of a stage in a recipe (`- prune: {method: structured, heads: 0.5}`) and, for the "
        "commands that take them, of the `--set KEY=VALUE`, `--recover KEY=VALUE`, "
        "`--student KEY=VALUE` and `--loss NAME.SETTING=VALUE` options. "
        "`compressor recipe stages` prints the same list in the terminal, and "
        "`compressor recipe validate FILE` checks a recipe against it.",
        "",
        "*Legal values* lists the values a setting is limited to, or the name of the check its "
        "value must pass (*checked* where the check has no name); a recipe that breaks one gets an "
        "error at that line. *What it does* is the help text the field carries in the code, blank "
        "where it carries none.",
        "",
        "| stage | takes | makes | what it does |",
        "|---|---|---|---|",
    )
    for name, entry in stages.items():
        accepts = ", ".join(getattr(entry, "accepts", ()) or ())
        produces = getattr(entry, "produces", None)
        makes = produces if produces else "(passes its input on)"
        page.add(f"| [`{name}`](#{_slug('stage', name)}) | {_cell(accepts)} | {_cell(makes)} | "
                 f"{_cell(_summary(entry))} |")
    page.add("")
    header = recipe_header()
    if header is not None:
        page.stage = "header"
        page.heading(2, "The recipe header", "header")
        page.add("The keys of a recipe besides its stages' settings (`stages:` lists the stages "
                 "below). A `teacher` given as a plain path is `teacher: {model: PATH}`.", "")
        document(page, header, "", 2, "header")
    for name, entry in stages.items():
        page.stage = name
        cls = _config_class(entry)
        page.heading(2, f"`{name}`", _slug("stage", name))
        summary = _summary(entry)
        if summary:
            page.add(summary, "")
        document(page, cls, "", 2, "")
    return page.text()


# -- the command reference -------------------------------------------------------------

COMMANDS_PAGE = "reference/commands.md"
CLI_MODULES = ("compressor.cli",)


def _cli_group():
    import click

    module = _import_first(CLI_MODULES)
    for name in ("cli", "main", "group"):
        value = getattr(module, name, None)
        if isinstance(value, click.Group):
            return value
    groups = [v for v in vars(module).values() if isinstance(v, click.Group)]
    if not groups:
        raise RuntimeError(f"no click group in {module.__name__}")
    return groups[0]


def render_commands() -> str:
    """Every command's ``--help``, as the terminal shows it, from the click commands themselves."""
    import click

    group = _cli_group()
    root = click.Context(group, info_name="compressor", terminal_width=100, max_content_width=100,
                         **group.context_settings)
    page = Page()
    page.add(
        "# Commands",
        "",
        "<!-- Generated by docs/hooks.py from the click commands at build time; do not edit. -->",
        "",
        "Each command's `--help`, as `compressor COMMAND --help` prints it. The guide pages say "
        "what the commands are for; [the command line](../cli.md) has the common options, "
        "models and data.",
        "",
        "```text",
        group.get_help(root),
        "```",
        "",
    )

    def walk(command, parent, words):
        settings = {"terminal_width": 100, "max_content_width": 100, **command.context_settings}
        ctx = click.Context(command, info_name=words[-1], parent=parent, **settings)
        name = " ".join(words)
        page.heading(2, f"`{name}`", _slug(*words))
        page.add("```text", command.get_help(ctx), "```", "")
        if isinstance(command, click.Group):
            for sub in command.list_commands(ctx):
                walk(command.get_command(ctx, sub), ctx, words + [sub])

    for sub in group.list_commands(root):
        walk(group.get_command(root, sub), root, ["compressor", sub])
    return page.text()


# -- the MkDocs hook -----------------------------------------------------------------

GENERATED = {PAGE: render, COMMANDS_PAGE: render_commands}


def on_files(files, config):
    """Add the generated pages to the site (in memory: nothing is written under docs/)."""
    from mkdocs.structure.files import File

    for path, make in GENERATED.items():
        existing = files.get_file_from_path(path)
        if existing is not None:
            files.remove(existing)
        files.append(File.generated(config, path, content=make()))
    return files


if __name__ == "__main__":
    # python docs/hooks.py [settings|commands] [OUT.md]
    which = sys.argv[1] if len(sys.argv) > 1 else "settings"
    make = {"settings": render, "commands": render_commands}[which]
    text = make()
    if len(sys.argv) > 2:
        with open(sys.argv[2], "w", encoding="utf-8") as handle:
            handle.write(text)
    else:
        sys.stdout.write(text)
