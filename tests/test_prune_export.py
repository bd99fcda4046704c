"""Models whose layers differ in shape (heads and FFN units pruned per layer) through ONNX export,
onnxruntime's transformer fusions, dynamic INT8 and the benchmark.

The tiny models have sharp attention (query and key weights scaled up) and large logits: with
the near-uniform attention of a freshly initialised model, a graph that splits a layer into the
wrong number of heads gives almost the same outputs, and parity would not see it.
"""
import json
import os
import shutil

import numpy as np
import onnx
import pytest
import torch
import transformers
from click.testing import CliRunner
from onnx import helper, numpy_helper

from compressor.core.data import get_task, load_split
from compressor.export import Predictor, export_onnx
from compressor.export.onnx import example_texts, optimize_graph
from compressor.core.models import checkpoint_meta, load_for_task, save_checkpoint
from compressor.core.shapes import resize_layers, shape_of

SST2 = get_task("sst2")
SIZE = dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, intermediate_size=128,
            max_position_embeddings=130)
HEAD_SIZE = 16
KEEP_HEADS = [[0, 1, 2, 3], [0, 2, 3], [1, 3], [2]]          # 4, 3, 2, 1 heads, not the first n
KEEP_FFN = [list(range(0, 128, 2)) + [127], list(range(5, 125, 3)), [1, 7, 64, 100], list(range(128))]
HEADS = [len(k) for k in KEEP_HEADS]
ARCHS = ("bert", "mpnet")
PARITY = dict(identical=0.995, max_diff=1e-4)               # as tests/test_export.py holds exports


def _model(arch, tokenizer, pruned):
    kwargs = dict(SIZE, pad_token_id=0) if arch == "mpnet" else SIZE
    config = (transformers.MPNetConfig if arch == "mpnet" else transformers.BertConfig)(**kwargs)
    config.vocab_size, config.num_labels = tokenizer.vocab_size, 2
    torch.manual_seed(0)
    model = transformers.AutoModelForSequenceClassification.from_config(config).eval()
    with torch.no_grad():
        for layer in model.base_model.encoder.layer:
            attention = getattr(layer.attention, "self", None) or layer.attention.attn
            for name in ("query", "key", "q", "k"):
                if hasattr(attention, name):
                    getattr(attention, name).weight.mul_(20)
        head = model.classifier.out_proj if arch == "mpnet" else model.classifier
        head.weight.mul_(20)
    if pruned:
        resize_layers(model, heads=KEEP_HEADS, ffn=KEEP_FFN)
    return model


@pytest.fixture(scope="module")
def tokenizer(minilm_dir):
    return transformers.AutoTokenizer.from_pretrained(minilm_dir)


@pytest.fixture(scope="module")
def made(tmp_path_factory, tokenizer):
    """{(arch, pruned): {model, ckpt, onnx, manifest}}: checkpoints and their exports."""
    root = tmp_path_factory.mktemp("prune-export")
    out = {}
    for arch in ARCHS:
        for pruned in (False, True):
            name = f"{arch}-{'pruned' if pruned else 'full'}"
            model = _model(arch, tokenizer, pruned)
            ckpt = str(root / name / "ckpt")
            save_checkpoint(model, tokenizer, ckpt, checkpoint_meta(SST2, 64, "test"))
            folder = str(root / name / "onnx")
            manifest = export_onnx(ckpt, folder, data_dir="embedded", parity_limit=48)
            out[arch, pruned] = {"model": model, "ckpt": ckpt, "onnx": folder, "manifest": manifest}
    return out


@pytest.fixture(scope="module")
def dev(glue_dir):
    return load_split("sst2", "dev", glue_dir, limit=32)


def _attention_heads(model_file):
    return [helper.get_attribute_value(a) for n in onnx.load(model_file).graph.node
            if n.op_type in ("Attention", "MultiHeadAttention", "QAttention")
            for a in n.attribute if a.name == "num_heads"]


def _assert_parity(parity):
    assert parity["identical_predictions"] >= PARITY["identical"], parity
    assert parity["max_abs_logit_diff"] < PARITY["max_diff"], parity


