"""Deployment targets made from the ONNX export: OpenVINO IR (FP32, NNCF INT8, from an INT8 QDQ
graph) checked by loading it here against the ONNX graph on real dev rows, and a Triton model
repository whose config.pbtxt is parsed and checked against the graph (Triton itself does not
install here: the check is the layout and the config, not a server)."""
import os
import re

import numpy as np
import pytest
from click.testing import CliRunner

from compressor.core.errors import CompressorError

pytest.importorskip("openvino", reason="the openvino extra is missing: pip install 'compressor[openvino]'")

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def dev_texts():
    from compressor.core.data import get_task, load_split
    from compressor.export.onnx import example_texts

    return example_texts(load_split(get_task("sst2"), "dev", data_dir=os.environ["GLUE_DIR"], limit=24).examples)


def test_openvino_ir_matches_the_onnx_graph_and_runs_as_a_folder(export_dir, dev_texts, tmp_path):
    from compressor.export import export_model
    from compressor.export.runtime import Predictor, open_graph

    out = str(tmp_path / "ov")
    manifest = export_model(export_dir, out, format="openvino", parity_rows=24)
    assert sorted(f for f in os.listdir(out) if f.startswith("model.")) == ["model.bin", "model.xml"]
    assert manifest["format"] == "compressor-openvino/1" and manifest["precision"] == "fp32"
    p = manifest["parity"]
    assert p["examples"] == 24 and p["within_tolerance"] and p["identical_predictions"] == 1.0
    assert p["max_abs_logit_diff"] <= p["tolerance"] == 1e-3
    # the folder is what the toolkit's runtime opens; its answers are the ONNX graph's
    ir, onnx = open_graph(out), Predictor(export_dir)
    assert type(ir).__name__ == "OpenVINOPredictor"
    got, want = ir.logits(dev_texts, batch_size=8), onnx.logits(dev_texts, batch_size=8)
    assert np.abs(got - want).max() < 1e-3 and ir.predict(dev_texts) == onnx.predict(dev_texts)
    assert __import__("json").load(open(os.path.join(out, "compressor.json")))["kind"] == "openvino"


def test_nncf_int8_calibrates_on_training_rows(export_dir, dev_texts, tmp_path):
    import openvino as ov

    from compressor.export import export_model
    from compressor.export.runtime import Predictor, open_graph

    out = str(tmp_path / "ov8")
    manifest = export_model(export_dir, out, format="openvino", int8=True, calibration_rows=16, parity_rows=24)
    assert manifest["precision"] == "int8-static"
    assert manifest["openvino"]["calibration"]["split"] == "train"
    assert manifest["openvino"]["calibration"]["rows"] == 16
    assert manifest["openvino"]["calibration"]["data"].endswith(os.path.join("SST-2", "train.tsv"))
    ops = [op.get_type_name() for op in ov.Core().read_model(os.path.join(out, "model.xml")).get_ordered_ops()]
    assert ops.count("FakeQuantize") >= 8   # every Linear's input of the 2 layers, at least
    p = manifest["parity"]
    assert p["tolerance"] is None and p["ir_precision"] == "int8-static" and p["onnx_precision"] == "fp32"
    got, want = open_graph(out).logits(dev_texts, batch_size=1), Predictor(export_dir).logits(dev_texts, batch_size=1)
    assert 0 < np.abs(got - want).max() < 0.5   # quantised, and still the same classifier
    assert np.isclose(p["max_abs_logit_diff"], np.abs(got - want).max(), rtol=1e-3)


def test_int8_qdq_graph_converts_within_tolerance(checkpoint, tmp_path):
    from compressor.core.data import get_task, load_split
    from compressor.export import export_model
    from compressor.quantize import OrtStaticConfig, quantize

    task = get_task("sst2")
    qdq = str(tmp_path / "qdq")
    quantize(checkpoint, qdq, OrtStaticConfig(calibration_samples=16, preset="avx512_vnni"),
             train_set=load_split(task, "train", data_dir=os.environ["GLUE_DIR"], limit=16),
             dev_set=load_split(task, "dev", data_dir=os.environ["GLUE_DIR"], limit=8))
    manifest = export_model(qdq, str(tmp_path / "ov"), format="openvino", parity_rows=24)
    p = manifest["parity"]
    assert p["onnx_precision"] != "fp32" and p["tolerance"] == 5e-2
    assert p["within_tolerance"] and p["identical_predictions"] == 1.0
    with pytest.raises(CompressorError, match="already"):
        export_model(qdq, str(tmp_path / "ov2"), format="openvino", int8=True)


