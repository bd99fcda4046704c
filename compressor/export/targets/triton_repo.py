"""Triton Inference Server as a deployment target: a model repository for the ONNX Runtime backend.

``export_triton`` writes::

    OUT/MODEL/config.pbtxt        backend onnxruntime, inputs and outputs read from the graph,
                                  dynamic batching, CPU instances
    OUT/MODEL/1/model.onnx        the export's graph (and its external data files), version 1
    OUT/MODEL/labels.txt          the task's labels, one a line (the output's label_filename)
    OUT/MODEL/manifest.json, tokenizer files
                                  what a client needs to make the ids; Triton reads none of them

The graph is the ONNX export's, unchanged (fused or INT8 alike: the backend is onnxruntime).
Triton batches requests whose tensors have the same shape; sentences of different lengths
batch together when the client pads them to one length (the manifest's ``max_length``).
The folder ``OUT/MODEL`` is also an export folder the toolkit's ``Predictor`` runs
(``model_file`` ``1/model.onnx``), so a client can check Triton's answers against it.
"""
from __future__ import annotations

import os
import re
import shutil
from typing import Optional, Sequence

from compressor.core.errors import CompressorError
from compressor.core.io import atomic_dir, write_json, write_text
from compressor.export.targets import copy_folder_files, register_target

FORMAT = "compressor-triton/1"
# ONNX TensorProto element types -> Triton's model-config data types
TRITON_TYPES = {1: "TYPE_FP32", 2: "TYPE_UINT8", 3: "TYPE_INT8", 5: "TYPE_INT16", 6: "TYPE_INT32",
                7: "TYPE_INT64", 9: "TYPE_BOOL", 10: "TYPE_FP16", 11: "TYPE_FP64", 16: "TYPE_BF16"}
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
_SIDE_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
               "vocab.txt", "vocab.json", "merges.txt", "spm.model", "sentencepiece.bpe.model")


@register_target("triton")
def export_triton(onnx_folder: str, out_dir: str, model_name: Optional[str] = None, max_batch_size: int = 32,
                  preferred_batch_sizes: Sequence[int] = (8, 16, 32), max_queue_delay_us: int = 2000,
                  instances: int = 1, threads: Optional[int] = None, overwrite: bool = False) -> dict:
    """A Triton model repository (ONNX Runtime backend, dynamic batching) holding the ONNX graph.

    ``model_name`` (default: the output folder's name) names ``OUT/MODEL``; ``max_batch_size``,
    ``preferred_batch_sizes`` and ``max_queue_delay_us`` set the dynamic batcher; ``instances``
    CPU copies of the model; ``threads`` the backend's intra-op threads per copy.
    """
    from compressor.export.onnx import external_data_files, load_graph
    from compressor.export.runtime import read_manifest

    name = model_name or os.path.basename(os.path.abspath(out_dir))
    if not _NAME.match(name):
        raise CompressorError(f"Triton model name {name!r}: use letters, digits, '_', '.', '-'")
    if max_batch_size < 1 or instances < 1 or max_queue_delay_us < 0 or (threads is not None and threads < 1):
        raise CompressorError("max batch size, instances and threads must be at least 1, the queue delay at least 0")
    preferred = sorted(set(int(b) for b in preferred_batch_sizes))
    if any(b < 1 or b > max_batch_size for b in preferred):
        raise CompressorError(f"preferred batch sizes {preferred} must lie in 1..{max_batch_size} (the max batch size)")
    source = read_manifest(os.path.join(onnx_folder, "manifest.json"))
    model_file = os.path.join(onnx_folder, source.get("model_file", "model.onnx"))
    graph = load_graph(model_file, load_external_data=False)
    inputs = [_tensor(v, "input") for v in _graph_inputs(graph)]
    outputs = [_tensor(v, "output") for v in graph.graph.output]
    labels = source.get("labels")
    with atomic_dir(out_dir, overwrite=overwrite) as tmp:
        model_dir = os.path.join(tmp, name)
        os.makedirs(os.path.join(model_dir, "1"))
        shutil.copy2(model_file, os.path.join(model_dir, "1", "model.onnx"))
        for rel in external_data_files(model_file):
            os.makedirs(os.path.dirname(os.path.join(model_dir, "1", rel)), exist_ok=True)
            shutil.copy2(os.path.join(onnx_folder, rel), os.path.join(model_dir, "1", rel))
        if labels:
            write_text(os.path.join(model_dir, "labels.txt"), "".join(f"{label}\n" for label in labels))
        write_text(os.path.join(model_dir, "config.pbtxt"),
                   config_pbtxt(name, inputs, outputs, max_batch_size, preferred, max_queue_delay_us,
                                instances, threads, label_file="labels.txt" if labels else None))
        copy_folder_files(onnx_folder, model_dir, _SIDE_FILES)
        manifest = {**source, "format": FORMAT, "model_file": os.path.join("1", "model.onnx"),
                    "triton": {"model": name, "backend": "onnxruntime", "max_batch_size": max_batch_size,
                               "preferred_batch_sizes": preferred, "max_queue_delay_us": max_queue_delay_us,
                               "instances": instances, "threads": threads,
                               "inputs": inputs, "outputs": outputs,
                               "onnx": os.path.abspath(onnx_folder)}}
        manifest.pop("parity", None)
        write_json(os.path.join(model_dir, "manifest.json"), manifest)
    return manifest


