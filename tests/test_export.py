"""ONNX export of every model kind, parity, fusions, the torch-free Predictor and its environment."""
import json
import os
import subprocess

import numpy as np
import onnx
import pytest
import torch
import transformers

from conftest import ARCHS, tiny_config
from compressor.core.data import get_task, load_split
from compressor.core.errors import CompressorError
from compressor.core.models import checkpoint_meta, load_for_task, save_checkpoint
from compressor.core.shapes import resize_layers
from compressor.export import Predictor, export_onnx, read_manifest

SST2 = get_task("sst2")


def _task_checkpoint(root, arch, tokenizer, keep_heads=None):
    config = tiny_config(arch)
    config.vocab_size = tokenizer.vocab_size
    config.num_labels = 2
    torch.manual_seed(0)
    model = transformers.AutoModelForSequenceClassification.from_config(config)
    if keep_heads:
        resize_layers(model, heads=keep_heads)
    path = str(root / f"{arch}-sst2")
    save_checkpoint(model, tokenizer, path, checkpoint_meta(SST2, 64, "test"))
    return path


@pytest.fixture(scope="module")
def tokenizer(minilm_dir):
    return transformers.AutoTokenizer.from_pretrained(minilm_dir)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory, tokenizer):
    root = tmp_path_factory.mktemp("ckpt")
    return {arch: _task_checkpoint(root, arch, tokenizer) for arch in ARCHS}


@pytest.fixture(scope="module")
def bert_export(tmp_path_factory, checkpoints):
    out = str(tmp_path_factory.mktemp("exp") / "bert")
    export_onnx(checkpoints["bert"], out, data_dir="embedded", parity_limit=64)
    return out


def _dims(model_file):
    graph = onnx.load(model_file).graph
    return {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in graph.input}


@pytest.mark.parametrize("arch", ARCHS)
def test_every_architecture_exports_with_dynamic_axes_and_parity(arch, checkpoints, tmp_path):
    out = str(tmp_path / "onnx")
    manifest = export_onnx(checkpoints[arch], out, data_dir="embedded", parity_limit=64)
    for name in ("model.onnx", "tokenizer.json", "config.json", "manifest.json", "parity.json"):
        assert os.path.isfile(os.path.join(out, name)), name
    dims = _dims(os.path.join(out, "model.onnx"))
    assert all(isinstance(d[0], str) and isinstance(d[1], str) for d in dims.values()), dims
    assert ("token_type_ids" in dims) == (arch == "bert")
    assert manifest["task"] == "sst2" and manifest["labels"] == ["0", "1"]
    assert manifest["max_length"] == 64 and manifest["opset"] == 17 and manifest["exporter"] == "optimum"
    assert "onnxruntime" in manifest["versions"]
    parity = json.load(open(os.path.join(out, "parity.json")))
    assert parity["examples"] == 64
    assert parity["identical_predictions"] >= 0.995 and parity["max_abs_logit_diff"] < 1e-4
    fusions = manifest["optimization"]["fusions"]
    assert fusions.get("SkipLayerNormalization", 0) >= 2
    # ... then written back as Add + LayerNormalization, the CPU's faster form (parity above holds for it)
    split = manifest["optimization"]["skip_layernorm_split"]["nodes"]
    ops = [n.op_type for n in onnx.load(os.path.join(out, "model.onnx")).graph.node]
    assert split == fusions["SkipLayerNormalization"] and "SkipLayerNormalization" not in ops
    # onnxruntime fuses Attention; MPNet's relative position bias needs the toolkit's own
    # MultiHeadAttention fusion (export/mpnet_fusion.py)
    assert ("Attention" in fusions) == (arch != "mpnet")
    assert ("MultiHeadAttention" in fusions) == (arch == "mpnet")


def test_torch_onnx_exporter_and_pruned_heads_that_differ_per_layer(tmp_path, tokenizer):
    path = _task_checkpoint(tmp_path, "bert", tokenizer, keep_heads=[[2, 3], [0, 1, 2]])
    net, _ = load_for_task(path)
    assert net.bert.encoder.layer[0].attention.self.num_attention_heads == 2
    for exporter in ("torch", "optimum"):
        m = export_onnx(path, str(tmp_path / exporter), data_dir="embedded", parity_limit=48,
                        exporter=exporter)
        assert m["exporter"] == ("torch.onnx" if exporter == "torch" else "optimum")
        assert m["parity"]["identical_predictions"] >= 0.995 and m["parity"]["max_abs_logit_diff"] < 1e-4


