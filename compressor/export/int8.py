"""INT8 and FP16 for ONNX models, with ONNX Runtime's quantiser.

Input and output are export folders (``model.onnx`` beside the tokenizer,
``config.json`` and ``manifest.json``): the output keeps every file of the
input and replaces ``model.onnx``, so anything that runs an export runs a
quantised one.

We call ``onnxruntime.quantization`` directly rather than optimum's
``ORTQuantizer``: the latter gives no way to pass ``extra_options``, and
ONNX Runtime >= 1.20 then fails on graphs holding fused contrib operators
(``Attention``, ``SkipLayerNormalization``: "Unable to find data type for
weight_name ...") unless ``DefaultTensorType`` is set. Static calibration also
needs our own data reader over the task's training rows.
"""
from __future__ import annotations

import logging
import os
import re
import random
import shutil
import sys
import tempfile
from collections import OrderedDict
from typing import Dict, List, Optional, Sequence

import numpy as np

from compressor.core.arch import ARCHITECTURES
from compressor.core.errors import CompressorError
from compressor.core.io import atomic_dir, read_json, write_json
from compressor.core.presets import HardwarePreset

class _DropPreprocessAdvice(logging.Filter):
    """ONNX Runtime's quantiser logs this on every call; we type the graph ourselves (_model_proto)."""

    def filter(self, record):
        return not str(record.msg).startswith("Please consider")


logging.getLogger().addFilter(_DropPreprocessAdvice())

ONNX_FILE = "model.onnx"
MANIFEST = "manifest.json"
CALIBRATION_METHODS = ("minmax", "entropy", "percentile")


# -- export folders -----------------------------------------------------------

def onnx_file(folder: str) -> str:
    """The ``model.onnx`` of an export folder, or a clear error."""
    path = os.path.join(folder, ONNX_FILE)
    if not os.path.isfile(path):
        raise CompressorError(f"{folder} holds no {ONNX_FILE}: not an ONNX export folder "
                              "(export one with `compressor export`)")
    return path


def ensure_export(model_dir: str, work_dir: str) -> str:
    """``model_dir`` if it is an export folder; else export the checkpoint into ``work_dir``."""
    try:
        from compressor.export.onnx import export_onnx, is_export
    except ImportError:
        raise CompressorError(f"{model_dir} is a PyTorch checkpoint and this install has no "
                              "ONNX exporter (export.export_onnx); export it first") from None
    if is_export(model_dir):
        return model_dir
    export_onnx(model_dir, work_dir, parity=False)  # the source model is scored anyway
    return work_dir


def quantization_of(folder: str) -> dict:
    """What ``compressor quantize`` recorded in an export folder's manifest ({} for an FP32 export)."""
    path = os.path.join(folder, MANIFEST)
    from compressor.export.runtime import read_manifest

    return (read_manifest(path).get("quantization") or {}) if os.path.isfile(path) else {}


def write_export(src_folder: str, out_dir: str, write_model, quantization: dict) -> str:
    """A new export folder: every file of ``src_folder`` but ``model.onnx``, which ``write_model(path)`` writes.

    Only plain files of the folder itself are copied: a symbolic link (to a file anywhere) is
    left out with a line, and so are the FP32 graph's external-data files, checked before
    anything is read."""
    from compressor.export.onnx import external_data_files

    graph_data = set(external_data_files(onnx_file(src_folder)))
    with atomic_dir(out_dir) as tmp:
        for name in os.listdir(src_folder):
            # parity.json compares the FP32 graph with PyTorch: it does not describe this one
            if name in (ONNX_FILE, "parity.json") or name.startswith(".") or name.endswith(".onnx") \
                    or name in graph_data:
                continue
            path = os.path.join(src_folder, name)
            if os.path.islink(path):
                print(f"warning: {path} is a symbolic link: not copied into {out_dir}", file=sys.stderr)
            elif os.path.isfile(path):
                shutil.copy2(path, os.path.join(tmp, name))
        write_model(os.path.join(tmp, ONNX_FILE))
        manifest_path = os.path.join(tmp, MANIFEST)
        manifest = read_json(manifest_path) if os.path.isfile(manifest_path) else {}
        manifest["quantization"] = quantization
        manifest["precision"] = _precision(quantization.get("method"))
        manifest["onnx_size_bytes"] = os.path.getsize(os.path.join(tmp, ONNX_FILE))
        write_json(manifest_path, manifest)
        from compressor.export.onnx import write_export_card

        write_export_card(tmp, out_dir, manifest)
    return out_dir