# -- Triton ------------------------------------------------------------------

def parse_pbtxt(text: str):
    """Protobuf text format as nested dicts (a repeated field: a list), independent of the writer."""
    tokens = re.findall(r'"(?:[^"\\]|\\.)*"|[{}\[\]:,]|[^\s{}\[\]:,"]+', text)
    pos = 0

    def value():
        nonlocal pos
        tok = tokens[pos]
        pos += 1
        if tok == "{":
            return message("}")
        if tok == "[":
            items = []
            while tokens[pos] != "]":
                items.append(value())
                if tokens[pos] == ",":
                    pos += 1
            pos += 1
            return items
        if tok.startswith('"'):
            return tok[1:-1]
        return int(tok) if re.fullmatch(r"-?\d+", tok) else tok

    def message(end):
        nonlocal pos
        fields = {}
        while pos < len(tokens) and tokens[pos] != end:
            name = tokens[pos]
            pos += 1
            if tokens[pos] == ":":
                pos += 1
            v = value()
            if name in fields:
                fields[name] = (fields[name] if isinstance(fields[name], list) else [fields[name]]) + [v]
            else:
                fields[name] = v
        pos += 1
        return fields

    return message(None)


ORT_TO_TRITON = {"tensor(int64)": "TYPE_INT64", "tensor(float)": "TYPE_FP32", "tensor(int32)": "TYPE_INT32"}


def test_triton_repository_matches_the_graph(export_dir, dev_texts, tmp_path):
    import onnxruntime as ort

    from compressor.export import export_model
    from compressor.export.runtime import Predictor

    out = tmp_path / "repo"
    export_model(export_dir, str(out), format="triton", model_name="sst2_bert", max_batch_size=16,
                 preferred_batch_sizes=[4, 16], max_queue_delay_us=500)
    assert os.listdir(out) == ["sst2_bert"]
    model = out / "sst2_bert"
    assert (model / "1" / "model.onnx").read_bytes() == open(os.path.join(export_dir, "model.onnx"), "rb").read()
    config = parse_pbtxt((model / "config.pbtxt").read_text())
    assert config["name"] == "sst2_bert" and config["backend"] == "onnxruntime"
    assert config["max_batch_size"] == 16
    assert config["dynamic_batching"] == {"preferred_batch_size": [4, 16], "max_queue_delay_microseconds": 500}
    assert config["instance_group"] == [{"count": 1, "kind": "KIND_CPU"}]
    # names, types and shapes as the graph has them (the batch axis is Triton's, left out of dims)
    session = ort.InferenceSession(str(model / "1" / "model.onnx"), providers=["CPUExecutionProvider"])
    for declared, real in ((config["input"], session.get_inputs()), (config["output"], session.get_outputs())):
        assert [t["name"] for t in declared] == [r.name for r in real]
        for t, r in zip(declared, real):
            assert t["data_type"] == ORT_TO_TRITON[r.type]
            assert isinstance(r.shape[0], str)   # a dynamic batch axis, which Triton's batching needs
            assert t["dims"] == [d if isinstance(d, int) else -1 for d in r.shape[1:]]
    assert config["output"][0]["dims"] == [2] and config["output"][0]["label_filename"] == "labels.txt"
    assert (model / "labels.txt").read_text().split() == ["0", "1"]
    # the model folder is also one the toolkit runs: a client can check the server's answers
    assert Predictor(str(model)).predict(dev_texts) == Predictor(export_dir).predict(dev_texts)


def test_cli_writes_both_targets_from_a_checkpoint(checkpoint, tmp_path):
    from compressor.cli import cli

    runner = CliRunner()
    res = runner.invoke(cli, ["export", checkpoint, "--format", "openvino", "--out", str(tmp_path / "ov"),
                              "--parity-limit", "8"])
    assert res.exit_code == 0, res.output
    assert "OpenVINO IR (fp32)" in res.output and "parity on 8 dev rows" in res.output
    res = runner.invoke(cli, ["export", checkpoint, "--format", "triton", "--out", str(tmp_path / "repo"),
                              "--triton-threads", "2"])
    assert res.exit_code == 0, res.output
    config = parse_pbtxt((tmp_path / "repo" / "repo" / "config.pbtxt").read_text())
    assert config["parameters"] == {"key": "intra_op_thread_count", "value": {"string_value": "2"}}
    # the temporary ONNX exports went away
    assert sorted(os.listdir(tmp_path)) == ["ov", "repo"]