def _graph_inputs(graph):
    """The graph's real inputs (an initializer listed as an input is a constant, not a feed)."""
    constants = {t.name for t in graph.graph.initializer}
    return [v for v in graph.graph.input if v.name not in constants]


def _tensor(value, what: str) -> dict:
    """Name, Triton data type and dims (batch first, -1 where the graph leaves a size open)."""
    kind = value.type.tensor_type.elem_type
    if kind not in TRITON_TYPES:
        raise CompressorError(f"graph {what} {value.name} has ONNX element type {kind}, which Triton's "
                              "model config cannot name")
    dims = [d.dim_value if d.HasField("dim_value") else -1 for d in value.type.tensor_type.shape.dim]
    if not dims:
        raise CompressorError(f"graph {what} {value.name} has no batch axis; Triton's batching needs one")
    return {"name": value.name, "data_type": TRITON_TYPES[kind], "dims": dims}


def config_pbtxt(name: str, inputs, outputs, max_batch_size: int, preferred, max_queue_delay_us: int,
                 instances: int, threads: Optional[int] = None, label_file: Optional[str] = None) -> str:
    """Triton's ``config.pbtxt`` (protobuf text format of ``ModelConfig``): the batch axis is
    Triton's (``max_batch_size``), so each tensor's ``dims`` leave it out."""
    def tensors(items, label=None):
        blocks = []
        for t in items:
            lines = [f'    name: "{t["name"]}"', f'    data_type: {t["data_type"]}',
                     f'    dims: [ {", ".join(str(d) for d in t["dims"][1:])} ]']
            if label:
                lines.append(f'    label_filename: "{label}"')
            blocks.append("  {\n" + "\n".join(lines) + "\n  }")
        return ",\n".join(blocks)

    text = [f'name: "{name}"', 'backend: "onnxruntime"', f"max_batch_size: {max_batch_size}",
            "input [", tensors(inputs), "]", "output [", tensors(outputs, label_file), "]",
            "dynamic_batching {",
            f"  preferred_batch_size: [ {', '.join(str(b) for b in preferred)} ]",
            f"  max_queue_delay_microseconds: {max_queue_delay_us}", "}",
            "instance_group [", "  {", f"    count: {instances}", "    kind: KIND_CPU", "  }", "]"]
    if threads:
        text += ["parameters {", '  key: "intra_op_thread_count"',
                 f'  value: {{ string_value: "{threads}" }}', "}"]
    return "\n".join(text) + "\n"
