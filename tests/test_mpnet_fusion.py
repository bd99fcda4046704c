"""MPNet's attention fused into MultiHeadAttention (export/mpnet_fusion.py), per layer and at each
layer's own head count, through export, parity and dynamic INT8.

The tiny models have sharp attention (query and key weights scaled up), a large relative position
bias and large logits, so a graph that loses the bias, the padding mask or a layer's head count
gives other outputs (``test_the_fused_graph_needs_its_bias_and_mask`` checks that it does).
"""
import json
import os
import shutil

import numpy as np
import onnx
import pytest
import torch
import transformers
from onnx import helper, numpy_helper

from compressor.core.data import get_task, load_split
from compressor.core.errors import CompressorError
from compressor.export import Predictor, export_onnx
from compressor.export.onnx import example_texts
from compressor.core.models import checkpoint_meta, save_checkpoint
from compressor.core.shapes import resize_layers

SST2 = get_task("sst2")
SIZE = dict(hidden_size=64, num_hidden_layers=3, num_attention_heads=4, intermediate_size=96,
            max_position_embeddings=130, pad_token_id=0)
KEEP_HEADS = [[0, 1, 2, 3], [0, 2], [3]]
HEADS = [len(k) for k in KEEP_HEADS]
TOL = 1e-4


def _model(tokenizer, pruned: bool, texts):
    config = transformers.MPNetConfig(**SIZE)
    config.vocab_size, config.num_labels = tokenizer.vocab_size, 2
    torch.manual_seed(0)
    model = transformers.AutoModelForSequenceClassification.from_config(config).eval()
    with torch.no_grad():
        for layer in model.mpnet.encoder.layer:
            attn = layer.attention.attn
            for linear in (attn.q, attn.k):
                linear.weight.mul_(20)
            for linear in (attn.q, attn.k, attn.v):
                linear.bias.normal_(0, 0.5)     # the fused node's packed Q/K/V bias must be right
        model.mpnet.encoder.relative_attention_bias.weight.normal_(0, 4)
        model.classifier.dense.weight.mul_(20)
        model.classifier.out_proj.weight.mul_(20)
    if pruned:
        resize_layers(model, heads=KEEP_HEADS)
    with torch.no_grad():   # centre the head on these sentences: both labels get predicted
        enc = tokenizer(texts, padding=True, return_tensors="pt", return_token_type_ids=False)
        model.classifier.out_proj.bias.sub_(model(**enc).logits.median(0).values)
    return model


@pytest.fixture(scope="module")
def tokenizer(minilm_dir):
    return transformers.AutoTokenizer.from_pretrained(minilm_dir)


@pytest.fixture(scope="module")
def dev(glue_dir):
    return load_split("sst2", "dev", glue_dir, limit=48)


@pytest.fixture(scope="module")
def made(tmp_path_factory, tokenizer, dev):
    """{pruned: {model, ckpt, plain, fused, manifest}}: each model exported unoptimised and fused."""
    root = tmp_path_factory.mktemp("mpnet-fusion")
    out = {}
    for pruned in (False, True):
        model = _model(tokenizer, pruned, example_texts(dev.examples))
        base = root / ("pruned" if pruned else "full")
        ckpt = str(base / "ckpt")
        save_checkpoint(model, tokenizer, ckpt, checkpoint_meta(SST2, 64, "test"))
        plain = str(base / "plain")
        export_onnx(ckpt, plain, optimize=False, parity=False)
        fused = str(base / "fused")
        manifest = export_onnx(ckpt, fused, examples=dev.examples)
        out[pruned] = {"model": model, "ckpt": ckpt, "plain": plain, "fused": fused, "manifest": manifest}
    return out


def _ops(folder):
    return [n.op_type for n in onnx.load(os.path.join(folder, "model.onnx")).graph.node]


def _mha_heads(folder):
    return [helper.get_attribute_value(a) for n in onnx.load(os.path.join(folder, "model.onnx")).graph.node
            if n.op_type == "MultiHeadAttention" for a in n.attribute if a.name == "num_heads"]


def _torch_logits(model, predictor, texts):
    with torch.no_grad():
        return np.concatenate([model(**{k: torch.from_numpy(v) for k, v in predictor.encode([t]).items()})
                               .logits.numpy() for t in texts])


@pytest.mark.parametrize("pruned", [False, True])
def test_one_multihead_attention_per_layer_at_its_head_count(made, pruned):
    side = made[pruned]
    heads = HEADS if pruned else [4, 4, 4]
    optimization = side["manifest"]["optimization"]
    assert optimization["fusions"]["MultiHeadAttention"] == 3 and "Attention" not in optimization["fusions"]
    attention = optimization["attention"]
    assert attention["heads"] == heads and attention["fused"] == heads and "note" not in attention
    report = attention["mpnet_fusion"]
    assert report["fused"] == 3 and report["per_layer"] == {"0": 1, "1": 1, "2": 1}
    assert [(n["layer"], n["num_heads"]) for n in report["nodes"]] == list(enumerate(heads))
    assert _mha_heads(side["fused"]) == heads
    ops = _ops(side["fused"])
    # Q, K, V stay separate MatMuls (dynamic INT8 quantises them); no Softmax is left
    assert "Softmax" not in ops and ops.count("MatMul") >= 3 * 4 + 1
    # the bias + mask sum: once for the graph, or once per layer when each Gathers its heads
    assert sum(n.endswith("AttentionBiasAdd") or "AttentionBiasAdd" in n
               for n in [x.name for x in onnx.load(os.path.join(side["fused"], "model.onnx")).graph.node]) \
        == (3 if pruned else 1)


