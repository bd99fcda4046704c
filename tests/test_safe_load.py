"""Nothing in a user's folder is unpickled: quantised PyTorch folders are safetensors plus a recipe.

A pickle runs code when it is loaded. The payload here writes a marker file
when unpickled; every test checks that the marker never appears and that the
user sees one ``error:`` line.
"""
import io
import json
import os
import shutil
import zipfile

import pytest
import torch

from compressor.cli import main
from compressor.core.data import get_task
from compressor.core.errors import CompressorError
from compressor.core.models import checkpoint_meta, load_for_task, save_checkpoint
from compressor.quantize import load_quantized, resolve_preset
from compressor.quantize.torch_int8 import quantize_torchao, save_quantized
from test_cli import assert_one_line_error

SST2 = get_task("sst2")
PICKLE_SUFFIXES = (".pt", ".pt2", ".pth", ".bin", ".pkl", ".pickle", ".ckpt")
TEXTS = ["a fine, warm film", "dull and far too long , with nothing to say", "ok"]


class Payload:
    """Unpickling this creates the file ``marker``: what an attacker's code would do."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory, tiny_models):
    """A tiny random BERT SST-2 classifier (the shared tiny encoder with a head)."""
    torch.manual_seed(0)
    net, tok = load_for_task(tiny_models["bert"], SST2)
    with torch.no_grad():  # logits large enough that any difference shows
        net.classifier.weight.mul_(20)
    path = str(tmp_path_factory.mktemp("safe") / "ckpt")
    save_checkpoint(net, tok, path, checkpoint_meta(SST2, 64, "test"))
    return path


@pytest.fixture(scope="module")
def torchao_folder(ckpt, tmp_path_factory):
    """A torchao dynamic INT8 folder, and the in-memory model it was saved from."""
    net, tok = load_for_task(ckpt, SST2)
    preset = resolve_preset("avx2")
    quantize_torchao(net.eval(), preset)
    out = str(tmp_path_factory.mktemp("ao") / "q")
    info = {"method": "dynamic", "backend": "torchao", "preset": preset.to_dict(), "exclude": [],
            "weight_only": False}
    save_quantized(net, tok, out, checkpoint_meta(SST2, 64, "test"), info)
    return out, net, tok


def logits(net, tok):
    feed = tok(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        return net(**feed).logits


def assert_no_pickle(folder):
    """Every file is JSON, text or safetensors: nothing that a loader would unpickle."""
    from safetensors import safe_open

    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        assert not name.lower().endswith(PICKLE_SUFFIXES), name
        if name.endswith(".safetensors"):
            with safe_open(path, framework="pt") as f:
                assert list(f.keys())
        else:
            open(path, encoding="utf-8").read()  # text, not a pickle or a zip archive


def pt2_payload(path, marker):
    """A torch.export archive whose one weight is a pickle (``use_pickle``): ``torch.export.load`` runs it."""
    torch.export.save(torch.export.export(torch.nn.Linear(2, 2), (torch.zeros(1, 2),)), path)
    with zipfile.ZipFile(path) as z:
        files = {n: z.read(n) for n in z.namelist()}
    config_name = next(n for n in files if n.endswith("weights_config.json"))
    config = json.loads(files[config_name])
    entry = config["config"]["weight"]
    entry["use_pickle"] = True
    buffer = io.BytesIO()
    torch.save(Payload(marker), buffer)
    files[config_name] = json.dumps(config).encode()
    files[os.path.dirname(config_name) + "/" + entry["path_name"]] = buffer.getvalue()
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)


def bench_cli(capsys, tmp_path, folder, glue_dir):
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", folder, "--peers", "none", "--no-memory", "--no-score", "--sentences", "2",
              "--batch-sizes", "none", "--task", "sst2", "--data-dir", glue_dir,
              "--out", str(tmp_path / "results")])
    return exit_info.value.code, capsys.readouterr().err


def test_torchao_int8_reloads_identically_without_pickle(torchao_folder):
    out, net, tok = torchao_folder
    assert_no_pickle(out)
    assert sorted(f for f in os.listdir(out) if f.endswith(".safetensors")) == ["model_int8.safetensors"]
    loaded, loaded_tok = load_quantized(out)
    weight = loaded.bert.encoder.layer[0].intermediate.dense.weight
    assert type(weight) is type(net.bert.encoder.layer[0].intermediate.dense.weight)
    assert type(weight).__name__ != "Parameter"
    assert torch.equal(logits(loaded, loaded_tok), logits(net, tok))

    # honest size: the Linear layers' int8 data and per-row scales, about 1/4 of their FP32 weights
    from safetensors.torch import load_file

    saved = load_file(os.path.join(out, "model_int8.safetensors"))
    quantised = {k.split(":")[0] for k in saved if ":" in k}
    assert len(quantised) == 2 * 6 + 2  # 6 Linear layers per encoder layer, the pooler, the classifier
    int8_bytes = sum(t.numel() * t.element_size() for k, t in saved.items() if ":" in k)
    fp32_bytes = sum(net.get_submodule(k.rsplit(".", 1)[0]).weight.numel() * 4 for k in quantised)
    assert all(saved[k + ":qdata"].dtype == torch.int8 for k in quantised)
    assert int8_bytes < 0.3 * fp32_bytes


def test_torchao_weight_only_reloads_identically(ckpt, tmp_path):
    net, tok = load_for_task(ckpt, SST2)
    preset = resolve_preset("avx512_vnni")
    quantize_torchao(net.eval(), preset, exclude=["classifier"], weight_only=True)
    out = str(tmp_path / "q")
    save_quantized(net, tok, out, checkpoint_meta(SST2, 64, "test"),
                   {"method": "weight_only", "backend": "torchao", "preset": preset.to_dict(),
                    "exclude": ["classifier"], "weight_only": True})
    loaded, _ = load_quantized(out)
    assert type(loaded.classifier.weight) is torch.nn.Parameter  # excluded: stays FP32
    assert torch.equal(logits(loaded, tok), logits(net, tok))


@pytest.mark.parametrize("method,alpha,strict", [("static", 0.5, False), ("dynamic", 0.0, True)])
def test_inc_reloads_identically_without_pickle(ckpt, tmp_path, monkeypatch, method, alpha, strict):
    """The reload exports non-strictly; the dynamic case is saved from a strict export (as INC's own
    ``export`` made every folder before): both name the same observers, so old folders reload."""
    from compressor.quantize import inc

    net, tok = load_for_task(ckpt, SST2)
    fp32 = logits(net, tok)
    feeds = [dict(tok(t, return_tensors="pt")) for t in TEXTS * 2]
    prepared = inc._prepared
    with monkeypatch.context() as patch:
        patch.setattr(inc, "_prepared", lambda *a, **k: prepared(*a, **k, strict=strict))
        wrapped, calibration = inc.quantize_inc(net, feeds, method, alpha)
    out = str(tmp_path / "q")
    info = {"method": "inc", "backend": "inc", "preset": resolve_preset("avx2").to_dict(), "exclude": [],
            "inc_method": method, "calibration_samples": len(feeds), "smoothquant_alpha": alpha,
            "smoothed_linears": wrapped.smoothed_linears}
    save_quantized(net, tok, out, checkpoint_meta(SST2, 64, "test"), info, calibration=calibration)
    assert_no_pickle(out)
    assert not os.path.exists(os.path.join(out, "model.pt2"))
    loaded, loaded_tok = load_quantized(out)
    assert torch.equal(logits(loaded, loaded_tok), logits(wrapped, tok))
    # calibrated, INC's INT8 model follows the FP32 one (not the all-zero outputs of its trap)
    assert (logits(loaded, loaded_tok) - fp32).abs().max() <= 0.1 * fp32.abs().max()


def test_old_torchao_pickle_is_refused_and_never_run(torchao_folder, tmp_path, capsys, glue_dir):
    folder = tmp_path / "old"
    shutil.copytree(torchao_folder[0], folder)
    for weights in folder.glob("model_int8.*"):
        weights.unlink()
    marker = tmp_path / "pwned"
    torch.save({"bert.embeddings.word_embeddings.weight": Payload(marker)}, folder / "model_int8.pt")

    with pytest.raises(Exception) as err:
        load_quantized(str(folder))
    assert not marker.exists(), "the pickle ran"
    assert isinstance(err.value, CompressorError)
    assert "model_int8.pt: a pickle file, which compressor never loads" in str(err.value)
    code, err = bench_cli(capsys, tmp_path, str(folder), glue_dir)
    assert_one_line_error(code, err, f"{folder / 'model_int8.pt'}: a pickle file, which compressor never "
                                     "loads (it could run code); re-create the folder with compressor quantize")
    assert not marker.exists()


def test_old_inc_export_archive_is_refused_and_never_run(torchao_folder, tmp_path, capsys, glue_dir):
    folder = tmp_path / "old-inc"
    shutil.copytree(torchao_folder[0], folder)
    for weights in folder.glob("model_int8.*"):
        weights.unlink()
    info = json.loads((folder / "quantization.json").read_text())
    info.update(method="inc", inc_method="static", smoothed_linears=0)
    (folder / "quantization.json").write_text(json.dumps(info))
    marker = tmp_path / "pwned"
    pt2_payload(str(folder / "model.pt2"), marker)

    with pytest.raises(Exception) as err:
        load_quantized(str(folder))
    assert not marker.exists(), "the pickle ran"
    assert isinstance(err.value, CompressorError) and "model.pt2: a torch.export archive" in str(err.value)
    code, err = bench_cli(capsys, tmp_path, str(folder), glue_dir)
    assert_one_line_error(code, err, f"{folder / 'model.pt2'}: a torch.export archive")
    assert not marker.exists()


def test_export_load_would_run_the_payload(tmp_path):
    """Why INC folders no longer hold model.pt2: torch.export.load unpickles what the archive says."""
    marker = tmp_path / "pwned"
    pt2_payload(str(tmp_path / "model.pt2"), marker)
    with pytest.raises(Exception):
        torch.export.load(str(tmp_path / "model.pt2"))
    assert marker.exists()


def test_checkpoint_pickle_never_runs(ckpt, tmp_path, capsys, glue_dir):
    # safetensors present: read from them only, the pickle beside them never opened
    both = tmp_path / "both"
    shutil.copytree(ckpt, both)
    marker = tmp_path / "pwned"
    torch.save({"x": Payload(marker)}, both / "pytorch_model.bin")
    load_for_task(str(both), SST2)
    assert not marker.exists()
    # only a pickle: transformers' restricted torch.load refuses the payload, and the user is told why
    only = tmp_path / "only"
    shutil.copytree(both, only)
    os.remove(only / "model.safetensors")
    with pytest.raises(SystemExit) as exit_info:
        main(["eval", str(only), "--task", "sst2", "--data-dir", glue_dir])
    assert_one_line_error(exit_info.value.code, capsys.readouterr().err,
                          f"{only / 'pytorch_model.bin'}: a pickle that holds more than tensors")
    assert not marker.exists()