def test_shared_layer_weights_export(tmp_path, tokenizer):
    config = tiny_config("bert")
    config.vocab_size, config.num_labels = tokenizer.vocab_size, 2
    torch.manual_seed(0)
    model = transformers.AutoModelForSequenceClassification.from_config(config)
    model.bert.encoder.layer[1] = model.bert.encoder.layer[0]  # one layer's weights used twice
    net_dir = str(tmp_path / "shared")
    save_checkpoint(model, tokenizer, net_dir, checkpoint_meta(SST2, 64, "test"))  # safetensors, stored once
    assert not os.path.exists(os.path.join(net_dir, "pytorch_model.bin"))
    m = export_onnx(net_dir, str(tmp_path / "onnx"), data_dir="embedded", parity_limit=32)
    assert m["parity"]["identical_predictions"] >= 0.995


@pytest.mark.parametrize("kind", ["bilstm", "cnn"])
def test_small_students_export_through_torch_onnx(kind, tmp_path, tokenizer):
    from compressor.core.small import build_small

    torch.manual_seed(0)
    student = build_small(kind, tokenizer, SST2)
    path = str(tmp_path / kind)
    save_checkpoint(student, tokenizer, path, checkpoint_meta(SST2, 64, "distill", architecture=kind))
    m = export_onnx(path, str(tmp_path / "onnx"), data_dir="embedded", parity_limit=48)
    assert m["exporter"] == "torch.onnx" and m["inputs"] == ["input_ids", "attention_mask"]
    assert m["parity"]["identical_predictions"] >= 0.995 and m["parity"]["max_abs_logit_diff"] < 1e-4
    dims = _dims(str(tmp_path / "onnx" / "model.onnx"))
    assert all(isinstance(d[0], str) and isinstance(d[1], str) for d in dims.values())


def test_predictor_matches_pytorch(bert_export, checkpoints):
    dev = load_split("sst2", "dev", data_dir="embedded", limit=40)
    texts = [ex.texts[0] for ex in dev.examples]
    net, tok = load_for_task(checkpoints["bert"])
    with torch.no_grad():
        expected = [net(**tok([t], return_tensors="pt")).logits[0].numpy() for t in texts]
    p = Predictor(bert_export, threads=1)
    got = p.logits(texts, batch_size=7)       # batched, padded, put back in order
    np.testing.assert_allclose(got, np.stack(expected), atol=1e-4)
    assert p.predict(texts[:3]) == [["0", "1"][int(np.argmax(e))] for e in expected[:3]]
    probs = p.predict_proba(texts[:3])
    np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-5)
    # a pair of texts is encoded as one sequence with segment ids
    feed = p.encode([("first part", "second part")])
    assert feed["token_type_ids"].max() == 1


def test_predictor_runs_in_an_environment_without_torch(bert_export, tmp_path):
    from compressor.export.edge import build_runtime_env

    python = build_runtime_env(str(tmp_path / "env"))
    code = ("import importlib.util, json, sys\n"
            "from compressor.export.runtime import Predictor\n"
            "p = Predictor(sys.argv[1])\n"
            "print(json.dumps({'torch': importlib.util.find_spec('torch') is not None,\n"
            "  'transformers': importlib.util.find_spec('transformers') is not None,\n"
            "  'labels': p.predict(['a fine film', 'a dull mess'])}))\n")
    out = subprocess.run([python, "-c", code, bert_export], capture_output=True, text=True,
                         cwd=str(tmp_path), check=True)
    result = json.loads(out.stdout)
    assert result["torch"] is False and result["transformers"] is False
    assert result["labels"] == Predictor(bert_export).predict(["a fine film", "a dull mess"])
    # and from a shell, one text per line
    cli = subprocess.run([python, "-m", "compressor.export.runtime", bert_export], input="a fine film\n",
                         capture_output=True, text=True, cwd=str(tmp_path), check=True)
    assert cli.stdout.strip() in ("0", "1")


def test_cli_export_and_predict_onnx(checkpoints, bert_export, tmp_path):
    from click.testing import CliRunner

    from compressor.cli import cli

    runner = CliRunner()
    out = str(tmp_path / "x")
    res = runner.invoke(cli, ["export", checkpoints["roberta"], "--out", out, "--data-dir", "embedded",
                              "--parity-limit", "16"])
    assert res.exit_code == 0, res.output
    assert "identical predictions 100.00%" in res.output and "fusions:" in res.output
    dev = os.path.join(os.path.dirname(__file__), "..", "compressor", "core", "data", "embedded", "sst2", "dev.tsv")
    res = runner.invoke(cli, ["predict", bert_export, "--onnx", "--input", dev, "--out", str(tmp_path / "p")])
    assert res.exit_code == 0, res.output
    lines = open(tmp_path / "p" / "predictions.tsv").read().splitlines()
    assert lines[0] == "index\tprediction" and len(lines) == 873 and {l.split("\t")[1] for l in lines[1:]} <= {"negative", "positive"}


