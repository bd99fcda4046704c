"""YAML that remembers line numbers, so every recipe problem can say where it is."""
from __future__ import annotations

import yaml

from compressor.core.errors import CompressorError


class LineDict(dict):
    """A mapping whose ``lines[key]`` is the 1-based line of that key."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.lines = {}
        self.line = None

    def line_of(self, key):
        return self.lines.get(key, self.line)


class LineList(list):
    def __init__(self, *args):
        super().__init__(*args)
        self.lines = []
        self.line = None

    def line_of(self, index):
        return self.lines[index] if index < len(self.lines) else self.line


class _Loader(yaml.SafeLoader):
    pass


def _mapping(loader, node):
    loader.flatten_mapping(node)
    out = LineDict()
    out.line = node.start_mark.line + 1
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        if key in out:
            raise CompressorError(f"{loader.name}:{line}: key '{key}' appears twice")
        out[key] = loader.construct_object(value_node, deep=True)
        out.lines[key] = line
    return out


def _sequence(loader, node):
    out = LineList(loader.construct_object(child, deep=True) for child in node.value)
    out.lines = [child.start_mark.line + 1 for child in node.value]
    out.line = node.start_mark.line + 1
    return out


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)
_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _sequence)


def load_yaml(path: str):
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        raise CompressorError(f"recipe not found: {path}") from None
    except (IsADirectoryError, UnicodeDecodeError) as exc:
        raise CompressorError(f"{path}: cannot read the recipe ({exc})") from None
    return parse_yaml(text, path)


def parse_yaml(text: str, name: str = "<recipe>"):
    loader = _Loader(text)
    loader.name = name
    try:
        return loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else "?"
        raise CompressorError(f"{name}:{line}: not valid YAML ({exc.problem or exc.context})") from None
    except yaml.YAMLError as exc:
        raise CompressorError(f"{name}: not valid YAML ({exc})") from None
    finally:
        loader.dispose()
