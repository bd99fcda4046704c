"""ONNX export and the torch-free deployment runtime.

Public API:

- ``export_onnx(model_dir, out_dir, task=None, opset=17, optimize=True, parity=True, ...)``
  (``compressor.export.onnx``): a checkpoint to a folder with ``model.onnx`` (dynamic batch
  and sequence axes), tokenizer files, ``config.json``, ``manifest.json`` and
  ``parity.json``. Returns the manifest.
- ``read_manifest(folder)``, ``is_export(folder)``, ``optimize_graph(model_file, config, heads)``,
  ``parity_check(...)``, ``score_onnx(folder, dataset)`` (the one scorer of ONNX graphs).
- ``Predictor`` (``compressor.export.runtime``): classifies text from an export folder
  with only onnxruntime, tokenizers and numpy.
- ``export_model(model, out_dir, format="onnx"|"openvino"|"triton", ...)``
  (``compressor.export.targets``): the deployment targets made from the ONNX graph;
  ``export_openvino`` (OpenVINO IR, optionally NNCF INT8) and ``export_triton`` (a Triton
  model repository for the ONNX Runtime backend) take an ONNX export folder.

This module imports nothing heavy, so ``from compressor.export.runtime import Predictor``
works where torch is not installed.
"""

_LAZY = {"export_onnx": "onnx", "read_manifest": "onnx", "is_export": "onnx",
         "optimize_graph": "onnx", "parity_check": "onnx", "score_onnx": "onnx", "Predictor": "runtime",
         "export_model": "targets", "export_openvino": "targets.openvino_ir",
         "export_triton": "targets.triton_repo"}

__all__ = sorted(_LAZY)


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"compressor.export.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'compressor.export' has no attribute {name!r}")
