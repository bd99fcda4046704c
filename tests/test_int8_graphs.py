"""What INT8 graphs are made of (issue 32 item 3): a mixed graph keeps the export's fusions (the
units kept FP32 stay the fused operators they were, the others become onnxruntime's fused integer
operators, nothing is wrapped in Quantize/DequantizeLinear) with per-channel weights, so it costs
all-INT8 plus the kept units' FP32 share; static INT8 of an MPNet graph keeps per-channel weights."""
import collections
from dataclasses import replace

import onnx
import pytest

from compressor.core.presets import resolve_preset
from compressor.export import int8 as ox


def _ops(path):
    return collections.Counter(n.op_type for n in onnx.load(path).graph.node)


def _weight_scales(path, op_types, scale_input):
    """(weight dims, scale dims) of every node of ``op_types`` whose weight is an initializer."""
    graph = onnx.load(path).graph
    init = {i.name: i for i in graph.initializer}
    return [(tuple(init[n.input[1]].dims), tuple(init[n.input[scale_input]].dims))
            for n in graph.node if n.op_type in op_types and n.input[1] in init]


@pytest.mark.integration
def test_a_mixed_graph_keeps_the_fusions_and_per_channel_weights(export_dir, tmp_path):
    src = ox.onnx_file(export_dir)
    fp32 = _ops(src)
    layers = ox.quantizable_units(src, "layer")
    # the residual LayerNorms fused, then written back as Add + LayerNormalization (the CPU's faster pair)
    assert fp32["Attention"] == 2 and fp32["LayerNormalization"] and fp32["BiasGelu"] == 2
    assert not fp32["SkipLayerNormalization"]
    preset = resolve_preset("avx512_vnni")
    every, mixed = str(tmp_path / "all.onnx"), str(tmp_path / "mixed.onnx")
    ox.quantize_dynamic_onnx(src, every, preset)
    ox.quantize_dynamic_onnx(src, mixed, preset, nodes_to_exclude=layers["layer.0"])
    all_ops, mixed_ops = _ops(every), _ops(mixed)
    # the kept layer: its fused Attention and its MatMuls, as in the FP32 graph
    kept = {n.name: n.op_type for n in onnx.load(mixed).graph.node if n.name in layers["layer.0"]}
    assert sorted(kept.values()) == ["Attention", "MatMul", "MatMul", "MatMul"]
    assert (mixed_ops["Attention"], mixed_ops["QAttention"]) == (1, 1) and all_ops["QAttention"] == 2
    assert all_ops["MatMulInteger"] - mixed_ops["MatMulInteger"] == 3
    # the fusions around them survive in both graphs; no activation is wrapped in
    # Quantize/DequantizeLinear (the only DequantizeLinear read constants: the embeddings'
    # LayerNorm weights of QEmbedLayerNormalization, folded when the session loads)
    for path, ops in ((every, all_ops), (mixed, mixed_ops)):
        assert ops["LayerNormalization"] == fp32["LayerNormalization"] and not ops["SkipLayerNormalization"]
        assert ops["BiasGelu"] == fp32["BiasGelu"]
        graph = onnx.load(path).graph
        constants = {i.name for i in graph.initializer}
        assert not ops["QuantizeLinear"]
        assert all(n.input[0] in constants for n in graph.node if n.op_type == "DequantizeLinear")
    assert mixed_ops["DequantizeLinear"] == all_ops["DequantizeLinear"]
    # per-channel weights (one scale per output column) for every INT8 product, both graphs
    for path in (every, mixed):
        matmuls = _weight_scales(path, ("MatMulInteger",), 3)    # input 3: the weight's zero point
        attention = _weight_scales(path, ("QAttention",), 4)      # input 4: the weight's scale
        assert matmuls and attention
        assert all(scale == (dims[1],) for dims, scale in matmuls + attention)
    per_tensor = str(tmp_path / "per-tensor.onnx")        # the check can tell: one scale per matrix
    ox.quantize_dynamic_onnx(src, per_tensor, replace(preset, per_channel=False))
    assert all(scale in ((), (1,)) for _, scale in _weight_scales(per_tensor, ("QAttention",), 4))


@pytest.mark.integration
def test_static_int8_of_an_mpnet_graph_keeps_per_channel_weights(mpnet_export, tmp_path):
    from compressor.export.runtime import Predictor

    predictor = Predictor(mpnet_export, threads=1)
    feeds = [predictor.encode([t]) for t in ("a fine film", "dull and long", "not bad at all")]
    src = ox.onnx_file(mpnet_export)
    matrices = ox.quantizable_units(src, "matrix")
    assert "layer.1.intermediate.dense" in matrices           # MPNet's products, named per matrix

    def weights(per_channel):
        out = str(tmp_path / f"static-{per_channel}.onnx")
        ox.quantize_static_onnx(src, out, replace(resolve_preset("avx512_vnni"), per_channel=per_channel), feeds,
                                pad_id=predictor.pad_id)
        graph = onnx.load(out).graph
        init = {i.name: i for i in graph.initializer}
        return [(tuple(init[n.input[0]].dims), tuple(init[n.input[1]].dims),
                 next((a.i for a in n.attribute if a.name == "axis"), 1))
                for n in graph.node
                if n.op_type == "DequantizeLinear" and n.input[0] in init and len(init[n.input[0]].dims) == 2]

    per_channel = weights(True)
    # every matrix of the encoder and the head (2 layers x 6, 2 in the head) is INT8, one scale per output
    assert len(per_channel) == 14
    assert all(scale == (dims[axis],) for dims, scale, axis in per_channel)
    assert all(scale in ((), (1,)) for _, scale, _ in weights(False))


@pytest.mark.unit
def test_symbolic_shape_inference_leaves_nothing_in_the_working_folder(tmp_path, monkeypatch):
    """When onnxruntime's symbolic inference stops short it saves sym_shape_infer_temp.onnx and
    UUID-named external data into the working folder (a checkout collected dozens): it runs in a
    scratch folder, and the working folder is the same again afterwards."""
    class StopsShort:   # as onnxruntime's SymbolicShapeInference (ox._shape_inference's base) does
        @staticmethod
        def infer_shapes(model, **kwargs):
            open("sym_shape_infer_temp.onnx", "w").close()
            raise Exception("Incomplete symbolic shape inference")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(ox, "_shape_inference", lambda: StopsShort)
    with pytest.raises(Exception, match="Incomplete"):
        ox.symbolic_shapes(onnx.ModelProto())
    assert list(tmp_path.iterdir()) == [] and str(tmp_path) == __import__("os").getcwd()