def _precision(method) -> str:
    return {"static": "int8-static", "fp16": "fp16"}.get(method, "int8-dynamic")


# -- quantisation -----------------------------------------------------------

def _extra_options(preset: HardwarePreset, **more) -> dict:
    import onnx

    return {"DefaultTensorType": onnx.TensorProto.FLOAT, "WeightSymmetric": preset.symmetric_weights,
            "ActivationSymmetric": preset.symmetric_activations, **more}


def symbolic_shapes(model):
    """``model`` with every tensor typed by ONNX Runtime's symbolic shape inference. When that
    inference stops short it writes its partial graph, ``sym_shape_infer_temp.onnx`` and
    external-data files named by UUIDs, into the working folder before raising: it runs in a
    temporary folder here, so nothing lands in the user's folder (a checkout collected dozens)."""
    import tempfile

    # A skipped optional output has the empty name (the deciding layers' MultiHeadAttention gives
    # its scores, output 3, and not outputs 1-2); onnxruntime 1.30's inference looks every output
    # up by name and stops there (KeyError ''). Named while it runs, emptied again after.
    skipped = 0
    for node in model.graph.node:
        for i, name in enumerate(node.output):
            if not name:
                node.output[i] = f"{_SKIPPED}{skipped}"
                skipped += 1
    here = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="compressor-shapes-") as scratch:
        os.chdir(scratch)
        try:
            typed = _shape_inference().infer_shapes(model, auto_merge=True)
        finally:
            os.chdir(here)
            if skipped:
                _unname_skipped(model)
    if skipped:
        _unname_skipped(typed)
    return typed


_SKIPPED = "compressor_skipped_output_"


def _unname_skipped(model) -> None:
    """The outputs ``symbolic_shapes`` named for its inference empty again, their types dropped."""
    for node in model.graph.node:
        for i, name in enumerate(node.output):
            if name.startswith(_SKIPPED):
                node.output[i] = ""
    kept = [v for v in model.graph.value_info if not v.name.startswith(_SKIPPED)]
    if len(kept) != len(model.graph.value_info):
        del model.graph.value_info[:]
        model.graph.value_info.extend(kept)


def _shape_inference():
    """ONNX Runtime's ``SymbolicShapeInference`` that also types ``MultiHeadAttention``'s fourth
    output ``qk`` ``[batch, heads, sequence, kv sequence]`` (token pruning's deciding layers read
    it, ``export.mpnet_fusion``); onnxruntime's own leaves it untyped and stops short there."""
    from onnx import helper
    from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference, get_attribute

    class Shapes(SymbolicShapeInference):
        def _infer_MultiHeadAttention(self, node):   # onnxruntime's dispatch name
            super()._infer_MultiHeadAttention(node)
            if len(node.output) > 3 and node.output[3] and node.output[0] in self.known_vi_:
                query, key = self._get_shape(node, 0), self._get_shape(node, 1)
                if query and key and len(query) == 3 and len(key) == 3:
                    dtype = self.known_vi_[node.output[0]].type.tensor_type.elem_type
                    shape = [query[0], get_attribute(node, "num_heads"), query[1], key[1]]
                    self.known_vi_[node.output[3]].CopyFrom(
                        helper.make_tensor_value_info(node.output[3], dtype, shape))

        @staticmethod
        def infer_shapes(in_mp, int_max=2**31 - 1, auto_merge=False, guess_output_rank=False, verbose=0):
            # onnxruntime's own, with this class (theirs names SymbolicShapeInference itself)
            import onnx

            inference = Shapes(int_max, auto_merge, guess_output_rank, verbose)
            done = False
            inference._preprocess(in_mp)
            while inference.run_:
                done = inference._infer_impl()
            inference._update_output_from_vi()
            if not done:
                onnx.save_model(inference.out_mp_, "sym_shape_infer_temp.onnx", save_as_external_data=True)
                raise Exception("Incomplete symbolic shape inference")
            return inference.out_mp_

    return Shapes