@pytest.mark.parametrize("pruned", [False, True])
def test_fused_graph_matches_the_unfused_graph_and_pytorch_with_padding(made, dev, pruned):
    side = made[pruned]
    parity = side["manifest"]["parity"]
    assert parity["identical_predictions"] == 1.0 and parity["max_abs_logit_diff"] < TOL, parity
    texts = example_texts(dev.examples)
    lengths = [len(t.split()) for t in texts]
    assert max(lengths) > 3 * min(lengths)          # batches below are padded
    fused, plain = Predictor(side["fused"]), Predictor(side["plain"])
    reference = _torch_logits(side["model"], fused, texts)
    assert len(set(reference.argmax(-1))) == 2          # both labels: predictions can change
    for batch_size in (1, 7, 48):
        np.testing.assert_allclose(fused.logits(texts, batch_size), plain.logits(texts, batch_size), atol=TOL)
        np.testing.assert_allclose(fused.logits(texts, batch_size), reference, atol=TOL)


def _rewire(src, dst, change):
    shutil.copytree(src, dst)
    model = onnx.load(os.path.join(dst, "model.onnx"))
    change(model)
    onnx.save(model, os.path.join(dst, "model.onnx"))
    return dst


def test_the_fused_graph_needs_its_bias_and_mask(made, dev, tmp_path):
    """Guard for the parity above: these models' outputs change without the position bias, the
    padding mask or a layer's right head count."""
    source = made[True]["fused"]
    texts = example_texts(dev.examples[:16])
    reference = Predictor(source).logits(texts, 8)
    graph = onnx.load(os.path.join(source, "model.onnx")).graph
    sums = {n.output[0]: n for n in graph.node if "AttentionBiasAdd" in n.name}
    bias_input = next(iter(sums.values())).input

    def only(keep):
        """attention_bias without one of its two terms (the kernel wants [.., seq, seq]: 0 * it)"""
        def change(model):
            for node in model.graph.node:
                if node.op_type == "MultiHeadAttention":
                    kept, gone = sums[node.input[5]].input[keep], sums[node.input[5]].input[1 - keep]
                    zero = helper.make_node("Mul", [gone, "zero"], [node.name + "_zero"])
                    model.graph.node.append(helper.make_node("Add", [kept, zero.output[0]], [node.name + "_b"]))
                    model.graph.node.append(zero)
                    node.input[5] = node.name + "_b"
            model.graph.initializer.append(numpy_helper.from_array(np.zeros((), np.float32), "zero"))
            from onnxruntime.transformers.onnx_model import OnnxModel

            OnnxModel(model).topological_sort()
        return change

    def heads(model):
        for node in model.graph.node:
            for a in node.attribute:
                if node.op_type == "MultiHeadAttention" and a.name == "num_heads" and a.i == 2:
                    a.i = 1

    assert len(bias_input) == 2
    for name, change in (("term 0 only", only(0)), ("term 1 only", only(1))):
        wrong = _rewire(source, str(tmp_path / name), change)
        diff = np.abs(Predictor(wrong).logits(texts, 8) - reference).max()
        assert diff > 100 * TOL, (name, diff)
    # a wrong head count cannot pass unseen: the bias has the layer's heads, and the kernel says so
    wrong = _rewire(source, str(tmp_path / "heads"), heads)
    with pytest.raises(Exception, match="number of heads"):
        Predictor(wrong).logits(texts, 8)


@pytest.fixture(scope="module")
def int8(made, dev, tmp_path_factory):
    from compressor.quantize import OrtDynamicConfig, quantize

    out = str(tmp_path_factory.mktemp("mpnet-int8") / "int8")
    record = quantize(made[True]["fused"], out, OrtDynamicConfig(preset="avx512_vnni"), dev_set=dev)
    return out, record


