"""The OpenVINO folder runtime: an IR that ``compressor export --format openvino`` wrote, run
on OpenVINO's CPU plugin behind the ``Predictor``'s API (tokenisation, batching, labels), so
``compressor.export.runtime.open_graph`` opens such a folder as it opens an ONNX export.

Needs the ``openvino`` extra: ``pip install 'compressor[openvino]'``.
"""
from __future__ import annotations

import importlib
import os
from types import SimpleNamespace
from typing import Optional

from compressor.export.runtime import ExportError, Predictor, _threads_from_env, read_manifest

MODEL_FILE = "model.xml"
INSTALL = "pip install 'compressor[openvino]'"
# how the CPU plugin computes what is not INT8: f32 (as the ONNX graph does; the parity check's
# setting), or OpenVINO's default for the CPU (bf16 where the CPU has AVX512_BF16 or AMX)
INFERENCE_PRECISIONS = ("f32", "default")


def require(module: str = "openvino", what: str = "the OpenVINO target"):
    """Import ``openvino`` or ``nncf``, or one line saying ``what`` needs them and how to install them."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ExportError(f"{what} needs {module}: {INSTALL}") from None


class _CompiledSession:
    """An OpenVINO compiled model behind the two calls the ``Predictor`` makes of a session."""

    def __init__(self, compiled):
        self.compiled = compiled
        self.request = compiled.create_infer_request()
        self.output = compiled.output(0)

    def get_inputs(self):
        return [SimpleNamespace(name=port.get_any_name()) for port in self.compiled.inputs]

    def run(self, _names, feed: dict) -> list:
        # share_outputs=False: a copy, not a view of the request's buffer that the next call reuses
        return [self.request.infer(feed, share_outputs=False)[self.output]]


class OpenVINOPredictor(Predictor):
    """An OpenVINO folder (``export_openvino``) on the CPU plugin, with the ``Predictor``'s API.

    ``threads``: the plugin's ``INFERENCE_NUM_THREADS`` (else ``OMP_NUM_THREADS`` where set, else
    OpenVINO's choice); one stream, the latency hint. ``inference_precision``: the folder's
    (``f32`` unless the export said ``default``).
    """

    engine = "openvino"

    def __init__(self, folder: str, threads: Optional[int] = None, inference_precision: Optional[str] = None,
                 **_):
        self._precision = inference_precision
        self._folder = folder
        super().__init__(folder, threads=threads)

    def _session(self, path, threads, providers=None, spinning=True, profile=None):
        ov = require("openvino")
        if not os.path.isfile(path):
            raise ExportError(f"OpenVINO model not found: {path}")
        manifest = read_manifest(os.path.join(self._folder, "manifest.json"))
        precision = self._precision or (manifest.get("openvino") or {}).get("inference_precision", "f32")
        config = {"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": "1"}
        threads = threads or _threads_from_env()
        if threads:
            config["INFERENCE_NUM_THREADS"] = int(threads)
        if precision == "f32":
            config["INFERENCE_PRECISION_HINT"] = "f32"
        try:
            return _CompiledSession(ov.Core().compile_model(path, "CPU", config))
        except RuntimeError as exc:
            raise ExportError(f"{path} is not a readable OpenVINO model "
                              f"({' '.join(str(exc).split())[:300]}); export the model again") from None