def _model_proto(path: str, optimize: bool):
    """The graph to quantise: as exported, or after ONNX Runtime's BERT fusions; with every tensor typed.

    ONNX's own shape inference cannot type the outputs of fused contrib
    operators (Attention, SkipLayerNormalization), and the calibrator then
    skips every tensor behind them; ONNX Runtime's symbolic inference can.
    """
    import onnx
    import onnx.helper

    from compressor.export.onnx import load_graph

    model = load_graph(path)
    if optimize:
        from onnxruntime.transformers.optimizer import optimize_model

        # num_heads/hidden_size 0: read off the graph; fusions only, so the file stays portable
        model = optimize_model(path, model_type="bert", num_heads=0, hidden_size=0, opt_level=0).model
        if not any(o.domain == "com.microsoft" for o in model.opset_import):
            model.opset_import.append(onnx.helper.make_opsetid("com.microsoft", 1))
    return _typed(model, os.path.basename(path))


def _typed(model, what: str):
    """``model`` typed by ``symbolic_shapes``, or as it is when that inference stops short (an
    operator it does not know): then the calibrator types what ONNX infers, tensors behind that
    operator are not quantised, and static INT8 may not build at all. That is said on stderr with
    the reason, which is what the next person needs to see."""
    try:
        return symbolic_shapes(model)
    except Exception as e:
        reason = str(e).splitlines()[0] if str(e) else ""
        print(f"note: ONNX Runtime's symbolic shape inference stopped on {what} ({type(e).__name__}: {reason}); "
              f"tensors it did not type are not quantised", file=sys.stderr)
        return model


def quantize_dynamic_onnx(src: str, dst: str, preset: HardwarePreset, optimize: bool = False,
                          nodes_to_quantize: Optional[Sequence[str]] = None,
                          nodes_to_exclude: Optional[Sequence[str]] = None,
                          op_types: Optional[Sequence[str]] = None) -> None:
    """Weights to INT8 once; activations quantised at run time from their observed range."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    model = _model_proto(src, optimize)
    quantize_dynamic(model, dst, per_channel=preset.per_channel, reduce_range=preset.reduce_range,
                     weight_type=QuantType.QInt8 if preset.symmetric_weights else QuantType.QUInt8,
                     nodes_to_quantize=list(nodes_to_quantize or []) or None,
                     nodes_to_exclude=list(nodes_to_exclude or []),
                     op_types_to_quantize=list(op_types) if op_types else None,
                     extra_options=_extra_options(preset))
    check_attention_inputs_kept(model, dst)


def check_attention_inputs_kept(source, dst: str) -> None:
    """Refuse a quantised graph in which an ``Attention`` node lost inputs as a ``QAttention``.

    ONNX Runtime's dynamic quantiser turns ``Attention`` into ``QAttention``, which has no
    ``attention_bias`` input (5) nor ``past_sequence_length`` (6): it drops them without a word
    and the graph computes something else (an additive bias such as MPNet's relative position
    bias, or a mask folded into it, is gone). ``source`` is the graph that was quantised.
    """
    from compressor.export.onnx import load_graph

    lost = {tuple(n.output): n.name for n in source.graph.node
            if n.op_type == "Attention" and any(n.input[5:])}
    if not lost:
        return
    dropped = [lost[tuple(n.output)] for n in load_graph(dst, load_external_data=False).graph.node
               if n.op_type == "QAttention" and tuple(n.output) in lost]
    if dropped:
        os.remove(dst)
        raise CompressorError(
            f"dynamic INT8 would turn {len(dropped)} Attention node(s) with an attention bias "
            f"({', '.join(dropped[:3])}{', ...' if len(dropped) > 3 else ''}) into QAttention, which "
            "drops the bias and computes something else; refused (exclude those nodes from "
            "quantisation, or export with MultiHeadAttention and separate Q/K/V MatMuls)")


class _Reader:
    """ONNX Runtime's calibration data reader over tokenised sentences, one per batch (no padding)."""

    def __init__(self, feeds: List[Dict[str, np.ndarray]]):
        self._feeds = feeds
        self._it = iter(feeds)

    def get_next(self):
        return next(self._it, None)

    def rewind(self):
        self._it = iter(self._feeds)


