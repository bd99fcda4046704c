"""Static INT8 that keeps FP32's predictions on MPNet (issue 32 item 3): matrix products are
quantised on their inputs only (ONNX Runtime's QDQ quantiser also put one per-tensor scale on
every MatMul's output, the residual branch included), and SmoothQuant can move activation outlier
channels into the weights first, exactly in FP32 (bench/results/static-int8-mpnet/)."""
import collections

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from compressor.core.errors import CompressorError
from compressor.core.presets import resolve_preset
from compressor.export import int8 as ox


def _graph(path):
    """x [1, 4, 8] with an outlier channel feeds two MatMuls (sharing x) and an Add (the residual)."""
    rng = np.random.default_rng(0)
    w1, w2 = rng.normal(size=(8, 6)).astype(np.float32), rng.normal(size=(8, 6)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["y1"], name="m1"),
             helper.make_node("MatMul", ["x", "w2"], ["y2"], name="m2"),
             helper.make_node("Add", ["x", "x"], ["r"], name="residual")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8])],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y1", "y2", "r")],
                              [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)
    return model


def _run(path, x):
    import onnxruntime as ort

    return ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})


@pytest.mark.unit
def test_smoothing_keeps_the_products_and_flattens_the_outlier_channel(tmp_path):
    model = _graph(str(tmp_path / "g.onnx"))
    rng = np.random.default_rng(1)
    feeds = []
    for _ in range(4):
        x = rng.normal(size=(1, 4, 8)).astype(np.float32)
        x[..., 3] *= 100          # the outlier channel
        feeds.append({"x": x})
    smoothed, record = ox.smooth_matmul_inputs(model, feeds, 0.8)
    assert record == {"alpha": 0.8, "activations": 1, "matmuls": 2}
    out = str(tmp_path / "s.onnx")
    onnx.save(smoothed, out)
    ops = collections.Counter(n.op_type for n in smoothed.graph.node)
    assert ops["Mul"] == 1                                    # one Mul for the two MatMuls sharing x
    residual = next(n for n in smoothed.graph.node if n.name == "residual")
    assert list(residual.input) == ["x", "x"]                 # the other reader still sees x itself
    x = feeds[0]["x"]
    for a, b in zip(_run(str(tmp_path / "g.onnx"), x), _run(out, x)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-3)   # the same products in FP32
    inverse = numpy_helper.to_array(next(i for i in smoothed.graph.initializer if i.name.endswith("smooth_inverse")))
    amax = np.abs(np.concatenate([f["x"] for f in feeds])).reshape(-1, 8).max(0)
    assert (amax * inverse).max() / (amax * inverse).min() < amax.max() / amax.min() / 10


@pytest.mark.unit
def test_smoothing_alpha_out_of_range_is_one_line(tmp_path):
    _graph(str(tmp_path / "g.onnx"))
    with pytest.raises(CompressorError, match="smoothquant_alpha"):
        ox.quantize_static_onnx(str(tmp_path / "g.onnx"), str(tmp_path / "q.onnx"), resolve_preset("avx2"),
                                [{"x": np.ones((1, 4, 8), np.float32)}], smoothquant_alpha=1.5)


def _quantised_outputs(path):
    """Outputs of matrix products that go through a QuantizeLinear."""
    graph = onnx.load(path).graph
    made_by = {o: n.op_type for n in graph.node for o in n.output}
    return [n.input[0] for n in graph.node if n.op_type == "QuantizeLinear" and made_by.get(n.input[0]) in ("MatMul", "Gemm")]


TEXTS = ("a fine film", "dull and long", "not bad at all", "the plot never takes off")


def _calibrated(export):
    """The export's graph, calibration feeds of four sentences, the VNNI preset and the pad id."""
    from compressor.export.runtime import Predictor

    predictor = Predictor(export, threads=1)
    return ox.onnx_file(export), [predictor.encode([t]) for t in TEXTS], resolve_preset("avx512_vnni"), predictor.pad_id


