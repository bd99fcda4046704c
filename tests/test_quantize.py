"""Quantisation: every path on a tiny random classifier stays close to its FP32 outputs."""
import json
import os
from dataclasses import replace

import numpy as np
import pytest
import torch
import transformers
from click.testing import CliRunner

from compressor.core.data import get_task, load_split
from compressor.core.errors import CompressorError
from compressor.core.models import checkpoint_meta, save_checkpoint
from compressor.quantize import (IncDynamicConfig, IncStaticConfig, OrtAutoConfig, OrtDynamicConfig,
                                 OrtFP16Config, OrtMixedConfig, OrtQATConfig, OrtStaticConfig,
                                 TorchaoBF16Config, TorchaoDynamicConfig, load_quantized, quantize,
                                 quantize_config, resolve_preset)
from compressor.engine.scoring import predict_logits
from compressor.export.onnx import example_texts
from compressor.export.runtime import Predictor

from conftest import tiny_config


@pytest.fixture(scope="module")
def data(glue_dir):
    return {"train": load_split("sst2", "train", glue_dir, limit=64),
            "dev": load_split("sst2", "dev", glue_dir, limit=32)}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, minilm_dir):
    """A tiny random BERT SST-2 classifier checkpoint and its ONNX export."""
    from compressor.export import export_onnx

    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    torch.manual_seed(0)
    config = tiny_config("bert")
    config.vocab_size = tokenizer.vocab_size
    config.num_labels = 2
    model = transformers.BertForSequenceClassification(config).eval()
    with torch.no_grad():  # logits large enough that rounding errors are measured, not lost
        model.classifier.weight.mul_(20)
    root = tmp_path_factory.mktemp("quant")
    ckpt = str(root / "ckpt")
    save_checkpoint(model, tokenizer, ckpt, checkpoint_meta(get_task("sst2"), 64, "test"))
    onnx_dir = str(root / "onnx")
    export_onnx(ckpt, onnx_dir, parity=False)
    return {"ckpt": ckpt, "onnx": onnx_dir, "model": model, "tokenizer": tokenizer, "root": root}


def fp32_logits(tiny, data):
    return predict_logits(tiny["model"], tiny["tokenizer"], data["dev"].examples, 64, batch_size=1)


def assert_close(logits, reference, tolerance=0.1):
    """Within ``tolerance`` of the reference's largest logit, and mostly the same predictions."""
    scale = np.abs(reference).max()
    assert np.abs(logits - reference).max() <= tolerance * scale, np.abs(logits - reference).max() / scale
    assert (logits.argmax(-1) == reference.argmax(-1)).mean() >= 0.9


def onnx_out(folder, tiny, data):
    return Predictor(folder).logits(example_texts(data["dev"].examples), batch_size=1)


def test_presets_follow_the_hardware_and_can_be_overridden():
    assert resolve_preset("avx2").reduce_range and not resolve_preset("avx512_vnni").reduce_range
    assert resolve_preset("arm64").symmetric_activations
    assert resolve_preset("avx2", per_channel=False).per_channel is False
    from compressor.core.presets import detect_preset
    assert detect_preset({"avx2", "avx512_vnni"}, "x86_64") == "avx512_vnni"
    assert detect_preset({"avx2", "avx512_vnni", "amx_int8"}, "x86_64") == "amx"
    assert detect_preset({"avx2"}, "x86_64") == "avx2"
    assert detect_preset(set(), "aarch64") == "arm64"
    assert resolve_preset("auto").name in ("avx2", "avx512_vnni", "amx", "arm64")
    with pytest.raises(CompressorError, match="unknown hardware preset 'avx3'"):
        resolve_preset("avx3")
    with pytest.raises(CompressorError, match="not available with backend torchao"):
        quantize_config(backend="torchao", method="static")


@pytest.mark.parametrize("preset", ["avx2", "avx512_vnni", "arm64"])
def test_onnx_dynamic_int8_is_smaller_and_close(tiny, data, tmp_path, preset):
    out = str(tmp_path / "q")
    record = quantize(tiny["onnx"], out, OrtDynamicConfig(preset=preset), dev_set=data["dev"])
    ops = {n.op_type for n in __import__("onnx").load(os.path.join(out, "model.onnx")).graph.node}
    assert ops & {"MatMulInteger", "DynamicQuantizeMatMul", "QAttention", "MatMulIntegerToFloat"}
    assert os.path.getsize(os.path.join(out, "model.onnx")) < 0.6 * os.path.getsize(
        os.path.join(tiny["onnx"], "model.onnx"))
    manifest = json.load(open(os.path.join(out, "manifest.json")))
    assert manifest["quantization"]["preset"]["name"] == preset and manifest["precision"] == "int8-dynamic"
    assert os.path.isfile(os.path.join(out, "tokenizer.json")) and record["score"] is not None
    assert_close(onnx_out(out, tiny, data), fp32_logits(tiny, data))


