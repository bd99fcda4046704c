"""The benchmark harness, the peers and the recipe stages export -> bench on tiny models."""
import json
import os

import numpy as np
import pytest
import torch

from conftest import save_sst2_classifier
from compressor.data import load_split
from compressor.errors import CompressorError
from compressor.results import REQUIRED, read_results



@pytest.fixture(scope="module")
def teacher(tmp_path_factory, minilm_dir):
    return save_sst2_classifier(tmp_path_factory.mktemp("bench") / "teacher", minilm_dir)


@pytest.fixture(scope="module")
def dev():
    return load_split("sst2", "dev", data_dir="embedded", limit=48)


def test_percentiles_and_interleaving():
    from compressor.bench.harness import Runner, Spec, interleaved_latency, percentiles

    p = percentiles([0.001 * i for i in range(1, 101)])
    assert p["p50"] == pytest.approx(50.5) and p["p90"] == pytest.approx(90.1) and p["p99"] == pytest.approx(99.01)
    calls = []

    def runner(name):
        return Runner(Spec(name, "x"), encode=lambda texts: texts[0], run=lambda feed: calls.append((name, feed)))

    times = interleaved_latency([runner("a"), runner("b"), runner("c")], ["s1", "s2", "s3"], warmup=0)
    assert {k: len(v) for k, v in times.items()} == {"a": 3, "b": 3, "c": 3}
    # each sentence is run by every variant before the next; who goes first rotates
    assert [c[0] for c in calls] == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert [c[1] for c in calls[:3]] == ["s1"] * 3


def test_peers_are_built_and_int8_is_smaller(teacher, tmp_path):
    from compressor.bench.peers import peer_specs

    specs = peer_specs(teacher, str(tmp_path / "peers"), ["pytorch-fp32", "pytorch-int8", "ort-fp32",
                                                          "ort-o2", "ort-o2-int8"], preset="avx2")
    by = {s.name: s for s in specs}
    assert by["ort-o2"].path.endswith("model_optimized.onnx") and os.path.isfile(by["ort-o2"].path)
    assert os.path.isfile(by["ort-o2-int8"].path) and "avx2" in by["ort-o2-int8"].source
    assert by["ort-o2-int8"].size_bytes < by["ort-fp32"].size_bytes
    assert by["pytorch-int8"].size_bytes < by["pytorch-fp32"].size_bytes
    with pytest.raises(CompressorError, match="unknown peer"):
        peer_specs(teacher, str(tmp_path / "p2"), ["tensorrt"])
    with pytest.raises(CompressorError, match="preset"):
        peer_specs(teacher, str(tmp_path / "p2"), ["ort-o2-int8"], preset="neon9")


def test_run_benchmark_measures_every_variant(teacher, dev, tmp_path):
    from compressor.bench.harness import BenchConfig
    from compressor.bench.suite import run_benchmark
    from compressor.export.onnx import export_onnx

    onnx_dir = str(tmp_path / "onnx")
    export_onnx(teacher, onnx_dir, parity=False)
    out = str(tmp_path / "results.json")
    config = BenchConfig(sentences=12, warmup=2, threads=[1, 2], batch_sizes=[4], throughput_batches=2,
                         memory=True)
    doc = run_benchmark([f"mine={onnx_dir}"], teacher=teacher, peers=["pytorch-fp32", "ort-o2-int8"],
                        config=config, dev=dev, out=out, command="test", log=lambda m: None)
    rows = doc["rows"]
    names = {r["name"] for r in rows}
    assert names == {"teacher", "mine", "ort-o2-int8"}   # the teacher in FP32 is the pytorch-fp32 peer
    for r in rows:
        assert all(k in r for k in REQUIRED)
        assert r["threads"] in (1, 2) and r["batch_size"] in (1, 4)
        if r["batch_size"] == 1:
            lat = r["latency_ms"]
            assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"] and r["sentences"] == 12
        else:
            assert r["throughput"] > 0
        assert r["value"] is not None and r["teacher_value"] is not None
        assert r["extra"]["peak_rss_mb"] > 10
    teacher_row = next(r for r in rows if r["name"] == "teacher")
    mine_row = next(r for r in rows if r["name"] == "mine")
    assert mine_row["value"] == teacher_row["value"] and mine_row["retention"] == 1.0  # same model, other engine
    assert next(r for r in rows if r["name"] == "ort-o2-int8")["extra"]["group"] == "peer"
    saved = read_results(out)
    assert saved["command"] == "test" and len(saved["rows"]) == len(rows)
    fp = saved["fingerprint"]
    assert fp["cores"] and "cpu_flags" in fp and fp["versions"]["onnxruntime"] and fp["cpu_preset"]