@pytest.mark.integration
def test_static_int8_quantises_matrix_inputs_not_outputs_and_smooths_on_request(mpnet_export, tmp_path):
    from compressor.export.runtime import Predictor

    src, feeds, preset, pad_id = _calibrated(mpnet_export)
    texts = TEXTS
    paths = {name: str(tmp_path / f"{name}.onnx") for name in ("old", "static", "smooth")}
    ox.quantize_static_onnx(src, paths["old"], preset, feeds, pad_id=pad_id, quantize_outputs=True)
    assert ox.quantize_static_onnx(src, paths["static"], preset, feeds, pad_id=pad_id) == {}
    done = ox.quantize_static_onnx(src, paths["smooth"], preset, feeds, pad_id=pad_id,
                                   smoothquant_alpha=0.8)
    assert _quantised_outputs(paths["old"])                   # what ONNX Runtime's placement does
    assert _quantised_outputs(paths["static"]) == [] and _quantised_outputs(paths["smooth"]) == []
    # 2 layers: Q/K/V's shared input, attention output, FFN input and output; the head's are Gemms
    assert done["smoothed"] == {"alpha": 0.8, "activations": 8, "matmuls": 12}
    ops = collections.Counter(n.op_type for n in onnx.load(paths["smooth"]).graph.node)
    assert ops["Mul"] - collections.Counter(n.op_type for n in onnx.load(src).graph.node)["Mul"] == 8
    reference = Predictor(mpnet_export, threads=1).logits(texts, batch_size=1)
    for path in paths.values():
        logits = Predictor(mpnet_export, threads=1, model_file=path).logits(texts, batch_size=1)
        assert logits.shape == reference.shape and np.isfinite(logits).all()


def _gelu_graph(path):
    """x feeds MatMul m0 directly and Gemm m1 (with a bias, as a classifier's dense layer) through
    com.microsoft's Gelu, an operator ONNX's own shape inference cannot type (ONNX Runtime runs it;
    its symbolic inference types it). Without a range for m1's input, ONNX Runtime's quantiser
    stops at m1's bias: "Unable to get valid quantization scale"."""
    rng = np.random.default_rng(0)
    w0, w1 = rng.normal(size=(8, 6)).astype(np.float32), rng.normal(size=(8, 6)).astype(np.float32)
    b1 = rng.normal(size=(6,)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["y0"], name="m0"),
             helper.make_node("Gelu", ["x"], ["g"], name="gelu", domain="com.microsoft"),
             helper.make_node("Gemm", ["g", "w1", "b1"], ["y1"], name="m1")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y0", "y1")],
                              [numpy_helper.from_array(w, n) for w, n in ((w0, "w0"), (w1, "w1"), (b1, "b1"))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    onnx.save(model, path)


@pytest.mark.unit
def test_a_product_whose_input_shape_inference_leaves_untyped_stays_fp32_and_the_graph_builds(
        tmp_path, monkeypatch, capsys):
    _gelu_graph(str(tmp_path / "g.onnx"))
    rng = np.random.default_rng(1)
    feeds = [{"x": rng.normal(size=(4, 8)).astype(np.float32)} for _ in range(4)]
    preset = resolve_preset("avx2")

    def quantised(name):
        done = ox.quantize_static_onnx(str(tmp_path / "g.onnx"), str(tmp_path / name), preset, feeds)
        model = onnx.load(str(tmp_path / name))
        feeding = {n.output[0] for n in model.graph.node if n.op_type == "DequantizeLinear"}
        return done, {n.name for n in model.graph.node if n.op_type in ("MatMul", "Gemm") and n.input[0] in feeding}

    done, int8 = quantised("typed.onnx")                      # ONNX Runtime's inference types Gelu
    assert "untyped_kept_fp32" not in done and int8 == {"m0", "m1"}

    def stops(model):
        raise RuntimeError("Incomplete symbolic shape inference")
    monkeypatch.setattr(ox, "symbolic_shapes", stops)
    done, int8 = quantised("untyped.onnx")
    assert done["untyped_kept_fp32"] == ["m1"] and int8 == {"m0"}
    err = capsys.readouterr().err
    assert "symbolic shape inference stopped on g.onnx (RuntimeError: Incomplete" in err
    assert "keeps 1 of the graph's products FP32" in err
    y0, y1 = _run(str(tmp_path / "untyped.onnx"), feeds[0]["x"])
    assert y0.shape == y1.shape == (4, 6)


@pytest.mark.unit
def test_skipped_optional_outputs_are_named_only_while_shapes_are_inferred():
    """onnxruntime 1.30's symbolic inference looked every output up by name and stopped at a
    skipped one (KeyError ''): the token graphs' MultiHeadAttention gives output 3, not 1-2. The
    typed graph and the caller's keep the empty names, and no type is left for the stand-ins."""
    nodes = [helper.make_node("LayerNormalization", ["x", "s", "b"], ["y", "", "inv"], name="ln", axis=-1),
             helper.make_node("Add", ["y", "inv"], ["z"], name="add")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.ones(4, np.float32), "s"),
                               numpy_helper.from_array(np.zeros(4, np.float32), "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    typed = ox.symbolic_shapes(model)
    for m in (model, typed):
        assert list(m.graph.node[0].output) == ["y", "", "inv"]
        assert not any(v.name.startswith(ox._SKIPPED) for v in m.graph.value_info)
    assert {v.name for v in typed.graph.value_info} >= {"y", "inv"}


def _gather_graph(rows=1200, shared=False):
    """ids [1, 5] gather rows of a [rows, 8] table; ``shared``: the table also feeds a MatMul."""
    rng = np.random.default_rng(2)
    table = rng.normal(size=(rows, 8)).astype(np.float32)
    table[7] = 0.0                                            # an all-zero row keeps a usable scale
    nodes = [helper.make_node("Gather", ["table", "ids"], ["emb"], name="word_embeddings")]
    outputs = [helper.make_tensor_value_info("emb", TensorProto.FLOAT, None)]
    if shared:
        nodes.append(helper.make_node("MatMul", ["emb", "table_t"], ["tied"], name="tied"))
        nodes.append(helper.make_node("Transpose", ["table"], ["table_t"], name="t"))
        outputs.append(helper.make_tensor_value_info("tied", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 5])], outputs,
                              [numpy_helper.from_array(table, "table")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), table


@pytest.mark.unit
def test_embedding_tables_are_stored_int8_one_scale_a_row_and_gathered_rows_stay_close(tmp_path):
    model, table = _gather_graph()
    done = ox.int8_embedding_tables(model)
    assert [d["table"] for d in done] == ["table"] and done[0]["rows"] == 1200
    stored = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    assert "table" not in stored and stored["table_int8"].dtype == np.int8 and stored["table_int8"].shape == (1200, 8)
    path = str(tmp_path / "q.onnx")
    onnx.save(model, path)
    import onnxruntime as ort

    ids = np.array([[0, 7, 5, 1199, 7]], dtype=np.int64)
    got, = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"ids": ids})
    assert got.shape == (1, 5, 8) and not got[0, 1].any()   # the zero row comes back zero
    err = np.abs(got[0] - table[ids[0]])
    assert (err <= np.abs(table[ids[0]]).max(axis=1, keepdims=True) / 254 + 1e-6).all()   # half a step a row
    assert 0 < done[0]["max_abs_error"] <= np.abs(table).max() / 254 + 1e-6
    # a table another node reads too (tied weights) and one of few rows (positions) stay FP32
    for model, _ in (_gather_graph(shared=True), _gather_graph(rows=514)):
        assert ox.int8_embedding_tables(model) == []
        assert any(i.name == "table" for i in model.graph.initializer)


