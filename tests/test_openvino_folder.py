"""An OpenVINO IR folder (``compressor export --format openvino``) as a model the toolkit takes:
kind ``openvino`` in the loader registry, so ``bench`` times and scores it on OpenVINO (as the
openvino peers run), ``eval`` and ``predict`` score and label it, ``serve`` serves it, and the
commands that need PyTorch weights say so in one line. A tiny random BERT, a few dev rows."""
import os
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from compressor.core.errors import CompressorError

pytest.importorskip("openvino", reason="the openvino extra is missing: pip install 'compressor[openvino]'")

pytestmark = pytest.mark.unit   # each under 2 s once the module's export is made


@pytest.fixture(scope="module")
def ov_dir(tmp_path_factory, export_dir):
    from compressor.export import export_model

    out = str(tmp_path_factory.mktemp("ov") / "ov")
    export_model(export_dir, out, format="openvino", parity_rows=0)
    return out


@pytest.fixture(scope="module")
def dev(glue_dir):
    from compressor.core.data import get_task, load_split

    return load_split(get_task("sst2"), "dev", data_dir=glue_dir, limit=12)


def test_the_folder_is_kind_openvino_and_runs_as_its_predictor(ov_dir, dev):
    from compressor.core.loaders import kind_of, loader_for
    from compressor.core.models import load_for_task
    from compressor.export.onnx import example_texts
    from compressor.export.runtime import open_graph

    loader = loader_for(kind_of(ov_dir), ov_dir)
    assert (loader.kind, loader.engine, loader.pytorch) == ("openvino", "openvino", False)
    model, tokenizer = load_for_task(ov_dir, dev.task, pytorch=False)
    assert model.engine == "openvino" and model.config.num_labels == 2
    texts = example_texts(dev.examples)
    ids = tokenizer(texts[:1])["input_ids"][0]
    import torch

    got = model(torch.tensor([ids])).logits.numpy()
    want = open_graph(ov_dir).logits(texts[:1], batch_size=1)
    assert np.allclose(got, want, atol=1e-5)
    # training and the PyTorch stages need weights: one line naming the checkpoint it came from
    with pytest.raises(CompressorError, match="is an OpenVINO IR folder .*not a PyTorch checkpoint"):
        load_for_task(ov_dir, dev.task)


def test_a_missing_openvino_is_one_line_naming_the_extra(ov_dir, monkeypatch):
    from compressor.bench.suite import specs_for
    from compressor.core.models import load_for_task

    monkeypatch.setitem(sys.modules, "openvino", None)   # import openvino: ImportError, as where it is missing
    extra = r"is an OpenVINO IR folder, which needs openvino: pip install 'compressor\[openvino\]'"
    with pytest.raises(CompressorError, match=extra):
        load_for_task(ov_dir, pytorch=False)
    with pytest.raises(CompressorError, match=extra):
        specs_for(ov_dir)


def test_bench_times_and_scores_the_folder_on_openvino(ov_dir, export_dir, dev):
    from compressor.bench.harness import BenchConfig
    from compressor.bench.suite import run_benchmark, specs_for
    from compressor.export.onnx import score_onnx

    spec, = specs_for(ov_dir, "ov")
    assert (spec.engine, spec.precision, spec.device) == ("openvino", "fp32", "cpu")
    assert spec.size_bytes == sum(os.path.getsize(os.path.join(ov_dir, f)) for f in ("model.xml", "model.bin"))
    assert spec.parameters and specs_for(ov_dir, device="cuda") == []   # graphs run on the CPU
    config = BenchConfig(sentences=4, batch_sizes=[2], throughput_batches=1, memory=False, block=4, pause_s=0.0)
    doc = run_benchmark([f"ov={ov_dir}", f"onnx={export_dir}"], peers=[], config=config, dev=dev)
    rows = {(r["name"], r["batch_size"]): r for r in doc["rows"]}
    assert set(rows) == {(n, b) for n in ("ov", "onnx") for b in (1, 2)}
    ov = rows["ov", 1]
    assert ov["engine"] == "openvino" and ov["latency_ms"]["p50"] > 0 and ov["extra"]["scored_rows"] == len(dev)
    # scored as the ONNX graph it came from (FP32 IR: the same labels on these rows)
    assert ov["value"] == rows["onnx", 1]["value"] == 100 * score_onnx(export_dir, dev)["accuracy"]


def test_eval_predict_and_serve_take_the_folder(ov_dir, export_dir, glue_dir, tmp_path):
    from compressor.cli import cli

    runner = CliRunner()
    res = runner.invoke(cli, ["eval", ov_dir, "--data-dir", glue_dir, "--limit", "12",
                              "--out", str(tmp_path / "eval")])
    assert res.exit_code == 0, res.output
    record = __import__("json").load(open(tmp_path / "eval" / "eval.json"))
    assert record["engine"] == "openvino" and record["examples"] == 12
    rows = tmp_path / "in.tsv"
    rows.write_text("sentence\na fine , warm film\ndull and far too long\n")

    def predict(model, name, *flags):
        res = runner.invoke(cli, ["predict", model, "--input", str(rows), "--out", str(tmp_path / name), *flags])
        assert res.exit_code == 0, res.output
        return (tmp_path / name / "predictions.tsv").read_text()

    # labelled as the ONNX graph it came from labels them, through torch's path and without torch
    want = predict(export_dir, "onnx", "--onnx")
    assert predict(ov_dir, "ov") == predict(ov_dir, "ov-onnx", "--onnx") == want
    first = want.splitlines()[1].split("\t")[1]
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from compressor.serve.app import create_app

    with TestClient(create_app(ov_dir)) as c:
        answer = c.post("/predict", json={"inputs": "a fine , warm film"}).json()
    assert answer[0]["label"] == first


def test_report_on_the_folder_says_to_benchmark_it_first(ov_dir, export_dir):
    from compressor.bench.report import collect

    with pytest.raises(CompressorError, match=r"is an OpenVINO IR folder .*not a run folder; benchmark it first"):
        collect([ov_dir])
    with pytest.raises(CompressorError, match="is an ONNX export, not a run folder"):
        collect([export_dir])
