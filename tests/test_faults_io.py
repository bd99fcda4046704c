"""Faults of files and folders end in one line, never a traceback or a half-written folder.

A full disk while a checkpoint, an export or a recipe stage is written; a truncated
``model.onnx``; a GLUE file with a header only and row limits of 0; an ONNX export
given where a PyTorch checkpoint is expected (scored or refused, never "corrupt").
"""
import errno
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch
import transformers

from compressor.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EMBEDDED_DEV = os.path.join(ROOT, "compressor", "core", "data", "embedded", "sst2", "dev.tsv")
EMBEDDED_TRAIN = os.path.join(ROOT, "compressor", "core", "data", "embedded", "sst2", "train.tsv")
FAST = ["--epochs", "1", "--batch-size", "16", "--max-length", "32", "--device", "cpu"]



@pytest.fixture(scope="module")
def truncated(tmp_path_factory, export_dir):
    """An export whose model.onnx is the first 100 bytes of a real one (a copy cut short)."""
    out = str(tmp_path_factory.mktemp("bad") / "bert")
    shutil.copytree(export_dir, out)
    with open(os.path.join(export_dir, "model.onnx"), "rb") as f:
        head = f.read(100)
    with open(os.path.join(out, "model.onnx"), "wb") as f:
        f.write(head)
    return out