def calibration_feeds(predictor, examples: Sequence, samples: int, seed: int = 0) -> List[Dict[str, np.ndarray]]:
    """Model inputs for ``samples`` rows drawn at random, one sentence each, as ``predictor``
    (an ``compressor.export.runtime.Predictor``) encodes them when the graph is deployed and scored."""
    from compressor.export.onnx import example_texts

    rows = list(examples)
    if not rows:
        raise CompressorError("static quantisation needs training rows to calibrate on; none given")
    picked = random.Random(seed).sample(rows, min(samples, len(rows)))
    return [predictor.encode([text]) for text in example_texts(picked)]


def _same_width(feeds: List[Dict[str, np.ndarray]], pad_id: int) -> List[Dict[str, np.ndarray]]:
    """Pad every calibration feed to the longest one.

    ONNX Runtime's histogram calibrators (entropy, percentile) stack each
    tensor's outputs over all feeds, so the feeds must share one shape; the
    masked padding adds a few [PAD] activations to the histograms.
    """
    width = max(f["input_ids"].shape[1] for f in feeds)
    padded = []
    for feed in feeds:
        extra = width - feed["input_ids"].shape[1]
        padded.append({k: np.pad(v, ((0, 0), (0, extra)),
                                 constant_values=pad_id if k == "input_ids" else 0)
                       for k, v in feed.items()})
    return padded


def quantize_static_onnx(src: str, dst: str, preset: HardwarePreset, feeds: List[Dict[str, np.ndarray]],
                         method: str = "minmax", percentile: float = 99.999,
                         nodes_to_exclude: Optional[Sequence[str]] = None,
                         op_types: Sequence[str] = ("MatMul", "Gemm"), optimize: bool = False,
                         pad_id: int = 0, smoothquant_alpha: float = 0.0,
                         quantize_outputs: bool = False, embeddings_int8: bool = False) -> dict:
    """QDQ INT8 with activation ranges fixed beforehand from calibration rows.

    Only matrix products are quantised by default: quantising LayerNorm,
    softmax or the embedding gather too costs accuracy and saves little time.
    Only their inputs: their outputs stay FP32 (ONNX Runtime's QDQ quantiser
    would also put a QuantizeLinear on each MatMul's output, one per-tensor scale
    for what goes on into the bias, GELU, attention and the residual Add; an
    encoder's FFN output carries channels a thousand times its median, so that
    scale rounds every other channel of the residual branch to zero: MPNet-base
    agreed with FP32 on 62-81% of rows). ``smoothquant_alpha`` > 0 first moves
    the activations' outlier channels into the weights (``smooth_matmul_inputs``).
    ``quantize_outputs`` restores ONNX Runtime's placement (for comparison only).
    ``embeddings_int8`` then stores the word-embedding table as INT8 (``int8_embedding_tables``),
    as dynamic INT8 does: otherwise the table stays FP32 and is most of a small model's file.
    Returns what was done (``{"smoothed": ...}`` when smoothing ran, ``{"embeddings_int8": ...}``).
    """
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    if method not in CALIBRATION_METHODS:
        raise CompressorError(f"unknown calibration method '{method}'; use one of "
                              f"{', '.join(CALIBRATION_METHODS)}")
    calibrate = {"minmax": CalibrationMethod.MinMax, "entropy": CalibrationMethod.Entropy,
                 "percentile": CalibrationMethod.Percentile}[method]
    extra = _extra_options(preset, CalibTensorRangeSymmetric=preset.symmetric_activations,
                           OpTypesToExcludeOutputQuantization=[] if quantize_outputs else list(op_types))
    if not 0 <= smoothquant_alpha < 1:
        raise CompressorError(f"smoothquant_alpha must be in [0, 1), got {smoothquant_alpha}")
    done: dict = {}
    with tempfile.TemporaryDirectory(prefix="compressor-calib-") as tmp:
        model = _model_proto(src, optimize)
        if smoothquant_alpha:
            model, done["smoothed"] = smooth_matmul_inputs(model, feeds, smoothquant_alpha,
                                                          set(nodes_to_exclude or ()), tmp)
        if method != "minmax":
            feeds = _same_width(feeds, pad_id)
        if method == "percentile":
            extra["CalibPercentile"] = percentile
        untyped = _untyped_products(model, op_types, set(nodes_to_exclude or ()))
        if untyped:   # no range can be calibrated for their input: kept FP32 rather than no graph at all
            done["untyped_kept_fp32"] = untyped
            print(f"note: static INT8 keeps {len(untyped)} of the graph's products FP32: their input has no "
                  f"type to calibrate ({', '.join(untyped[:3])}{', ...' if len(untyped) > 3 else ''})",
                  file=sys.stderr)
            nodes_to_exclude = list(nodes_to_exclude or []) + untyped
        # The calibrator writes an augmented copy of the graph: keep it out of the user's folders.
        staged = os.path.join(tmp, "model.onnx")
        import onnx

        onnx.save(model, staged)
        cwd = os.getcwd()
        os.chdir(tmp)
        try:
            quantize_static(staged, dst, _Reader(feeds), quant_format=QuantFormat.QDQ,
                            op_types_to_quantize=list(op_types), per_channel=preset.per_channel,
                            reduce_range=preset.reduce_range,
                            activation_type=QuantType.QInt8 if preset.symmetric_activations
                            else QuantType.QUInt8,
                            weight_type=QuantType.QInt8 if preset.symmetric_weights else QuantType.QUInt8,
                            nodes_to_exclude=list(nodes_to_exclude or []),
                            calibrate_method=calibrate, extra_options=extra)
        finally:
            os.chdir(cwd)
    if embeddings_int8:
        import onnx

        quantized = onnx.load(dst)
        tables = int8_embedding_tables(quantized, set(nodes_to_exclude or ()))
        if tables:
            onnx.save(quantized, dst)
            done["embeddings_int8"] = tables
    return done