def test_a_vnni_preset_on_an_avx2_cpu_is_said_to_saturate_here(capsys, monkeypatch):
    """Full 8-bit weights against uint8 activations saturate in AVX2's u8 x s8 multiply (every
    prediction one class, seen on an AVX2-only AMD EPYC): quantising so on such a CPU says that
    its scores here are wrong; the avx2 preset, arm64's signed activations and other CPUs do not."""
    from compressor.core import presets
    from compressor.quantize import api

    assert presets.saturates_here(resolve_preset("avx512_vnni"), {"avx2"}, "x86_64")
    assert presets.saturates_here(resolve_preset("amx"), {"avx2", "fma"}, "x86_64")
    assert not presets.saturates_here(resolve_preset("avx2"), {"avx2"}, "x86_64")
    assert not presets.saturates_here(resolve_preset("avx512_vnni"), {"avx2", "avx_vnni"}, "x86_64")
    assert not presets.saturates_here(resolve_preset("arm64"), {"avx2"}, "x86_64")
    assert not presets.saturates_here(resolve_preset("avx512_vnni"), set(), "aarch64")
    monkeypatch.setattr(presets, "cpu_flags", lambda: {"avx2"})
    monkeypatch.setattr("platform.machine", lambda: "x86_64")
    assert api._warn_if_it_saturates_here(OrtDynamicConfig(preset="avx512_vnni"))
    assert "INT8 products saturate" in capsys.readouterr().err
    assert not api._warn_if_it_saturates_here(OrtDynamicConfig(preset="auto"))   # auto is avx2 here
    assert not api._warn_if_it_saturates_here(TorchaoDynamicConfig())
    assert capsys.readouterr().err == ""


def test_the_amx_preset_writes_the_avx512_vnni_graph(tiny, data, tmp_path):
    """AMX and VNNI take the same INT8 formats: the two presets write one graph (nodes and weights),
    and ONNX Runtime picks AMX or VNNI kernels from the CPU when it runs it, so a bench made with
    either preset on an AMX host measures both."""
    import onnx
    from onnx import numpy_helper

    graphs = {}
    for preset in ("amx", "avx512_vnni"):
        out = str(tmp_path / preset)
        quantize(tiny["onnx"], out, OrtDynamicConfig(preset=preset), dev_set=data["dev"])
        graph = onnx.load(os.path.join(out, "model.onnx")).graph
        graphs[preset] = ([(n.op_type, list(n.input), list(n.output)) for n in graph.node],
                          {t.name: numpy_helper.to_array(t) for t in graph.initializer})
    (nodes_amx, weights_amx), (nodes_vnni, weights_vnni) = graphs["amx"], graphs["avx512_vnni"]
    assert nodes_amx == nodes_vnni and weights_amx.keys() == weights_vnni.keys()
    assert any(w.dtype == np.int8 for w in weights_amx.values())
    assert all(np.array_equal(weights_amx[k], weights_vnni[k]) for k in weights_amx)


@pytest.mark.parametrize("method", ["minmax", "entropy", "percentile"])
def test_onnx_static_int8_calibrates_on_training_rows(tiny, data, tmp_path, method):
    out = str(tmp_path / "q")
    record = quantize(tiny["ckpt"], out, OrtStaticConfig(calibration=method, calibration_samples=16,
                                                         preset="avx512_vnni"),
                      train_set=data["train"], dev_set=data["dev"])
    ops = [n.op_type for n in __import__("onnx").load(os.path.join(out, "model.onnx")).graph.node]
    assert "QuantizeLinear" in ops and "DequantizeLinear" in ops
    assert record["config"]["calibration"] == method
    assert_close(onnx_out(out, tiny, data), fp32_logits(tiny, data), tolerance=0.2)
    # the word table a Gather reads is stored INT8 (embeddings_int8, the default) and the manifest
    # says so; a table onnxruntime fused into EmbedLayerNormalization (BERT's graphs) stays FP32
    manifest = json.load(open(os.path.join(out, "manifest.json")))["quantization"]
    vocab = json.load(open(os.path.join(tiny["ckpt"], "config.json")))["vocab_size"]
    assert manifest["embeddings_int8"] is True
    fused = "EmbedLayerNormalization" in ops
    assert [t["rows"] for t in manifest.get("int8_tables", [])] == ([] if fused else [vocab])


