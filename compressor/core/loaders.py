"""One loader for every kind of folder the toolkit writes.

``compressor.json`` says what a folder holds. Its ``kind`` picks the function
that rebuilds the model; for kind ``hf`` its ``shape`` says what
``config.json`` cannot (per-layer heads and FFN widths, shared layers)::

    {"kind": "hf", "shape": {"layers": 2, "heads": [4, 2], "ffn": [64, 48]},
     "task": "sst2", "task_spec": {...}, "max_length": 128, "labels": [...], "made_by": "..."}

Kinds today: ``hf`` (a transformers encoder, any per-layer shape), ``small``
(a BiLSTM/CNN student), ``torch-quantized``, ``onnx`` (an export), ``openvino`` (an
OpenVINO IR folder), the early-exit and token-pruning kinds. Each method
registers its loader beside its own code, and returns ``(model, tokenizer)``::

    @register_loader("small")
    def load_small(path, task=None, **options): ...

``compressor.core.models.load_for_task`` reads the kind and dispatches. The
default kinds live in core; every other kind is registered by the ``loader``
module of the package that makes it (``compressor.export.loader``,
``compressor.quantize.loader``, ``compressor.exit.loader``), found by
:func:`compressor.core.registry.discover` the first time an unknown kind is read.
This module imports neither torch nor transformers.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Optional

from compressor.core.errors import CompressorError
from compressor.core.registry import Registry
from compressor.core.io import read_json

META_FILE = "compressor.json"

@dataclass(frozen=True)
class Loader:
    kind: str
    load: Callable        # (path, task=None, **options) -> (model, tokenizer)
    pytorch: bool         # gives a torch module holding its weights (training and distillation need one)
    describe: str         # what such a folder is, in an error message
    engine: Optional[str] = None   # the graph engine that runs such a folder without torch (onnxruntime,
                                   # openvino): what the benchmark times it on; None for a PyTorch kind


# the default kinds (hf, small) register when compressor.core.models is imported; every other
# kind lives with the method that makes it, in that package's ``loader`` module
_LOADERS = Registry("folder kind", module="loader")


def register_loader(kind: str, pytorch: bool = True, describe: str = "", engine: Optional[str] = None):
    """Register ``fn(path, task=None, **options) -> (model, tokenizer)`` for folders of ``kind``.

    Options a loader does not use it ignores (``attn_implementation``, say).
    ``pytorch=False`` marks a kind that only runs (an ONNX graph): it is
    refused where a PyTorch checkpoint's weights are needed. ``engine`` names the graph
    engine such a folder runs on (``onnxruntime``, ``openvino``): ``compressor bench`` times
    the folder on it, as it times the peers.
    """
    def register(fn: Callable) -> Callable:
        _LOADERS.register(kind)(Loader(kind, fn, pytorch, describe or f"a '{kind}' folder", engine))
        return fn
    return register


def loader_for(kind: str, where: str) -> Loader:
    """The loader registered for ``kind``; one line naming ``where`` the kind was read if none is."""
    import compressor.core.models  # noqa: F401  (the default kinds: hf)
    import compressor.core.small  # noqa: F401  (small)

    if kind not in _LOADERS:
        known = ", ".join(sorted(_LOADERS))
        raise CompressorError(f"{where}: unknown kind {kind!r}, which this version cannot load "
                              f"(known: {known})")
    return _LOADERS[kind]


def loader_of(path: str) -> Loader:
    """The loader of the folder's kind (``kind_of``); an unknown kind is one line naming its file."""
    return loader_for(kind_of(path), os.path.join(path, META_FILE))


def read_meta(path: str) -> dict:
    """The toolkit's own notes about a checkpoint, or {} for a foreign one."""
    file = os.path.join(path, META_FILE)
    meta = read_json(file) if os.path.isfile(file) else {}
    if not isinstance(meta, dict):
        raise CompressorError(f"{file} is not a JSON object; re-create the folder with compressor")
    return meta


def kind_of(path: str) -> str:
    """What a folder holds: its ``compressor.json`` kind, else what the files say (``hf`` for a
    plain Hugging Face folder or a hub id)."""
    if not os.path.isdir(path):
        return "hf"
    meta = read_meta(path)
    kind = meta.get("kind")
    if kind is not None:
        if not isinstance(kind, str):
            raise CompressorError(f"{os.path.join(path, META_FILE)}: kind must be a string, got {kind!r}")
        return kind
    # folders written before compressor.json said its kind
    if os.path.isfile(os.path.join(path, "manifest.json")) and os.path.isfile(os.path.join(path, "model.onnx")):
        return "onnx"
    if os.path.isfile(os.path.join(path, "quantization.json")):
        return "torch-quantized"
    if meta.get("architecture"):
        return "small"
    return "hf"