def _consumer_counts(graph) -> Dict[str, int]:
    """How many node inputs read each tensor: an initializer read once can be rewritten in place."""
    uses: Dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            uses[name] = uses.get(name, 0) + 1
    return uses


def int8_embedding_tables(model, exclude: set = frozenset(), min_rows: int = 1000) -> List[dict]:
    """Weight-only INT8 of the graph's embedding tables, in place: each ``Gather`` (not in
    ``exclude``) whose data is a 2-D FP32 initializer of at least ``min_rows`` rows, used by no
    other node, gathers from an INT8 copy instead (symmetric, one scale per row: ``max|row| / 127``)
    and multiplies the gathered rows by their scales (gathered with the same indices). The
    activations stay FP32; only the table's storage and its rounding change (word embeddings:
    4x smaller; the position tables of a few hundred rows are left as they are). Returns one
    record per table: its name, rows and the largest absolute rounding error."""
    from onnx import TensorProto, helper, numpy_helper

    graph = model.graph
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
    inits = {i.name: i for i in graph.initializer}
    uses = _consumer_counts(graph)
    done, nodes = [], []
    for node in graph.node:
        table = inits.get(node.input[0]) if node.op_type == "Gather" and node.name not in exclude else None
        if table is None or len(table.dims) != 2 or table.dims[0] < min_rows or uses[table.name] != 1 \
                or table.data_type != TensorProto.FLOAT or any(a.name == "axis" and a.i != 0 for a in node.attribute):
            nodes.append(node)
            continue
        weights = numpy_helper.to_array(table).astype(np.float32)
        scale = np.abs(weights).max(axis=1) / 127.0
        scale[scale == 0] = 1.0
        q = np.clip(np.round(weights / scale[:, None]), -127, 127).astype(np.int8)
        base = table.name
        graph.initializer.remove(table)
        graph.initializer.extend([numpy_helper.from_array(q, base + "_int8"),
                                  numpy_helper.from_array(scale.astype(np.float32), base + "_scale"),
                                  numpy_helper.from_array(np.array([-1], dtype=np.int64), base + "_last_axis")])
        ids, out, name = node.input[1], node.output[0], node.name or base
        nodes += [helper.make_node("Gather", [base + "_int8", ids], [out + "_int8"], name=name + "_int8"),
                  helper.make_node("Cast", [out + "_int8"], [out + "_float"], name=name + "_cast", to=TensorProto.FLOAT),
                  helper.make_node("Gather", [base + "_scale", ids], [out + "_rowscale"], name=name + "_scale"),
                  helper.make_node("Unsqueeze", [out + "_rowscale", base + "_last_axis"], [out + "_rowscale2"],
                                   name=name + "_unsqueeze") if opset >= 13 else
                  helper.make_node("Unsqueeze", [out + "_rowscale"], [out + "_rowscale2"], name=name + "_unsqueeze",
                                   axes=[-1]),
                  helper.make_node("Mul", [out + "_float", out + "_rowscale2"], [out], name=name + "_dequantize")]
        done.append({"table": base, "rows": int(weights.shape[0]),
                     "max_abs_error": round(float(np.abs(q * scale[:, None] - weights).max()), 6)})
    if done:
        del graph.node[:]
        graph.node.extend(nodes)
    return done