def test_onnx_fp16(tiny, data, tmp_path):
    out = str(tmp_path / "q")
    quantize(tiny["onnx"], out, OrtFP16Config(), dev_set=data["dev"])
    assert_close(onnx_out(out, tiny, data), fp32_logits(tiny, data), tolerance=0.01)


def test_torchao_dynamic_int8_reloads(tiny, data, tmp_path):
    out = str(tmp_path / "q")
    quantize(tiny["ckpt"], out, TorchaoDynamicConfig(), dev_set=data["dev"])
    net, tok = load_quantized(out)
    logits = predict_logits(net, tok, data["dev"].examples, 64, batch_size=1)
    assert_close(logits, fp32_logits(tiny, data))
    assert type(net.bert.encoder.layer[0].intermediate.dense.weight).__name__ != "Parameter"


def test_bf16_for_gpus(tiny, data, tmp_path):
    out = str(tmp_path / "q")
    quantize(tiny["ckpt"], out, TorchaoBF16Config(), dev_set=data["dev"])
    net, tok = load_quantized(out)
    assert net.dtype == torch.bfloat16
    assert_close(predict_logits(net, tok, data["dev"].examples, 64, batch_size=1), fp32_logits(tiny, data))


@pytest.mark.parametrize("alpha", [0.0, 0.5])
def test_inc_static_with_and_without_smoothquant(tiny, data, tmp_path, alpha):
    out = str(tmp_path / "q")
    record = quantize(tiny["ckpt"], out, IncStaticConfig(calibration_samples=8, smoothquant_alpha=alpha),
                      train_set=data["train"], dev_set=data["dev"])
    assert record["quantization"]["smoothed_linears"] == (0 if alpha == 0 else 14)
    net, tok = load_quantized(out)
    assert_close(predict_logits(net, tok, data["dev"].examples, 64, batch_size=1), fp32_logits(tiny, data))


def test_inc_without_calibration_is_refused_never_zeros(tiny, data, tmp_path):
    # INC's own trap, shown: its dynamic path converted without a calibration run returns zeros ...
    from neural_compressor.torch.export import export
    from neural_compressor.torch.quantization import DynamicQuantConfig, convert, prepare

    from compressor.quantize.inc import check_not_silenced

    model = tiny["model"]
    ids = torch.randint(1000, 2000, (2, 9))
    mask = torch.ones_like(ids)
    reference = model(input_ids=ids, attention_mask=mask).logits
    silent = convert(prepare(export(model, example_inputs=(ids, mask)), DynamicQuantConfig()))(ids, mask)
    silent = silent["logits"] if isinstance(silent, dict) else silent.logits
    assert torch.count_nonzero(silent) == 0
    # ... which our guard refuses, and our API never builds an INC model without calibration rows
    with pytest.raises(CompressorError, match="all-zero"):
        check_not_silenced(silent, reference)
    with pytest.raises(CompressorError, match="calibration"):
        quantize(tiny["ckpt"], str(tmp_path / "q"), IncDynamicConfig(calibration_samples=0),
                 train_set=data["train"], dev_set=data["dev"])
    # calibrated, the dynamic path works through this API and follows FP32 (logits and predictions)
    quantize(tiny["ckpt"], str(tmp_path / "ok"), IncDynamicConfig(calibration_samples=8),
             train_set=data["train"], dev_set=data["dev"])
    net, tok = load_quantized(str(tmp_path / "ok"))
    assert_close(predict_logits(net, tok, data["dev"].examples, 64, batch_size=1), fp32_logits(tiny, data))


def test_fake_quantisation_matches_onnxruntime_and_trains(tiny, data):
    import copy

    from compressor.quantize.qat import FakeQuantLinear, prepare_qat, strip_qat

    model = copy.deepcopy(tiny["model"])
    assert prepare_qat(model) == 2 * 6
    fake = predict_logits(model, tiny["tokenizer"], data["dev"].examples, 64, batch_size=1)
    assert_close(fake, fp32_logits(tiny, data))
    ids = torch.randint(1000, 2000, (2, 9))
    model(input_ids=ids, labels=torch.tensor([0, 1])).loss.backward()
    layer = model.bert.encoder.layer[0].attention.self.query
    assert isinstance(layer, FakeQuantLinear) and layer.linear.weight.grad is not None
    strip_qat(model)
    assert isinstance(model.bert.encoder.layer[0].attention.self.query, torch.nn.Linear)


