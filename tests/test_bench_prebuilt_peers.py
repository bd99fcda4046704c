"""The benchmark's peers taken as already built from their work dir: what travels to another
machine (the GPU machine's server CPU, bench/experiments/openvino_server_cpu.sh) is the peers'
graphs and the plain export's folder without its graph, and nothing is exported or quantised again."""
import os

import pytest

from conftest import save_sst2_classifier

pytestmark = pytest.mark.unit


def _touch(path, data=b"x"):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def test_prebuilt_peers_need_no_plain_graph(tmp_path, minilm_dir, monkeypatch):
    import compressor.export.onnx as onnx_export
    from compressor.bench.peers import peer_specs

    def refuse(*args, **kwargs):
        raise AssertionError("the plain export was made again")

    monkeypatch.setattr(onnx_export, "export_onnx", refuse)
    teacher = save_sst2_classifier(tmp_path / "teacher", minilm_dir)
    work = tmp_path / "peers"
    _touch(work / "ort-fp32" / "manifest.json", b"{}")   # the tokenizer folder, no model.onnx
    _touch(work / "ort-o2-int8-amx" / "model_optimized_quantized.onnx", b"q" * 7)   # no ort-o2 beside it
    for name in ("openvino-fp32", "openvino-int8"):
        _touch(work / name / "model.xml")
        _touch(work / name / "model.bin", b"b" * 5)
    specs = peer_specs(teacher, str(work), ["ort-o2-int8", "openvino-fp32", "openvino-int8"], preset="amx")
    by = {s.name: s for s in specs}
    assert by["ort-o2-int8"].path == str(work / "ort-o2-int8-amx" / "model_optimized_quantized.onnx")
    assert by["ort-o2-int8"].tokenizer_path == str(work / "ort-fp32") and by["ort-o2-int8"].size_bytes == 7
    assert by["openvino-int8"].path == str(work / "openvino-int8") and by["openvino-int8"].size_bytes == 1 + 5  # xml + bin
    assert not (work / "ort-o2").exists() and not (work / "ort-fp32" / "model.onnx").exists()
    # a peer whose graph is missing is still made from the plain export
    with pytest.raises(AssertionError, match="plain export was made again"):
        peer_specs(teacher, str(work), ["ort-fp32"])