def _untyped_products(model, op_types: Sequence[str], skip: set) -> List[str]:
    """The ``op_types`` nodes (not in ``skip``) whose activation input has no type after ONNX's own
    shape inference, as the calibrator will see the graph: it records no range for such a tensor,
    and the quantiser then stops at the node's bias ("Unable to get valid quantization scale").
    Empty when the graph is fully typed (``symbolic_shapes`` succeeded)."""
    import onnx

    def untyped(m) -> List[str]:
        g = m.graph
        typed = {v.name for v in [*g.value_info, *g.input, *g.output]
                 if v.type.tensor_type.elem_type} | {i.name for i in g.initializer}
        return [n.name for n in g.node if n.op_type in op_types and n.name not in skip
                and n.input and n.input[0] not in typed]

    if not untyped(model):   # typed already (symbolic_shapes succeeded): no copy through ONNX's inference
        return []
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:   # ONNX's own inference refuses the graph: the calibrator's will too
        inferred = model
    return untyped(inferred)


def smooth_matmul_inputs(model, feeds: List[Dict[str, np.ndarray]], alpha: float,
                         exclude: set = frozenset(), scratch: Optional[str] = None):
    """SmoothQuant (Xiao et al., 2023) on an ONNX graph: for each activation ``X`` that feeds
    MatMuls with a 2-D weight ``W`` (Q, K and V share theirs), channel ``j`` is divided by
    ``s_j = max|X_j|^alpha / max|W_j,:|^(1 - alpha)`` (one ``Mul`` before those MatMuls) and
    row ``j`` of each ``W`` multiplied by it: the product is the same in FP32, and the few
    channels an encoder's LayerNorm and GELU outputs carry at 10-100x the others (MPNet-base:
    channel 555 at -66 beside a median of 0.27) no longer set the tensor's one INT8 scale;
    the weights, quantised per output channel, take the difference. ``max|X_j|`` comes from
    running the FP32 graph on ``feeds``. Returns the rewritten graph (typed again) and a
    record: how many activations and MatMuls were smoothed, and alpha."""
    import onnx
    from onnx import numpy_helper

    from compressor.export.runtime import Predictor

    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    uses = _consumer_counts(graph)
    groups: "OrderedDict[str, list]" = OrderedDict()
    for node in graph.node:
        if node.op_type == "MatMul" and node.name not in exclude and node.input[0] not in inits \
                and node.input[1] in inits and len(inits[node.input[1]].dims) == 2:
            groups.setdefault(node.input[0], []).append(node)
    if not groups:
        return model, {"alpha": alpha, "activations": 0, "matmuls": 0}
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    known = {o.name for o in probe.graph.output}
    for name in groups:
        if name not in known:
            probe.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    with tempfile.TemporaryDirectory(prefix="compressor-smooth-", dir=scratch) as tmp:
        path = os.path.join(tmp, "probe.onnx")
        onnx.save(probe, path)
        session = Predictor._session(path, None, None)
        outputs = [o.name for o in session.get_outputs()]
        wanted = {i.name for i in session.get_inputs()}
        amax: Dict[str, np.ndarray] = {}
        for feed in feeds:
            values = dict(zip(outputs, session.run(None, {k: v for k, v in feed.items() if k in wanted})))
            for name in groups:
                x = np.abs(values[name]).reshape(-1, values[name].shape[-1]).max(0)
                amax[name] = np.maximum(amax[name], x) if name in amax else x
        del session
    weights = {}
    for name, nodes in groups.items():
        w = np.max([np.abs(_weight(inits, n)).max(1) for n in nodes], axis=0)
        a = amax[name].astype(np.float64)
        scale = np.where((a > 0) & (w > 0), a ** alpha / np.maximum(w, 1e-8) ** (1 - alpha), 1.0)
        scale = np.clip(scale, 1e-5, 1e5)
        inverse = numpy_helper.from_array((1.0 / scale).astype(np.float32), f"{name}/smooth_inverse")
        graph.initializer.append(inverse)
        smoothed = f"{name}/smoothed"
        first = min(list(graph.node).index(n) for n in nodes)
        graph.node.insert(first, onnx.helper.make_node("Mul", [name, inverse.name], [smoothed],
                                                       name=f"{name}/SmoothQuant_Mul"))
        for node in nodes:
            node.input[0] = smoothed
            weight = node.input[1]
            new = (_weight(inits, node) * scale[:, None].astype(np.float32)).astype(np.float32)
            if uses.get(weight, 0) > 1:   # shared with a node outside this group: a copy of its own
                weight = f"{weight}/smoothed/{node.name}"
                node.input[1] = weight
            weights[weight] = numpy_helper.from_array(new, weight)
    for weight, tensor in weights.items():
        if weight in inits:
            inits[weight].CopyFrom(tensor)
        else:
            graph.initializer.append(tensor)
    model = _typed(model, "the smoothed graph")
    return model, {"alpha": alpha, "activations": len(groups), "matmuls": sum(map(len, groups.values()))}