@pytest.mark.parametrize("arch", ARCHS)
def test_pruned_export_matches_pytorch_and_fuses_like_the_unpruned_model(arch, made, dev):
    full, pruned = made[arch, False], made[arch, True]
    shape = shape_of(load_for_task(pruned["ckpt"])[0])
    assert shape["heads"] == HEADS and shape["ffn"] == [len(k) for k in KEEP_FFN]
    for side in (full, pruned):
        _assert_parity(side["manifest"]["parity"])
    # and against the model as pruned in memory, not only as reloaded from its checkpoint
    texts = example_texts(dev.examples[:16])
    predictor = Predictor(pruned["onnx"])
    with torch.no_grad():
        expected = np.concatenate([pruned["model"](**{k: torch.from_numpy(v) for k, v in
                                                      predictor.encode([t]).items()}).logits.numpy()
                                   for t in texts])
    np.testing.assert_allclose(predictor.logits(texts, batch_size=5), expected, atol=PARITY["max_diff"])

    # the same fusions as the unpruned model, each attention node at its own layer's head count
    fusions = {s: made[arch, s]["manifest"]["optimization"]["fusions"] for s in (False, True)}
    assert fusions[True] == fusions[False], fusions
    assert fusions[True]["SkipLayerNormalization"] >= 8 and fusions[True]["BiasGelu"] == 4
    report = pruned["manifest"]["optimization"]["attention"]
    assert report["layers"] == 4 and report["heads"] == HEADS
    if arch == "bert":
        assert fusions[True]["Attention"] == 4 and "MultiHeadAttention" not in fusions[True]
        assert _attention_heads(os.path.join(full["onnx"], "model.onnx")) == [4, 4, 4, 4]
        assert _attention_heads(os.path.join(pruned["onnx"], "model.onnx")) == HEADS
        assert report["fused"] == HEADS and "note" not in report
    else:
        # onnxruntime fuses no MPNet attention (its relative position bias); export/mpnet_fusion.py
        # writes one MultiHeadAttention per layer, at the layer's own head count
        assert fusions[True]["MultiHeadAttention"] == 4 and "Attention" not in fusions[True]
        assert _attention_heads(os.path.join(full["onnx"], "model.onnx")) == [4, 4, 4, 4]
        assert _attention_heads(os.path.join(pruned["onnx"], "model.onnx")) == HEADS
        assert report["fused"] == HEADS and "note" not in report
        assert [n["num_heads"] for n in report["mpnet_fusion"]["nodes"]] == HEADS


def test_parity_here_sees_a_wrong_head_count(made, tmp_path):
    """Guard for the test above: these models' outputs change when a layer is split into the
    wrong number of heads (the config's four everywhere)."""
    source = made["bert", True]["onnx"]
    wrong = str(tmp_path / "wrong")
    shutil.copytree(source, wrong)
    model = onnx.load(os.path.join(wrong, "model.onnx"))
    for node in model.graph.node:
        for a in node.attribute:
            if node.op_type == "Attention" and a.name == "num_heads":
                a.i = 4
    onnx.save(model, os.path.join(wrong, "model.onnx"))
    texts = ["a gripping , funny film", "flat , dull and lifeless from start to end"]
    diff = np.abs(Predictor(wrong).logits(texts, 1) - Predictor(source).logits(texts, 1)).max()
    assert diff > 100 * PARITY["max_diff"], diff


def _hide_head_counts(model):
    """Q/K/V reshapes to (batch, seq, -1, head size), as transformers 5 writes them: the head
    count no longer stands in the graph."""
    constants = {n.output[0]: n for n in model.graph.node if n.op_type == "Constant"}
    added, hidden = [], 0
    for node in list(model.graph.node):
        if node.op_type != "Concat" or len(node.input) != 4 or node.input[2] not in constants:
            continue
        tensor = constants[node.input[2]].attribute[0].t
        dtype = numpy_helper.to_array(tensor).dtype
        tensor.CopyFrom(numpy_helper.from_array(np.array([-1], dtype=dtype)))
        zero = node.input[2] + "_keep_dim"   # Reshape's 0: the input's own sequence length
        added.append(helper.make_node("Constant", [], [zero],
                                      value=numpy_helper.from_array(np.array([0], dtype=dtype))))
        node.input[1] = zero
        hidden += 1
    for node in added:
        model.graph.node.insert(0, node)
    return hidden