def test_dynamic_int8_of_the_fused_graph_keeps_the_bias_and_quantises_qkv(made, int8, dev, tmp_path):
    from compressor.export.int8 import quantize_dynamic_onnx
    from compressor.core.presets import resolve_preset

    folder, record = int8
    ops = _ops(folder)
    assert "QAttention" not in ops and _mha_heads(folder) == HEADS
    # every projection (Q, K, V, output, FFN: 6 a layer) and the classifier's dense are integer
    assert ops.count("MatMulInteger") >= 6 * 3
    check = record["parity_vs_fp32"]
    assert check["examples"] == len(dev) and check["identical_predictions_where_sure"] >= 0.9, check
    texts = example_texts(dev.examples)
    fp32 = Predictor(made[True]["fused"]).logits(texts, 1)
    logits = Predictor(folder).logits(texts, 1)
    # these sharp tiny models amplify INT8 noise (a mean difference of about half the logits'
    # spread), and the fused graph's INT8 has the unfused graph's: the same MatMuls quantised
    unfused = str(tmp_path / "unfused-int8.onnx")
    quantize_dynamic_onnx(os.path.join(made[True]["plain"], "model.onnx"), unfused, resolve_preset("avx512_vnni"))
    reference = Predictor(made[True]["plain"], model_file=unfused).logits(texts, 1)
    np.testing.assert_allclose(logits, reference, atol=TOL)
    assert np.abs(logits - fp32).mean() <= 0.75 * fp32.std(0).min()
    assert (logits.argmax(-1) == fp32.argmax(-1)).mean() >= 0.8      # half the sentences are near-ties


def _as_packed_attention(model):
    """Each MultiHeadAttention as a packed ``Attention`` with the same attention_bias (input 5): the
    graph onnxruntime's own fusion would write if it took MPNet's bias."""
    inits = {i.name: i for i in model.graph.initializer}
    producer = {o: n for n in model.graph.node for o in n.output}
    nodes = []
    for node in model.graph.node:
        if node.op_type != "MultiHeadAttention":
            nodes.append(node)
            continue
        matmuls = [producer[node.input[i]] for i in range(3)]
        weight = numpy_helper.from_array(np.concatenate(
            [numpy_helper.to_array(inits[m.input[1]]) for m in matmuls], axis=1), node.name + "_qkv_weight")
        model.graph.initializer.append(weight)
        heads = next(a.i for a in node.attribute if a.name == "num_heads")
        nodes.append(helper.make_node("Attention", [matmuls[0].input[0], weight.name, node.input[3], "", "",
                                                    node.input[5]], list(node.output), name=node.name + "_packed",
                                      domain="com.microsoft", num_heads=heads))
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    from onnxruntime.transformers.onnx_model import OnnxModel

    wrapped = OnnxModel(model)
    wrapped.prune_graph()


def test_int8_refuses_a_qattention_that_would_drop_the_bias(made, dev, tmp_path):
    """onnxruntime's quantiser turns Attention into QAttention, which has no attention_bias input:
    the toolkit refuses the graph it would write instead of writing a wrong one."""
    from compressor.quantize import OrtDynamicConfig, quantize
    from compressor.export.int8 import quantize_dynamic_onnx
    from compressor.core.presets import resolve_preset

    packed = _rewire(made[True]["fused"], str(tmp_path / "packed"), _as_packed_attention)
    assert "Attention" in _ops(packed) and "MultiHeadAttention" not in _ops(packed)
    texts = example_texts(dev.examples[:16])
    np.testing.assert_allclose(Predictor(packed).logits(texts, 8), Predictor(made[True]["fused"]).logits(texts, 8),
                               atol=TOL)   # the packed graph is right in FP32
    dst = str(tmp_path / "q.onnx")
    with pytest.raises(CompressorError, match="drops the bias"):
        quantize_dynamic_onnx(os.path.join(packed, "model.onnx"), dst, resolve_preset("avx512_vnni"))
    assert not os.path.exists(dst)
    out = str(tmp_path / "int8")
    with pytest.raises(CompressorError, match="QAttention"):
        quantize(packed, out, OrtDynamicConfig(preset="avx512_vnni"), dev_set=dev)
    assert not os.path.exists(out)


def test_int8_parity_refuses_a_graph_that_computes_something_else(made, int8, dev, tmp_path):
    """Every quantised graph is run against its FP32 source: the record keeps the figures, and a
    graph off on both counts (agreement where FP32 is sure, largest logit difference) is refused.
    A coarse net: on these tiny models the bias-dropping QAttention graph agrees on 88% of the
    sure sentences and passes it; check_attention_inputs_kept is the guard that refuses that one."""
    from compressor.export.int8 import parity_vs_fp32

    fp32 = made[True]["fused"]
    sound = parity_vs_fp32(fp32, int8[0], dev.examples)
    assert sound["identical_predictions_where_sure"] == 1.0 and sound["sure"] == len(dev) // 2

    def flipped(model):   # the classifier's output weights negated: every sure prediction flips
        weight = next(n for n in model.graph.node if "out_proj" in n.name).input[1]
        tensor = next(t for t in model.graph.initializer if t.name == weight)
        tensor.CopyFrom(numpy_helper.from_array(-numpy_helper.to_array(tensor), weight))

    wrong = _rewire(fp32, str(tmp_path / "flipped"), flipped)
    with pytest.raises(CompressorError, match="computes something else; refused"):
        parity_vs_fp32(fp32, wrong, dev.examples)