def _weight(inits: dict, node) -> np.ndarray:
    from onnx import numpy_helper

    return numpy_helper.to_array(inits[node.input[1]]).astype(np.float32)


PARITY_SENTENCES = 64
# A quantised graph is refused when it is off on both counts: its predictions agree with FP32's
# on fewer than PARITY_MIN_AGREEMENT of the sentences FP32 is surest of (margin at or above the
# median; near-ties are left out, INT8 noise flips them in a sound graph) and its largest logit
# difference exceeds PARITY_MAX_RELATIVE of FP32's largest logit. A coarse net: a sound graph of
# a model whose logits hardly vary (an untrained head) misses one count, not both; the exact
# guard against a known wrong rewrite is structural (check_attention_inputs_kept).
PARITY_MIN_AGREEMENT = 0.75
PARITY_MAX_RELATIVE = 0.75


def parity_vs_fp32(fp32_folder: str, folder: str, examples=None, threads: Optional[int] = None) -> dict:
    """The quantised graph of ``folder`` against the FP32 graph of ``fp32_folder``, one sentence at a
    time (as both are scored and deployed), on up to ``PARITY_SENTENCES`` ``examples`` (task
    examples; a few fixed sentences when there are none). Refused (``CompressorError``) when its
    predictions agree with FP32's on fewer than ``PARITY_MIN_AGREEMENT`` of the sentences FP32 is
    surest of (for regression: values within 5% of FP32's largest) and its largest logit difference
    is more than ``PARITY_MAX_RELATIVE`` of FP32's largest logit."""
    from compressor.export.onnx import example_texts
    from compressor.export.runtime import Predictor

    texts = example_texts(list(examples)[:PARITY_SENTENCES]) if examples else list(_PARITY_TEXTS)
    reference = Predictor(fp32_folder, threads=threads).logits(texts, batch_size=1)
    logits = Predictor(folder, threads=threads).logits(texts, batch_size=1)
    diff = np.abs(reference - logits)
    scale = float(np.abs(reference).max()) or 1.0
    if reference.shape[-1] == 1:
        same = diff[:, 0] <= 0.05 * scale
        sure = np.ones(len(texts), bool)
    else:
        same = reference.argmax(-1) == logits.argmax(-1)
        top = np.sort(reference, -1)
        margin = top[:, -1] - top[:, -2]
        sure = margin >= np.median(margin)
    agreement = float(np.mean(same[sure]))
    check = {"examples": len(texts), "identical_predictions": round(float(np.mean(same)), 6),
             "identical_predictions_where_sure": round(agreement, 6), "sure": int(sure.sum()),
             "max_abs_logit_diff": float(diff.max()), "relative_max_diff": round(float(diff.max()) / scale, 6),
             "refused_when": {"identical_predictions_where_sure_below": PARITY_MIN_AGREEMENT,
                              "relative_max_diff_above": PARITY_MAX_RELATIVE}}
    if agreement < PARITY_MIN_AGREEMENT and check["relative_max_diff"] > PARITY_MAX_RELATIVE:
        raise CompressorError(
            f"the quantised graph agrees with FP32 on {100 * agreement:.1f}% of the {int(sure.sum())} "
            f"sentences FP32 is surest of, its logits differ by up to {check['relative_max_diff']:.2f} of "
            "FP32's largest: "
            "it computes something else; refused")
    return check