def test_bench_command_line_errors(tmp_path):
    from click.testing import CliRunner

    from compressor.cli import cli

    res = CliRunner().invoke(cli, ["bench", str(tmp_path / "nope"), "--out", str(tmp_path / "r.json")],
                             standalone_mode=False)
    assert isinstance(res.exception, CompressorError) and "model not found" in str(res.exception)
    res = CliRunner().invoke(cli, ["bench", "--out", str(tmp_path / "r.json"), "--peers", "none"],
                             standalone_mode=False)
    assert isinstance(res.exception, CompressorError) and "nothing to benchmark" in str(res.exception)


def test_recipe_ends_in_a_report_with_export_and_bench(teacher, tmp_path):
    from compressor.recipe import run_recipe, validate_recipe

    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"""name: tiny-report
task: sst2
data: {{dir: embedded, dev_limit: 40}}
teacher: {teacher}
stages:
  - export: {{}}
  - bench: {{sentences: 10, batch_sizes: [4], throughput_batches: 2, peers: [pytorch-fp32, ort-fp32], memory: false}}
""")
    assert validate_recipe(str(recipe)) == []
    out = str(tmp_path / "run")
    manifest = run_recipe(str(recipe), out, log=lambda m: None)
    assert [s["dir"] for s in manifest["stages"]] == ["00-teacher", "01-export", "02-bench"]
    assert manifest["stages"][1]["kind"] == "onnx"
    export_record = json.load(open(os.path.join(out, "01-export", "record.json")))
    assert export_record["parity"]["identical_predictions"] >= 0.995 and export_record["fusions"]["Attention"] == 2
    results = read_results(os.path.join(out, "02-bench", "results.json"))
    assert {r["name"] for r in results["rows"]} == {"00-teacher", "01-export", "ort-fp32"}
    md = open(os.path.join(out, "report.md")).read()
    assert "| 01-export | ours | onnxruntime |" in md and "**Peers**" in md and "report.png" in md
    html = open(os.path.join(out, "report.html")).read()
    assert "data:image/png;base64," in html and "<table>" in html
    # resuming skips every stage, the report is rewritten the same way
    manifest2 = run_recipe(str(recipe), out, log=lambda m: None)
    assert [s["fingerprint"] for s in manifest2["stages"]] == [s["fingerprint"] for s in manifest["stages"]]


def test_recipe_rejects_bad_bench_settings(tmp_path, teacher):
    from compressor.recipe import validate_recipe

    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"""name: bad
task: sst2
teacher: {teacher}
stages:
  - bench: {{sentences: many}}
""")
    problems = validate_recipe(str(recipe))
    assert problems and "sentences" in problems[0]


def test_export_stage_takes_an_onnx_folder(teacher, tmp_path):
    from compressor.recipe import run_recipe

    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"""name: twice
task: sst2
data: {{dir: embedded, dev_limit: 24}}
teacher: {teacher}
stages:
  - export: {{optimize: false}}
  - export: {{}}
""")
    manifest = run_recipe(str(recipe), str(tmp_path / "run"), log=lambda m: None)
    first, second = manifest["stages"][1], manifest["stages"][2]
    assert first["kind"] == second["kind"] == "onnx"
    assert second["score"] == first["score"] and second["size_bytes"] == first["size_bytes"]
    record = json.load(open(tmp_path / "run" / "02-export" / "record.json"))
    assert record["fusions"] is None and record["engine"] == "onnxruntime"   # carried over as it was


def test_inc_peer_quantises_and_still_classifies(teacher, dev):
    from compressor.bench.harness import Spec, build

    torch.set_num_threads(2)
    runner = build(Spec("inc-int8", teacher, "inc", "int8-static", extra={"data_dir": "embedded"}))
    texts = [ex.texts[0] for ex in dev.examples[:16]]
    logits = runner.logits(texts, batch_size=8)
    fp32 = build(Spec("fp32", teacher)).logits(texts, batch_size=8)
    assert np.abs(logits).max() > 0        # INC's uncalibrated dynamic path returns zeros; this one is calibrated
    assert np.abs(logits - fp32).max() < 0.05 * max(1.0, np.abs(fp32).max())


def test_bench_stage_times_a_pytorch_quantised_model(teacher, tmp_path):
    from compressor.recipe import run_recipe

    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"""name: torch-int8
task: sst2
data: {{dir: embedded, dev_limit: 24}}
teacher: {teacher}
stages:
  - quantize_torch: {{method: dynamic, preset: avx2}}
  - bench: {{sentences: 6, batch_sizes: [], peers: [], memory: false}}
""")
    out = tmp_path / "run"
    run_recipe(str(recipe), str(out), log=lambda m: None)
    rows = read_results(str(out / "02-bench" / "results.json"))["rows"]
    by = {r["name"]: r for r in rows}
    assert set(by) == {"00-teacher", "01-quantize_torch"}
    q = by["01-quantize_torch"]
    assert q["extra"]["precision"].startswith("int8") and q["latency_ms"]["p50"] > 0
    assert q["parameters"] == by["00-teacher"]["parameters"] and q["value"] is not None