def test_qat_exports_a_real_int8_model(tiny, data, tmp_path):
    out = str(tmp_path / "q")
    record = quantize(tiny["ckpt"], out, OrtQATConfig(train={"max_steps": 4, "eval_every": 4, "lr": 1e-5,
                                                             "batch_size": 8, "device": "cpu"},
                                                      distill_alpha=0.5),
                      train_set=data["train"], dev_set=data["dev"])
    assert record["qat"]["steps"] == 4 and record["qat"]["fake_quantized_linears"] == 12
    ops = {n.op_type for n in __import__("onnx").load(os.path.join(out, "model.onnx")).graph.node}
    assert ops & {"MatMulInteger", "DynamicQuantizeMatMul", "QAttention", "MatMulIntegerToFloat"}
    assert_close(onnx_out(out, tiny, data), fp32_logits(tiny, data), tolerance=0.2)


def test_sensitivity_mixed_precision_and_accuracy_aware_choice(tiny, data, tmp_path):
    from compressor.export.int8 import quantizable_units

    units = quantizable_units(os.path.join(tiny["onnx"], "model.onnx"), "layer")
    assert list(units) == ["embeddings", "layer.0", "layer.1"]
    matrices = quantizable_units(os.path.join(tiny["onnx"], "model.onnx"), "matrix")
    assert "layer.1.attention.qkv" in matrices and len(matrices) == 1 + 2 * 4

    out = str(tmp_path / "mixed")
    record = quantize(tiny["onnx"], out, OrtMixedConfig(max_drop=100.0, granularity="matrix"),
                      dev_set=data["dev"])
    search = record["search"]
    assert search["fp32_units"] == []  # any drop is tolerated: everything INT8
    assert {u["unit"] for u in search["sensitivity"]["units"]} == set(matrices)
    assert os.path.isfile(os.path.join(out, "sensitivity.png"))
    assert "| unit |" in open(os.path.join(out, "sensitivity.md")).read()

    out = str(tmp_path / "auto")
    record = quantize(tiny["onnx"], out, OrtAutoConfig(max_drop=0.0, calibration_samples=8),
                      train_set=data["train"], dev_set=data["dev"])
    tried = record["search"]["tried"]
    assert [t["name"].split(" ")[0] for t in tried] == ["static-int8", "dynamic-int8", "mixed", "fp32"]
    chosen = next(t for t in tried if t["name"] == record["search"]["chosen"])
    assert chosen["meets"] and chosen["latency_ms"] == min(t["latency_ms"] for t in tried if t["meets"])
    # the candidates were timed together, on search rows at batch 1 (sensitivity.latencies_ms)
    assert record["search"]["latency"]["rows"] == min(100, len(data["dev"]))
    assert all(t["latency_ms"] > 0 for t in tried)


def test_recipe_stages_and_order(tiny, data, tmp_path, glue_dir):
    from compressor.recipe import run_recipe
    from compressor.recipe.schema import RecipeError, recipe_from_text

    text = f"""
name: quant-test
task: sst2
data: {{dir: {glue_dir}, train_limit: 64, dev_limit: 32}}
teacher: {tiny["ckpt"]}
stages:
  - quantize: {{method: dynamic, preset: avx512_vnni}}
"""
    recipe = recipe_from_text(text)
    manifest = run_recipe(recipe, str(tmp_path / "run"))
    stage = manifest["stages"][-1]
    assert stage["kind"] == "onnx" and stage["score"] is not None
    assert os.path.isfile(os.path.join(tmp_path / "run", stage["model_dir"], "model.onnx"))

    with pytest.raises(RecipeError) as err:
        recipe_from_text(text.replace("quantize: {method: dynamic, preset: avx512_vnni}",
                                      "quantize_torch: {backend: torchao}\n  - quantize: {method: fppp}"))
    problems = "\n".join(err.value.problems)
    assert "method 'fppp' is not available" in problems
    assert "cannot follow stage 'quantize_torch'" in problems


def test_cli_quantize_and_bad_input(tiny, tmp_path, glue_dir):
    from compressor.cli import cli, main

    out = str(tmp_path / "cli")
    result = CliRunner().invoke(cli, ["quantize", tiny["onnx"], "--out", out, "--preset", "avx512_vnni",
                                      "--data-dir", glue_dir, "--dev-limit", "16"])
    assert result.exit_code == 0, result.output
    assert "sst2 dev: accuracy" in result.output and os.path.isfile(os.path.join(out, "model.onnx"))
    with pytest.raises(SystemExit) as exit_:
        main(["quantize", tiny["onnx"], "--out", str(tmp_path / "x"), "--preset", "avx3"])
    assert exit_.value.code == 1
    with pytest.raises(SystemExit):
        main(["quantize", str(tmp_path / "missing"), "--out", str(tmp_path / "y")])


