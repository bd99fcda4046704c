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


# anchors and aliases (``&a``/``*a``) may repeat a block; a recipe that expands past this many
# values is refused before anything is built ("billion laughs": a few lines, gigabytes expanded)
MAX_NODES = 100_000


class _Loader(yaml.SafeLoader):
    def compose_document(self):
        node = super().compose_document()
        _check_expansion(node, self.name)
        return node


def _check_expansion(root, name: str) -> None:
    """Refuse a document whose aliases expand to more than ``MAX_NODES`` values, or refer to
    themselves, counting each aliased block once per use without expanding it."""
    sizes: dict = {}
    open_nodes: set = set()

    def size(node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in open_nodes:
            raise CompressorError(f"{name}:{node.start_mark.line + 1}: an alias refers to the block "
                                  "that holds it; write the value out")
        open_nodes.add(key)
        total = 1
        if isinstance(node, yaml.SequenceNode):
            children = node.value
        elif isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        else:
            children = []
        for child in children:
            total += size(child)
            if total > MAX_NODES:
                raise CompressorError(
                    f"{name}:{node.start_mark.line + 1}: the recipe's aliases (*name) expand to more "
                    f"than {MAX_NODES:,} values; write the values out instead")
        open_nodes.discard(key)
        sizes[key] = total
        return total

    if root is not None:
        size(root)


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