_PARITY_TEXTS = ("a gripping , funny film", "flat , dull and lifeless from start to end",
                 "the acting is superb but the plot never takes off", "an utter waste of time",
                 "one of the best films of the year", "it is neither good nor bad , merely long")


def convert_fp16_onnx(src: str, dst: str) -> None:
    """FP16 weights and arithmetic for GPUs; inputs and outputs keep their types."""
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    from compressor.export.onnx import load_graph

    model = convert_float_to_float16(load_graph(src), keep_io_types=True)
    onnx.save(model, dst)


def count_weights(path: str) -> int:
    """Elements of the graph's floating-point initializers: the model's parameters."""
    import onnx

    from compressor.export.onnx import load_graph

    model = load_graph(path, load_external_data=False)
    floats = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)
    return int(sum(np.prod(i.dims) for i in model.graph.initializer if i.data_type in floats))


# the ONNX operators ONNX Runtime's dynamic mode turns into integer ones, when a weight feeds them
QUANTIZABLE_OPS = ("MatMul", "Attention", "EmbedLayerNormalization", "Gather")
# node names follow module paths (/bert/encoder/layer.0/...): the registry says which parts
# hold the encoder layers and what the layer list is called
_CONTAINERS = {part for spec in ARCHITECTURES.values() for part in spec.layers.split(".")[:-1]}
_LAYER = re.compile(r"(?:%s)[._/](\d+)" % "|".join(
    sorted({spec.layers.rpartition(".")[2] for spec in ARCHITECTURES.values()}, key=len, reverse=True)))


def quantizable_units(onnx_path: str, granularity: str = "matrix") -> "OrderedDict[str, List[str]]":
    """Unit name -> ONNX node names; a unit is one weight matrix or one encoder layer."""
    from compressor.export.onnx import load_graph

    if granularity not in ("matrix", "layer"):
        raise CompressorError(f"granularity must be matrix or layer, got {granularity!r}")
    model = load_graph(onnx_path, load_external_data=False)
    weights = {i.name for i in model.graph.initializer if len(i.dims) == 2}
    units: "OrderedDict[str, List[str]]" = OrderedDict()
    attention_index = 0
    for node in model.graph.node:
        if node.op_type not in QUANTIZABLE_OPS or not any(i in weights for i in node.input):
            continue
        if node.op_type == "Attention":  # fused Q/K/V: named Attention_<n>, in layer order
            layer, what = attention_index, "attention.qkv"
            attention_index += 1
        else:
            match = _LAYER.search(node.name)
            layer = int(match.group(1)) if match else None
            what = _short(node.name)
        if node.op_type in ("EmbedLayerNormalization", "Gather"):
            layer, what = None, "embeddings"
        if granularity == "layer":
            name = f"layer.{layer}" if layer is not None else what
        else:
            name = f"layer.{layer}.{what}" if layer is not None and not _LAYER.match(what) else what
        units.setdefault(name, []).append(node.name)
    if not units:
        raise CompressorError(f"{onnx_path}: no weight matrices that ONNX Runtime can quantise")
    return units


def _short(node_name: str) -> str:
    """'/bert/encoder/layer.0/attention/output/dense/MatMul' -> 'layer.0.attention.output.dense'."""
    parts = [p for p in node_name.strip("/").split("/")[:-1] if p not in _CONTAINERS]
    return ".".join(parts) or node_name