@pytest.mark.parametrize("args, message", [
    (["--format", "triton", "--int8"], "--int8 is an option of --format openvino"),
    (["--format", "openvino", "--max-batch-size", "4"], "--max-batch-size is an option of --format triton"),
    (["--format", "triton", "--preferred-batch-sizes", "8,64"], "must lie in 1..32"),
    (["--format", "triton", "--model-name", "a/b"], "Triton model name"),
])
def test_bad_input_is_one_line(export_dir, tmp_path, args, message):
    from compressor.cli import cli

    res = CliRunner().invoke(cli, ["export", export_dir, "--out", str(tmp_path / "x")] + args)
    assert res.exit_code != 0 and message in res.output
    assert "Traceback" not in res.output and len(res.output.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()


def test_openvino_folder_is_not_a_graph_to_convert_again(export_dir, tmp_path):
    from compressor.export import export_model

    ov_dir = str(tmp_path / "ov")
    export_model(export_dir, ov_dir, format="openvino", parity_rows=0)
    with pytest.raises(CompressorError, match="compressor-openvino/1 folder, not one ONNX graph"):
        export_model(ov_dir, str(tmp_path / "repo"), format="triton")


def test_missing_extra_names_the_pip_command(export_dir, tmp_path, monkeypatch):
    import sys

    from compressor.export import export_model

    for name in ("openvino", "nncf"):
        monkeypatch.setitem(sys.modules, name, None)   # import openvino: ImportError, as where it is missing
    with pytest.raises(CompressorError, match=r"needs openvino: pip install 'compressor\[openvino\]'"):
        export_model(export_dir, str(tmp_path / "ov"), format="openvino")
    assert not (tmp_path / "ov").exists()


# -- the benchmark's OpenVINO peers ------------------------------------------------

@pytest.mark.e2e
def test_openvino_peers_are_timed_and_scored_in_their_own_processes(checkpoint, tmp_path):
    """openvino-fp32 and openvino-int8 of the teacher, each in a worker process of its own; the
    FP32 IR scores what the ONNX export scores (same model, another engine), the INT8 one is NNCF's."""
    from compressor.bench.harness import BenchConfig
    from compressor.bench.peers import peer_specs
    from compressor.bench.suite import run_benchmark
    from compressor.core.data import load_split
    from compressor.export.onnx import score_onnx

    dev = load_split("sst2", "dev", data_dir=os.environ["GLUE_DIR"], limit=32)
    work = str(tmp_path / "peers")
    specs = peer_specs(checkpoint, work, ["openvino-fp32", "openvino-int8"], data_dir=os.environ["GLUE_DIR"])
    assert [(s.name, s.engine, s.precision) for s in specs] == [
        ("openvino-fp32", "openvino", "fp32"), ("openvino-int8", "openvino", "int8-static")]
    config = BenchConfig(sentences=8, warmup=2, threads=[1], batch_sizes=[4], throughput_batches=2, memory=False)
    doc = run_benchmark(specs=specs, peers=(), config=config, dev=dev, out=str(tmp_path / "results.json"),
                        command="test", log=lambda m: None)
    rows = {(r["name"], r["batch_size"]): r for r in doc["rows"]}
    assert set(rows) == {(n, b) for n in ("openvino-fp32", "openvino-int8") for b in (1, 4)}
    for name in ("openvino-fp32", "openvino-int8"):
        assert rows[name, 1]["engine"] == "openvino" and rows[name, 1]["extra"]["group"] == "peer"
        assert 0 < rows[name, 1]["latency_ms"]["p50"] and rows[name, 4]["throughput"] > 0
        assert rows[name, 1]["extra"]["timing"]["isolation"].split()[0] == "process"
    plain = 100 * score_onnx(os.path.join(work, "ort-fp32"), dev)["accuracy"]   # rows give percent
    assert rows["openvino-fp32", 1]["value"] == plain
    assert rows["openvino-int8", 1]["value"] is not None
    assert doc["fingerprint"]["versions"]["openvino"]