def test_bad_inputs_are_one_line_errors(tmp_path, checkpoints):
    with pytest.raises(CompressorError, match="not an ONNX export folder"):
        read_manifest(str(tmp_path))
    with pytest.raises(CompressorError, match="exporter must be"):
        export_onnx(checkpoints["bert"], str(tmp_path / "o"), exporter="tf")
    with pytest.raises(CompressorError, match="checkpoint not found"):
        export_onnx(str(tmp_path / "missing"), str(tmp_path / "o"))
    assert not os.path.exists(tmp_path / "o")  # nothing half-written


@pytest.mark.unit
def test_predictors_of_one_folder_share_its_parsed_tokenizer_at_one_length(tmp_path, minilm_dir):
    import shutil

    from compressor.export.runtime import _tokenizer

    path = tmp_path / "tokenizer.json"
    shutil.copy(os.path.join(minilm_dir, "tokenizer.json"), path)
    a, b, c = _tokenizer(str(path), 64), _tokenizer(str(path), 64), _tokenizer(str(path), 32)
    assert a is b and c is not a and a.truncation["max_length"] == 64 and c.truncation["max_length"] == 32
    assert a.padding is None
    path.write_text(path.read_text() + "\n")   # changed on disk: parsed again
    assert _tokenizer(str(path), 64) is not a


def _skip_layernorm_graph(hidden=16, with_bias=True, read_sum=False, opset=17, seq=None):
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(hidden).astype(np.float32), name)
             for name in ("gamma", "beta", "bias")]
    io = [helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, seq, hidden]) for name in ("x", "s", "y")]
    outputs = ["y", "", "", "sum"] if read_sum else ["y"]
    nodes = [helper.make_node("SkipLayerNormalization", ["x", "s", "gamma", "beta"] + (["bias"] if with_bias else []),
                              outputs, name="sln", domain="com.microsoft", epsilon=1e-5)]
    graph_outputs = io[2:]
    if read_sum:   # the residual sum read further on, as a fused encoder's next block does
        nodes.append(helper.make_node("Mul", ["sum", "y"], ["z"]))
        graph_outputs = [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, None, hidden])]
    return helper.make_model(helper.make_graph(nodes, "g", io[:2], graph_outputs, inits), ir_version=8,
                             opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid("com.microsoft", 1)])


@pytest.mark.unit
@pytest.mark.parametrize("with_bias,read_sum", [(True, False), (False, False), (True, True)])
def test_skip_layernorm_split_gives_the_fused_outputs(with_bias, read_sum, tmp_path):
    import onnxruntime as ort

    from compressor.export.onnx import split_skip_layernorm

    fused = _skip_layernorm_graph(with_bias=with_bias, read_sum=read_sum)
    split = _skip_layernorm_graph(with_bias=with_bias, read_sum=read_sum)
    assert split_skip_layernorm(split) == 1
    ops = [n.op_type for n in split.graph.node]
    assert "SkipLayerNormalization" not in ops and ops.count("LayerNormalization") == 1
    assert ops.count("Add") == (2 if with_bias else 1)
    rng = np.random.default_rng(1)
    feed = {"x": rng.standard_normal((1, 7, 16)).astype(np.float32),
            "s": rng.standard_normal((1, 7, 16)).astype(np.float32)}
    outs = [ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)[0]
            for m in (fused, split)]
    assert np.abs(outs[0] - outs[1]).max() < 1e-5
    # below opset 17 there is no LayerNormalization operator: left fused
    assert split_skip_layernorm(_skip_layernorm_graph(opset=16)) == 0


@pytest.mark.unit
def test_cpu_sessions_keep_the_split_graph_split(tmp_path):
    """onnxruntime fuses Add + LayerNormalization back when it loads a graph; the runtime's CPU
    sessions turn that off, so the profile shows no SkipLayerNormalization kernel."""
    from compressor.export.onnx import split_skip_layernorm
    from compressor.export.runtime import Predictor

    model = _skip_layernorm_graph(with_bias=False, seq=3)   # a shape onnxruntime fuses when free to
    split_skip_layernorm(model)
    path = str(tmp_path / "split.onnx")
    onnx.save(model, path)
    session = Predictor._session(path, 1, None, profile=str(tmp_path / "profile"))
    session.run(None, {"x": np.ones((1, 3, 16), np.float32), "s": np.ones((1, 3, 16), np.float32)})
    kernels = {e["args"].get("op_name") for e in json.load(open(session.end_profiling()))
               if e.get("cat") == "Node"}
    assert "LayerNormalization" in kernels and "SkipLayerNormalization" not in kernels
