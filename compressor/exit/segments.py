"""An early-exit checkpoint as ONNX segments, each fused by ONNX Runtime's transformer optimizer
(as ``compressor.export`` fuses whole models) and optionally dynamic INT8 (``compressor.quantize``),
checked against the PyTorch early-exit model and chained by ``compressor.exit.runtime``.

The folder holds ``segment-K.onnx`` (K from 0), the tokenizer, ``config.json``,
``manifest.json`` (format, task, labels, each segment's layers and exit, rule, threshold,
fusions, quantisation) and ``compressor.json`` of kind ``early-exit-onnx``.
"""
from __future__ import annotations

import os
import time
import warnings
from typing import Optional

import numpy as np

from compressor.core.errors import CompressorError
from compressor.core.io import atomic_dir, check_output_dir, write_json
from compressor.core.loaders import META_FILE, kind_of
from compressor.exit.configs import ExitExportConfig
from compressor.exit.model import KIND, EarlyExitModel, segments_of
from compressor.exit.runtime import FORMAT
from compressor.exit.loader import KIND as ONNX_KIND


def _export_segment(segment, model: EarlyExitModel, file: str, opset: int, types: bool) -> list:
    import torch

    hidden = model.spec.hidden_size(model.config)
    ids = torch.tensor([[101, 2023, 2003, 1037, 102, 0], [101, 2178, 6251, 2003, 2146, 102]])
    mask = (ids != 0).long()
    if segment.first:
        names = ["input_ids", "attention_mask"] + (["token_type_ids"] if types else [])
        args = (ids, mask) + ((torch.zeros_like(ids),) if types else ())
    else:
        names = ["hidden_states", "attention_mask"]
        args = (torch.randn(2, ids.shape[1], hidden), mask)
    outputs = ["logits"] if segment.last else ["next_hidden_states", "logits"]
    axes = {n: {0: "batch_size", 1: "sequence_length"} for n in names}
    axes["logits"] = {0: "batch_size"}
    if not segment.last:
        axes["next_hidden_states"] = {0: "batch_size", 1: "sequence_length"}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(segment.eval(), args, file, input_names=names, output_names=outputs,
                          dynamic_axes=axes, opset_version=opset, dynamo=False, do_constant_folding=True)
    return names


def export_segments(model_dir: str, out_dir: str, config: Optional[ExitExportConfig] = None,
                    task: Optional[str] = None, data_dir: Optional[str] = None, examples=None,
                    overwrite: bool = False, meta: Optional[dict] = None) -> dict:
    """Export the early-exit checkpoint ``model_dir`` as chained ONNX segments in ``out_dir``.

    The parity check runs the chained segments (FP32, before any INT8) and the PyTorch
    early-exit model on ``examples`` (default: ``parity_rows`` dev rows) at the calibrated
    rule, and compares predictions and the exit each row took; with INT8 it also reports
    how often the INT8 chain agrees. Returns the manifest.
    """
    import torch

    from compressor.export.onnx import _copy_side_files, _task_dict, optimize_graph
    from compressor.core.models import load_for_task, read_meta, resolve_model
    from compressor.engine.scoring import _task_for

    config = config or ExitExportConfig()
    config.check()
    path = resolve_model(model_dir)
    if kind_of(path) != KIND:
        raise CompressorError(f"{path} is not an early-exit model (kind {kind_of(path)!r}); "
                              "add exits first with compressor early-exit")
    check_output_dir(out_dir, overwrite)
    task_spec, source_meta = _task_for(path, task)
    # eager attention: the graph ONNX Runtime's optimizer fuses into Attention
    model, tokenizer = load_for_task(path, task_spec, attn_implementation="eager")
    model.eval()
    if model.rule is None:
        raise CompressorError(f"{path} has no calibrated exit rule; run compressor early-exit on it")
    max_length = source_meta.get("max_length", 128)
    from compressor.core.arch import uses_token_type_ids
    from compressor.core.shapes import shape_of

    types = uses_token_type_ids(model.config)
    heads = shape_of(model.backbone)["heads"]
    _check_units(config, model.total_layers)
    start = time.perf_counter()
    segments = segments_of(model)
    with atomic_dir(out_dir, overwrite=overwrite) as tmp:
        described = []
        for k, segment in enumerate(segments):
            file = os.path.join(tmp, f"segment-{k}.onnx")
            inputs = _export_segment(segment, model, file, config.opset, types)
            fusion = optimize_graph(file, model.config, heads=heads[segment.start:segment.end]) \
                if config.optimize else None
            described.append({"file": os.path.basename(file), "layers": [segment.start + 1, segment.end],
                              "exit_layer": segment.end, "inputs": inputs, "optimization": fusion})
        _copy_side_files(path, tokenizer, tmp)
        manifest = {
            "format": FORMAT, "model_file": described[0]["file"], "task": task_spec.name,
            "task_spec": source_meta.get("task_spec") or _task_dict(task_spec),
            "labels": list(task_spec.labels) if task_spec.labels else None,
            "regression": task_spec.is_regression, "max_length": max_length,
            "inputs": described[0]["inputs"], "opset": config.opset, "precision": "fp32",
            "segments": described, "exit_layers": model.exit_layers,
            "total_layers": model.total_layers, "rule": model.rule, "threshold": model.threshold,
            "tolerance": model.tolerance, "calibration": model.calibration,
            "source": os.path.abspath(path),
            "model_type": getattr(model.config, "model_type", None),
        }
        write_json(os.path.join(tmp, "manifest.json"), manifest)
        meta = {**(meta or read_meta(path)), "made_by": "early_exit_export",
                "source": manifest["source"], "task": task_spec.name,
                "task_spec": manifest["task_spec"], "labels": manifest["labels"],
                "max_length": max_length}
        from compressor.core.models import with_kind

        write_json(os.path.join(tmp, META_FILE), with_kind(meta, ONNX_KIND, None))
        if config.parity:
            if examples is None:
                from compressor.core.data import load_for_model

                examples = load_for_model(path, task_spec, "dev", data_dir, config.parity_rows).examples
            examples = list(examples)[:config.parity_rows]
            manifest["parity"] = chain_parity(model, tokenizer, tmp, examples, max_length)
        if config.int8:
            manifest["quantization"] = _quantize(tmp, described, config.preset, config.fp32_units)
            manifest["precision"] = "int8-dynamic"
            if config.parity:
                manifest["parity"]["int8"] = chain_parity(model, tokenizer, tmp, examples, max_length)
        manifest["onnx_size_bytes"] = sum(os.path.getsize(os.path.join(tmp, s["file"])) for s in described)
        manifest["export_time_s"] = round(time.perf_counter() - start, 2)
        write_json(os.path.join(tmp, "manifest.json"), manifest)
    return manifest


