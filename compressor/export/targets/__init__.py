"""Deployment targets: what ``compressor export --format`` writes.

Every target starts from the toolkit's ONNX export folder (``model.onnx``, tokenizer,
``manifest.json``): ``onnx`` is that folder itself (``compressor.export.onnx.export_onnx``);
the others are made from it by a function registered here with :func:`register_target`,
one module per target in this package (found by ``compressor.core.registry``, no list):

- ``openvino`` (:mod:`.openvino_ir`): OpenVINO IR, optionally INT8 by NNCF;
- ``triton`` (:mod:`.triton_repo`): a Triton Inference Server model repository for the
  ONNX Runtime backend.

:func:`export_model` takes a checkpoint or an ONNX export folder (FP32 or INT8): a checkpoint is
exported to ONNX first, into a temporary folder beside ``out_dir`` that is removed afterwards.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import Callable, Optional

from compressor.core.errors import CompressorError
from compressor.core.io import check_output_dir
from compressor.core.registry import Registry

ONNX = "onnx"


@dataclass(frozen=True)
class Target:
    name: str
    write: Callable            # (onnx_folder, out_dir, overwrite=..., **options) -> manifest
    fused_onnx: bool = True    # from a checkpoint: the ONNX graph with onnxruntime's fusions, or plain
    summary: str = ""


TARGETS = Registry("export format", package="compressor.export.targets")


def register_target(name: str, fused_onnx: bool = True):
    """Decorator: ``fn(onnx_folder, out_dir, overwrite=False, **options) -> manifest`` becomes
    ``compressor export --format NAME``."""
    def wrap(fn):
        TARGETS[name] = Target(name, fn, fused_onnx, (fn.__doc__ or "").strip().splitlines()[0])
        return fn
    return wrap


def formats() -> list:
    """Every format ``export_model`` writes: ``onnx`` and the registered targets."""
    return [ONNX] + TARGETS.names()


def export_model(model: str, out_dir: str, format: str = ONNX, overwrite: bool = False,
                 onnx_options: Optional[dict] = None, **options) -> dict:
    """Write ``model`` (a checkpoint or an ONNX export folder) to ``out_dir`` as ``format``.

    ``onnx_options`` go to ``export_onnx`` (``task``, ``opset``, ``data_dir``, ...) when the model
    is a checkpoint; ``options`` to the target (see each target's function). Returns the manifest
    of what was written.
    """
    from compressor.export.onnx import export_onnx, is_export

    onnx_options = dict(onnx_options or {})
    if format == ONNX:
        return export_onnx(model, out_dir, overwrite=overwrite, **onnx_options)
    target = TARGETS.lookup(format, hint=f" (formats: {', '.join(formats())})")
    check_output_dir(out_dir, overwrite)
    if not os.path.isdir(model):
        raise CompressorError(f"{model}: no such folder (a checkpoint or an ONNX export folder)")
    if os.path.isfile(os.path.join(model, "manifest.json")) and not is_export(model):
        from compressor.export.runtime import read_manifest

        kind = read_manifest(os.path.join(model, "manifest.json")).get("format", "an unknown format")
        raise CompressorError(f"{model} is a {kind} folder, not one ONNX graph; give its checkpoint "
                              "or a plain ONNX export")
    if is_export(model):
        return target.write(model, out_dir, overwrite=overwrite, **options)
    parent = os.path.dirname(os.path.abspath(out_dir))
    os.makedirs(parent, exist_ok=True)
    work = tempfile.mkdtemp(prefix=f".{os.path.basename(os.path.abspath(out_dir))}.onnx-", dir=parent)
    try:
        onnx_options.setdefault("optimize", target.fused_onnx)
        onnx_options.setdefault("parity", False)   # the target checks its own output against this graph
        graph = os.path.join(work, "onnx")
        export_onnx(model, graph, **onnx_options)
        return target.write(graph, out_dir, overwrite=overwrite, **options)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def copy_folder_files(src: str, dst: str, names) -> list:
    """Copy the files ``names`` of ``src`` that exist into ``dst``; returns those copied."""
    copied = []
    for name in names:
        file = os.path.join(src, name)
        if os.path.isfile(file):
            shutil.copy2(file, os.path.join(dst, name))
            copied.append(name)
    return copied