def test_mixed_precision_can_choose_on_training_rows_and_leave_dev_to_the_end(tiny, data, tmp_path, monkeypatch):
    """search_on: train ranks units and checks max_drop on drawn training rows; dev is scored only
    once, on the model chosen (search_on: dev, the default, chooses on dev and says so)."""
    from compressor.quantize import sensitivity as sens

    assert OrtMixedConfig().uses_train is False and OrtMixedConfig(search_on="train").uses_train is True
    seen = []
    real = sens.graph_outputs
    monkeypatch.setattr(sens, "graph_outputs", lambda folder, rows, *a, **k: seen.append(rows.split) or real(folder, rows, *a, **k))
    out = str(tmp_path / "mixed-train")
    record = quantize(tiny["onnx"], out, OrtMixedConfig(max_drop=100.0, search_on="train", search_rows=12),
                      train_set=data["train"], dev_set=data["dev"])
    search = record["search"]
    assert search["search_on"] == "train" and search["search_rows"] == 12
    assert seen and set(seen) == {"train (drawn for the search)"}          # dev never scored in the search
    assert record["split"] == "dev" and record["examples"] == len(data["dev"])   # and scored at the end
    assert "12 train (drawn for the search) rows" in open(os.path.join(out, "sensitivity.md")).read()
    again = data["train"].sample(12, 42)
    assert [e.guid for e in again.examples] == [e.guid for e in data["train"].sample(12, 42).examples]
    assert [e.guid for e in again.examples] != [e.guid for e in data["train"].sample(12, 43).examples]
    with pytest.raises(CompressorError, match="search_on: train needs the task's training split"):
        quantize(tiny["onnx"], str(tmp_path / "none"), OrtMixedConfig(search_on="train"),
                 train_set=replace(data["train"], examples=[]), dev_set=data["dev"])


def test_refine_keeps_single_products_of_the_layers_the_layer_search_kept(tiny, data, tmp_path, monkeypatch):
    """granularity refine: the layer search first, then the products inside the layers it kept FP32,
    measured alone and returned to FP32 one by one. The criterion is scripted (it meets from its
    second judgement on) so the path is fixed: the layer search keeps one unit, the refinement one
    product of it, and that product's nodes are the graph's only FP32 products."""
    import onnx

    from compressor.export.int8 import quantizable_units
    from compressor.quantize import sensitivity as sens

    real, calls = sens.Criterion.judge, []

    def scripted(self, outputs):
        verdict = real(self, outputs)
        calls.append(1)
        verdict.pop("why_not", None)
        verdict["meets"] = len(calls) >= 2
        if not verdict["meets"]:
            verdict["why_not"] = "scripted"
        return verdict

    monkeypatch.setattr(sens.Criterion, "judge", scripted)
    out = str(tmp_path / "refine")
    record = quantize(tiny["onnx"], out, OrtMixedConfig(granularity="refine", max_drop=0.0, confidence=0),
                      dev_set=data["dev"])
    search = record["search"]
    layers = search["mixed"]["refined_from"]["fp32_units"]
    assert len(layers) == 1 and search["sensitivity"]["granularity"] == "layer"
    inside = sens.products_inside(tiny["onnx"], layers)
    assert {u["unit"] for u in search["refine_sensitivity"]["units"]} == set(inside)
    assert len(search["fp32_units"]) == 1 and search["fp32_units"][0] in inside
    assert search["fp32_units"][0] == search["refine_sensitivity"]["units"][0]["unit"]   # most divergent first
    assert len(calls) == 3   # all INT8, one layer FP32; then one product FP32 (all-INT8 not judged again)
    kept = set(quantizable_units(os.path.join(tiny["onnx"], "model.onnx"), "matrix")[search["fp32_units"][0]])
    graph = onnx.load(os.path.join(out, "model.onnx")).graph
    float_products = {n.name for n in graph.node if n.op_type in ("MatMul", "Gemm", "Attention", "Gather",
                                                                     "EmbedLayerNormalization")}
    assert kept <= float_products
    table = open(os.path.join(out, "sensitivity.md")).read()
    assert "whole layers returned to FP32" in table and "inside those layers, single products" in table


def test_products_inside_partition_their_layers(tiny):
    from compressor.export.int8 import quantizable_units
    from compressor.quantize import sensitivity as sens

    path = os.path.join(tiny["onnx"], "model.onnx")
    layers, matrices = quantizable_units(path, "layer"), quantizable_units(path, "matrix")
    for unit, nodes in layers.items():
        inside = sens.products_inside(tiny["onnx"], [unit])
        assert inside and sorted(n for m in inside for n in matrices[m]) == sorted(nodes)
    assert sens.products_inside(tiny["onnx"], []) == []