def _check_units(config: ExitExportConfig, layers: int) -> None:
    if config.fp32_units and not config.int8:
        raise CompressorError("fp32_units keeps units out of INT8: it needs int8 on")
    past = [u for u in config.fp32_units if u.startswith("layer.") and int(u.split(".")[1]) >= layers]
    if past:
        raise CompressorError(f"fp32_units {past}: the model has {layers} encoder layers "
                              f"(layer.0 to layer.{layers - 1})")


def _quantize(folder: str, described: list, preset_name: str, fp32_units=()) -> dict:
    """Each segment to dynamic INT8, the nodes of ``fp32_units`` left FP32: a segment's graph
    numbers its own layers from 0, so its ``layer.J`` is the model's ``layer.(first + J)``."""
    from compressor.export.int8 import quantize_dynamic_onnx
    from compressor.core.presets import resolve_preset
    from compressor.export.int8 import quantizable_units

    preset = resolve_preset(preset_name)
    found = {}
    for seg in described:
        file = os.path.join(folder, seg["file"])
        first = seg["layers"][0] - 1
        excluded = []
        for name, nodes in (quantizable_units(file, "layer").items() if fp32_units else ()):
            unit = f"layer.{first + int(name.split('.')[1])}" if name.startswith("layer.") else name
            if unit in fp32_units:
                excluded += nodes
                found.setdefault(unit, []).append(seg["file"])
        staged = file + ".int8"
        quantize_dynamic_onnx(file, staged, preset, nodes_to_exclude=excluded)
        os.replace(staged, file)
        seg["fp32_nodes"] = len(excluded)
    missing = [u for u in fp32_units if u not in found]
    if missing:
        raise CompressorError(f"fp32_units {missing}: no quantisable node of the segments belongs to them")
    return {"method": "dynamic" if not fp32_units else "mixed", "backend": "onnxruntime",
            "preset": preset.to_dict(), "fp32_units": sorted(found, key=_unit_order)}


def _unit_order(unit: str):
    return (0, -1) if unit == "embeddings" else (1, int(unit.split(".")[1]))


def chain_parity(model: EarlyExitModel, tokenizer, folder: str, examples, max_length: int) -> dict:
    """The chained segments in ``folder`` against the PyTorch early-exit model, one sentence at a
    time: share of identical predictions and exits, and the largest logit difference."""
    import torch

    from compressor.core.batches import encode

    from compressor.exit.runtime import SegmentChain

    chain = SegmentChain(folder)
    items = encode(tokenizer, examples, max_length, model.config)
    same_pred = same_exit = 0
    diff = 0.0
    for item in items:
        ids = torch.tensor([item["input_ids"]])
        inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        if "token_type_ids" in item:
            inputs["token_type_ids"] = torch.tensor([item["token_type_ids"]])
        with torch.no_grad():
            out = model(**inputs)
        t_logits, t_exit = out.logits.float().numpy(), int(out.exit_index[0])
        feed = {k: v.numpy().astype(np.int64) for k, v in inputs.items() if k in chain.inputs}
        o_logits, o_exit = chain.run(feed, exits=True)
        if model.regression:
            same_pred += abs(float(t_logits[0, 0]) - float(o_logits[0, 0])) < 1e-3
        else:
            same_pred += int(t_logits.argmax(-1)[0] == o_logits.argmax(-1)[0])
        same_exit += int(t_exit == int(o_exit[0]))
        diff = max(diff, float(np.abs(t_logits - o_logits).max()))
    n = max(1, len(items))
    return {"examples": len(items), "identical_predictions": round(same_pred / n, 6),
            "identical_exits": round(same_exit / n, 6), "max_abs_logit_diff": diff}