@pytest.mark.integration
def test_static_int8_stores_the_word_embeddings_int8_when_asked(mpnet_export, tmp_path):
    from compressor.export.runtime import Predictor

    src, feeds, preset, pad_id = _calibrated(mpnet_export)
    texts = TEXTS
    fp32_table, int8_table = str(tmp_path / "fp32-table.onnx"), str(tmp_path / "int8-table.onnx")
    assert "embeddings_int8" not in ox.quantize_static_onnx(src, fp32_table, preset, feeds, pad_id=pad_id)
    done = ox.quantize_static_onnx(src, int8_table, preset, feeds, pad_id=pad_id, embeddings_int8=True)
    import json
    import os

    vocab = json.load(open(os.path.join(mpnet_export, "config.json")))["vocab_size"]
    assert [d["rows"] for d in done["embeddings_int8"]] == [vocab]      # the word table; positions stay FP32

    assert os.path.getsize(int8_table) < os.path.getsize(fp32_table) * 0.75
    before = Predictor(mpnet_export, threads=1, model_file=fp32_table).logits(texts, batch_size=1)
    after = Predictor(mpnet_export, threads=1, model_file=int8_table).logits(texts, batch_size=1)
    assert np.isfinite(after).all() and np.abs(after - before).max() < 0.05 * max(1.0, np.abs(before).max())