def test_a_head_count_the_optimizer_cannot_read_is_not_guessed(made, tmp_path):
    """Told the config's head count, onnxruntime's fusion falls back to it for every layer whose
    Reshape does not show its own: such a graph is refused, and told nothing it fuses nothing;
    either way the manifest's report says so and the graph still computes the model."""
    pruned = made["bert", True]
    plain = str(tmp_path / "plain")
    export_onnx(pruned["ckpt"], plain, optimize=False, parity=False)
    model = onnx.load(os.path.join(plain, "model.onnx"))
    assert _hide_head_counts(model) == 12
    onnx.save(model, os.path.join(plain, "model.onnx"))
    texts = ["a gripping , funny film", "flat , dull and lifeless from start to end"]
    reference = Predictor(plain).logits(texts, 1)
    config = transformers.AutoConfig.from_pretrained(pruned["ckpt"])
    for heads in (None, HEADS):
        folder = str(tmp_path / f"fused-{heads is not None}")
        shutil.copytree(plain, folder)
        report = optimize_graph(os.path.join(folder, "model.onnx"), config, heads=heads)
        attention = report["attention"]
        assert "Attention" not in report["fusions"] and attention["fused"] == []
        if heads is None:  # the config's 4 heads would have been used in layers 1 to 3
            assert "num_heads 4, its weights 3 heads" in attention["refused"]
            assert "left unfused" in attention["note"]
        else:
            assert "fused in 0 of 4 layers" in attention["note"]
        assert report["fusions"].get("SkipLayerNormalization", 0) >= 8   # the rest still fuses
        np.testing.assert_allclose(Predictor(folder).logits(texts, 1), reference, atol=PARITY["max_diff"])


def test_layers_pruned_alike_fuse_even_when_the_graph_hides_their_count(tokenizer, tmp_path):
    """Every layer at two heads: the optimizer is told two (not the config's four), so a graph
    whose Reshapes do not show the count still fuses every layer right."""
    model = _model("bert", tokenizer, pruned=False)
    resize_layers(model, heads=[[1, 3], [0, 2], [1, 3], [2, 3]], ffn=KEEP_FFN)
    ckpt = str(tmp_path / "ckpt")
    save_checkpoint(model, tokenizer, ckpt, checkpoint_meta(SST2, 64, "test"))
    plain = str(tmp_path / "plain")
    export_onnx(ckpt, plain, optimize=False, parity=False)
    graph = onnx.load(os.path.join(plain, "model.onnx"))
    assert _hide_head_counts(graph) == 12
    onnx.save(graph, os.path.join(plain, "model.onnx"))
    texts = ["a gripping , funny film", "flat , dull and lifeless from start to end"]
    reference = Predictor(plain).logits(texts, 1)
    report = optimize_graph(os.path.join(plain, "model.onnx"), model.config, heads=[2, 2, 2, 2])
    assert report["fusions"]["Attention"] == 4 and report["attention"]["fused"] == [2, 2, 2, 2]
    assert _attention_heads(os.path.join(plain, "model.onnx")) == [2, 2, 2, 2]
    np.testing.assert_allclose(Predictor(plain).logits(texts, 1), reference, atol=PARITY["max_diff"])