def one_line_error(capsys, argv) -> str:
    """Run the CLI; it must exit 1 with exactly one ``error:`` line and no traceback."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 1, err
    assert "Traceback" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, err
    return errors[0]


def no_temp_left(root) -> None:
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            assert ".tmp-" not in name, os.path.join(folder, name)


def write(path, text) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip())
    return str(path)


# -- a full disk ----------------------------------------------------------------

def _safetensors_full(*args, **kwargs):
    from safetensors import SafetensorError

    # what safetensors 0.8 raises when the disk fills up under it
    raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")


def _oserror_full(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("case", ["finetune", "export", "run"])
def test_disk_full_is_one_line_and_leaves_nothing_half_written(case, checkpoint, tmp_path, capsys,
                                                                monkeypatch):
    out = str(tmp_path / "out")
    if case == "finetune":
        monkeypatch.setattr(transformers.modeling_utils, "safe_save_file", _safetensors_full)
        argv = ["finetune", checkpoint, "--task", "sst2", "--out", out, "--data-dir", "embedded",
                "--train-limit", "16", "--dev-limit", "16", *FAST]
        written = out
    elif case == "export":  # where the exporters write the graph (optimum's and torch.onnx alike)
        monkeypatch.setattr(torch.onnx, "export", _oserror_full)
        argv = ["export", checkpoint, "--out", out, "--no-parity"]
        written = out
    else:
        monkeypatch.setattr(transformers.modeling_utils, "safe_save_file", _oserror_full)
        recipe = write(tmp_path / "r.yaml", f"""
            name: full
            task: sst2
            data: {{dir: embedded, train_limit: 16, dev_limit: 16}}
            device: cpu
            teacher:
              model: {checkpoint}
            stages:
              - finetune: {{epochs: 1, batch_size: 16, max_length: 32}}
            """)
        argv = ["run", recipe, "--out", out]
        written = os.path.join(out, "01-finetune")
    line = one_line_error(capsys, argv)
    assert line.startswith(f"error: no space left on device while writing {written} ("), line
    assert not os.path.exists(written)
    no_temp_left(tmp_path)
    if case == "run":  # the finished stage stays, so a re-run resumes after it
        assert os.path.isfile(os.path.join(out, "00-teacher", "record.json"))


# -- a truncated model.onnx -------------------------------------------------------

@pytest.mark.parametrize("command", ["predict", "quantize", "bench"])
def test_truncated_onnx_is_one_line_naming_the_file(command, truncated, tmp_path, capsys):
    model = os.path.join(truncated, "model.onnx")
    out = str(tmp_path / "out")
    argv = {
        "predict": ["predict", truncated, "--onnx", "--input", EMBEDDED_DEV, "--output", out],
        "quantize": ["quantize", truncated, "--out", out, "--data-dir", "embedded", "--dev-limit", "8"],
        "bench": ["bench", truncated, "--out", out, "--data-dir", "embedded", "--peers", "none",
                  "--no-memory", "--no-score", "--sentences", "4", "--batch-sizes", "none"],
    }[command]
    line = one_line_error(capsys, argv)
    assert model in line and "truncated or corrupt" in line, line
    assert not os.path.exists(out)
    no_temp_left(tmp_path)


def test_truncated_onnx_in_the_runtime_command(truncated, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = ROOT
    res = subprocess.run([sys.executable, "-m", "compressor.export.runtime", truncated], input="a fine film\n",
                         capture_output=True, text=True, cwd=str(tmp_path), env=env)
    assert res.returncode == 1, res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and os.path.join(truncated, "model.onnx") in lines[0]


# -- empty training data and row limits of 0 --------------------------------------

@pytest.fixture(scope="module")
def header_only(tmp_path_factory):
    """GLUE folders whose SST-2 train (or dev) file holds its header and nothing else."""
    root = tmp_path_factory.mktemp("glue")
    with open(EMBEDDED_DEV) as f:
        dev = "".join(f.readlines()[:33])
    with open(EMBEDDED_TRAIN) as f:
        train = "".join(f.readlines()[:33])
    for name, files in {"train": {"train.tsv": "sentence\tlabel\n", "dev.tsv": dev},
                        "dev": {"train.tsv": train, "dev.tsv": "sentence\tlabel\n"}}.items():
        (root / name / "SST-2").mkdir(parents=True)
        for file, text in files.items():
            (root / name / "SST-2" / file).write_text(text)
    return {name: str(root / name) for name in ("train", "dev")}


@pytest.mark.parametrize("command, fault", [
    ("finetune", "header-only train"), ("distill", "header-only train"), ("eval", "header-only dev"),
    ("finetune", "--train-limit 0"), ("finetune", "--dev-limit 0"), ("distill", "--train-limit 0"),
    ("eval", "--limit 0"),
])
def test_no_rows_to_use_is_one_line_from_the_data_layer(command, fault, checkpoint, header_only, tmp_path,
                                                         capsys):
    out = str(tmp_path / "out")
    if fault.startswith("header-only"):
        split = fault.split()[1]
        data, limits, expected = header_only[split], [], f"SST-2/{split}.tsv: no data rows"
    else:
        flag = fault.split()[0]
        split = {"--train-limit": "train", "--dev-limit": "dev", "--limit": "dev"}[flag]
        data, limits, expected = "embedded", [flag, "0"], f"the {split} row limit must be at least 1, got 0"
    if command == "finetune":
        argv = ["finetune", checkpoint, "--task", "sst2", "--out", out, "--data-dir", data, *FAST]
    elif command == "distill":
        argv = ["distill", checkpoint, "--out", out, "--data-dir", data,
                "--student", "num_layers=1", *FAST]
    else:
        argv = ["eval", checkpoint, "--data-dir", data, "--out", out]
    if not fault.startswith("header-only"):
        argv += limits
    elif command != "eval":
        argv += ["--train-limit" if split == "dev" else "--dev-limit", "16"]
    line = one_line_error(capsys, argv)
    assert expected in line, line
    assert not os.path.exists(out)


# -- an ONNX export where a checkpoint was expected --------------------------------

def test_eval_scores_an_export_with_onnxruntime(checkpoint, export_dir, tmp_path, capsys):
    records = {}
    for name, model in (("onnx", export_dir), ("torch", checkpoint)):
        out = str(tmp_path / f"{name}.json")
        main(["eval", model, "--data-dir", "embedded", "--limit", "48", "--out", out])
        records[name] = json.load(open(out))
    assert records["onnx"]["engine"] == "onnxruntime"
    assert records["onnx"]["examples"] == 48 and records["onnx"]["task"] == "sst2"
    assert records["onnx"]["metrics"] == pytest.approx(records["torch"]["metrics"])
    assert "sst2 dev: accuracy" in capsys.readouterr().out


def test_predict_an_export_without_the_onnx_flag(export_dir, tmp_path):
    outs = {}
    for flag in ([], ["--onnx"]):
        out = str(tmp_path / f"p{len(flag)}.tsv")
        main(["predict", export_dir, *flag, "--input", EMBEDDED_DEV, "--output", out])
        outs[bool(flag)] = open(out).read()
    assert outs[False] == outs[True] and outs[False].startswith("index\tprediction\n")


@pytest.mark.parametrize("where", ["recipe teacher", "distill --teacher"])
def test_an_export_as_a_teacher_is_refused_naming_its_checkpoint(where, checkpoint, export_dir, tmp_path,
                                                                 capsys):
    out = str(tmp_path / "out")
    if where == "recipe teacher":
        recipe = write(tmp_path / "r.yaml", f"""
            name: onnx-teacher
            task: sst2
            data: {{dir: embedded, train_limit: 16, dev_limit: 16}}
            device: cpu
            teacher:
              model: {export_dir}
            stages:
              - evaluate: {{}}
            """)
        argv = ["run", recipe, "--out", out]
    else:
        argv = ["distill", export_dir, "--out", out, "--data-dir", "embedded",
                "--train-limit", "16", "--dev-limit", "16", *FAST]
    line = one_line_error(capsys, argv)
    assert f"{export_dir} is an ONNX export, not a PyTorch checkpoint" in line, line
    assert "teacher" in line and checkpoint in line, line  # what to give instead
    no_temp_left(tmp_path)
