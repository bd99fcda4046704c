"""OpenVINO as a deployment target: an export's ONNX graph as OpenVINO IR, optionally INT8 by NNCF.

OpenVINO reads the toolkit's ONNX graphs directly (FP32, fused or not, and INT8 QDQ):
``export_openvino`` reads ``model.onnx`` with ``openvino.Core.read_model``, optionally quantises
it with NNCF's post-training quantisation (calibrated on rows of the task's training split,
never dev), writes ``model.xml``/``model.bin`` with ``openvino.save_model`` and puts the
tokenizer, ``config.json``, ``compressor.json`` and a ``manifest.json`` (format
``compressor-openvino/1``) beside it. It then runs the IR and the ONNX graph it came from on
real dev rows, one at a time, and writes what it saw to ``parity.json``.

``compressor.export.openvino_runtime.OpenVINOPredictor`` runs such a folder: the ``Predictor``'s
tokenisation, batching and labels over the compiled IR, so ``compressor.export.runtime.open_graph`` (scoring,
``predict --onnx``, the benchmark) opens an OpenVINO folder as it opens an ONNX one.

Needs the ``openvino`` extra (``openvino``, ``nncf``): ``pip install 'compressor[openvino]'``.
optimum-intel is not used: its 2.2 release wants optimum 2.3 (and a newer torch), the toolkit
pins optimum 2.1.
"""
from __future__ import annotations

import os
import time
from typing import Optional

import numpy as np

from compressor.core.errors import CompressorError
from compressor.core.io import atomic_dir, write_json
from compressor.export.targets import copy_folder_files, register_target

# the largest |logit| difference allowed between the IR and the ONNX graph of the same precision
# (FP32 -> FP32 IR: only the order of float sums differs; INT8 QDQ -> IR: OpenVINO's INT8
# kernels round differently from onnxruntime's)
TOLERANCE = {"fp32": 1e-3, "int8": 5e-2}
_SIDE_FILES = ("config.json", "compressor.json", "tokenizer.json", "tokenizer_config.json",
               "special_tokens_map.json", "vocab.txt", "vocab.json", "merges.txt", "spm.model",
               "sentencepiece.bpe.model")