def test_cli_export_of_a_saved_pruned_checkpoint(made, tmp_path):
    from compressor.cli import cli

    out = str(tmp_path / "cli")
    result = CliRunner().invoke(cli, ["export", made["bert", True]["ckpt"], "--out", out,
                                      "--data-dir", "embedded", "--parity-limit", "16"])
    assert result.exit_code == 0, result.output
    assert "Attention x4" in result.output and "identical predictions 100.00%" in result.output
    manifest = json.load(open(os.path.join(out, "manifest.json")))
    assert manifest["optimization"]["attention"]["fused"] == HEADS
    _assert_parity(json.load(open(os.path.join(out, "parity.json"))))
    result = CliRunner().invoke(cli, ["export", made["mpnet", True]["ckpt"], "--out", str(tmp_path / "m"),
                                      "--data-dir", "embedded", "--parity-limit", "16"])
    assert result.exit_code == 0, result.output
    assert "MultiHeadAttention x4" in result.output and "note:" not in result.output


def _agree(logits, reference, tolerance=0.1):
    """As tests/test_quantize.py holds INT8 to FP32: within ``tolerance`` of the largest logit,
    and mostly the same predictions."""
    scale = np.abs(reference).max()
    assert np.abs(logits - reference).max() <= tolerance * scale, np.abs(logits - reference).max() / scale
    assert (logits.argmax(-1) == reference.argmax(-1)).mean() >= 0.9


@pytest.fixture(scope="module")
def int8(made, dev, tmp_path_factory, glue_dir):
    """Dynamic INT8 of both pruned exports: BERT through the API, MPNet through the command line."""
    from compressor.cli import cli
    from compressor.quantize import OrtDynamicConfig, quantize

    root = tmp_path_factory.mktemp("prune-int8")
    bert = str(root / "bert")
    record = quantize(made["bert", True]["onnx"], bert, OrtDynamicConfig(preset="avx512_vnni"), dev_set=dev)
    assert record["score"] is not None
    mpnet = str(root / "mpnet")
    result = CliRunner().invoke(cli, ["quantize", made["mpnet", True]["onnx"], "--out", mpnet,
                                      "--preset", "avx512_vnni", "--data-dir", glue_dir, "--dev-limit", "32"])
    assert result.exit_code == 0, result.output
    return {"bert": bert, "mpnet": mpnet}


@pytest.mark.parametrize("arch", ARCHS)
def test_dynamic_int8_of_a_pruned_export_agrees_with_fp32(arch, made, int8, dev):
    folder = int8[arch]
    manifest = json.load(open(os.path.join(folder, "manifest.json")))
    assert manifest["precision"] == "int8-dynamic"
    ops = {n.op_type for n in onnx.load(os.path.join(folder, "model.onnx")).graph.node}
    assert ops & {"MatMulInteger", "DynamicQuantizeMatMul", "QAttention", "MatMulIntegerToFloat"}
    # the fused attention is quantised at each layer's head count (BERT); MPNet's stays a
    # MultiHeadAttention, with its Q/K/V MatMuls quantised, and keeps its position bias
    assert _attention_heads(os.path.join(folder, "model.onnx")) == HEADS
    assert ("QAttention" in ops) == (arch == "bert")
    texts = example_texts(dev.examples)
    fp32 = Predictor(made[arch, True]["onnx"]).logits(texts, batch_size=1)
    _agree(Predictor(folder).logits(texts, batch_size=1), fp32)


def test_bench_runs_on_pruned_export_folders(made, int8, dev, tmp_path):
    from compressor.bench.harness import BenchConfig
    from compressor.bench.suite import run_benchmark
    from compressor.core.results import read_results

    models = [f"{arch}-fp32={made[arch, True]['onnx']}" for arch in ARCHS] + \
        [f"{arch}-int8={int8[arch]}" for arch in ARCHS]
    out = str(tmp_path / "results.json")
    run_benchmark(models, peers=[], dev=dev, out=out, log=lambda m: None,
                  config=BenchConfig(sentences=4, threads=[1], batch_sizes=[2], throughput_batches=1,
                                     memory=False))
    rows = read_results(out)["rows"]
    names = {r["name"] for r in rows}
    assert names == {m.split("=")[0] for m in models}
    for r in rows:
        assert r["value"] is not None and r["extra"]["metrics"]
        if r["batch_size"] == 1:
            assert r["latency_ms"]["p50"] > 0