@register_target("openvino", fused_onnx=False)
def export_openvino(onnx_folder: str, out_dir: str, int8: bool = False, calibration_rows: int = 300,
                    parity_rows: int = 100, inference_precision: str = "f32", data_dir: Optional[str] = None,
                    user_data=None, overwrite: bool = False, threads: Optional[int] = None) -> dict:
    """OpenVINO IR (model.xml/.bin) of the ONNX graph, optionally NNCF INT8, with tokenizer and manifest.

    ``int8``: NNCF post-training quantisation calibrated on the first ``calibration_rows`` rows
    of the task's training split (of the files the model was trained on, where it records
    them). ``parity_rows`` dev rows compare the IR with the ONNX graph (``parity.json``).
    From a checkpoint, ``compressor.export.targets.export_model`` exports the plain (unfused)
    ONNX graph first: OpenVINO fuses it itself.
    """
    from compressor.core.data import load_for_model, task_from_dict

    from compressor.export.onnx import example_texts
    from compressor.export.openvino_runtime import INFERENCE_PRECISIONS, MODEL_FILE, require
    from compressor.export.runtime import OPENVINO_FORMAT, Predictor, read_manifest

    ov = require("openvino")
    nncf = require("nncf") if int8 else None
    if inference_precision not in INFERENCE_PRECISIONS:
        raise CompressorError(f"inference precision must be {' or '.join(INFERENCE_PRECISIONS)}, "
                              f"got {inference_precision!r}")
    if calibration_rows < 1 or parity_rows < 0:
        raise CompressorError("calibration rows must be at least 1 and parity rows at least 0")
    source = read_manifest(os.path.join(onnx_folder, "manifest.json"))
    source_precision = source.get("precision", "fp32")
    if int8 and source_precision != "fp32":
        raise CompressorError(f"{onnx_folder} is already {source_precision}; NNCF quantises an FP32 "
                              "graph (leave out --int8 to convert this one as it is)")
    task = task_from_dict(source["task_spec"])
    # read first: a missing split is one line before any work
    dev = load_for_model(onnx_folder, task, "dev", data_dir, parity_rows, user_data) if parity_rows else None
    calibration = load_for_model(onnx_folder, task, "train", data_dir, calibration_rows, user_data) \
        if int8 else None
    start = time.perf_counter()
    onnx_file = os.path.join(onnx_folder, source.get("model_file", "model.onnx"))
    core = ov.Core()
    try:
        model = core.read_model(onnx_file)
    except RuntimeError as exc:
        reason = " ".join(str(exc).split())[:300]
        raise CompressorError(f"OpenVINO cannot read {onnx_file}: {reason}") from None
    record = {"version": ov.get_version(), "inference_precision": inference_precision,
              "source_precision": source_precision}
    if int8:
        reader = Predictor(onnx_folder)   # the runtime's tokenisation: one row, unpadded, as deployed
        feeds = [reader.encode([text]) for text in example_texts(calibration.examples)]
        model = nncf.quantize(model, nncf.Dataset(feeds), subset_size=len(feeds),
                              model_type=nncf.ModelType.TRANSFORMER)
        record.update(nncf=nncf.__version__, calibration={"split": "train", "rows": len(feeds),
                                                          "data": calibration.source})
    precision = "int8-static" if int8 else source_precision
    with atomic_dir(out_dir, overwrite=overwrite) as tmp:
        ov.save_model(model, os.path.join(tmp, MODEL_FILE), compress_to_fp16=False)
        copy_folder_files(onnx_folder, tmp, _SIDE_FILES)
        _mark_kind(tmp)
        manifest = {k: v for k, v in source.items()
                    if k in ("task", "task_spec", "labels", "regression", "max_length", "inputs",
                             "parameters", "model_type", "source")}
        manifest.update(format=OPENVINO_FORMAT, model_file=MODEL_FILE, precision=precision, openvino=record,
                        onnx={"folder": os.path.abspath(onnx_folder), "format": source.get("format"),
                              "precision": source_precision, "opset": source.get("opset")})
        write_json(os.path.join(tmp, "manifest.json"), manifest)
        if dev is not None:
            check = parity(tmp, onnx_folder, example_texts(dev.examples), threads=threads)
            check.update(task=task.name, split="dev", data=dev.source)
            write_json(os.path.join(tmp, "parity.json"), check)
            manifest["parity"] = check
        manifest["export_time_s"] = round(time.perf_counter() - start, 2)
        write_json(os.path.join(tmp, "manifest.json"), manifest)
    return manifest


def parity(ir_folder: str, onnx_folder: str, texts, threads: Optional[int] = None) -> dict:
    """The IR against the ONNX graph it came from on ``texts``, one row at a time: the largest
    |logit| difference and the share of equal labels. Same precision on both sides: within
    ``TOLERANCE`` or not; an NNCF INT8 IR against its FP32 graph: no tolerance (what INT8
    changes is its agreement)."""
    from compressor.export.openvino_runtime import OpenVINOPredictor
    from compressor.export.runtime import Predictor

    ir = OpenVINOPredictor(ir_folder, threads=threads)
    reference = Predictor(onnx_folder, threads=threads)
    got, want = ir.logits(texts, batch_size=1), reference.logits(texts, batch_size=1)
    diff = float(np.abs(got - want).max()) if len(texts) else 0.0
    same = float((got.argmax(-1) == want.argmax(-1)).mean()) if len(texts) and not ir.regression else None
    ir_precision = ir.manifest.get("precision", "fp32")
    onnx_precision = reference.manifest.get("precision", "fp32")
    kind = "fp32" if ir_precision == onnx_precision == "fp32" else "int8"
    tolerance = TOLERANCE[kind] if ir_precision == onnx_precision else None
    return {"examples": len(texts), "against": "onnx", "onnx_precision": onnx_precision,
            "ir_precision": ir_precision, "max_abs_logit_diff": diff,
            "identical_predictions": same, "tolerance": tolerance,
            "within_tolerance": None if tolerance is None else diff <= tolerance}


def _mark_kind(folder: str) -> None:
    """The copied ``compressor.json`` says the folder is kind ``openvino`` (not the ONNX export's)."""
    from compressor.core.io import read_json

    file = os.path.join(folder, "compressor.json")
    if os.path.isfile(file):
        meta = read_json(file)
        meta.update(kind="openvino", made_by="export --format openvino")
        write_json(file, meta)
