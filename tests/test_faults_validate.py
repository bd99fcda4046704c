"""Faults a user met late or not at all: recipe settings `validate` let through, and silent surprises.

Each case goes through the command line (``compressor.cli.main``): one ``error:`` line (for
``recipe validate``, one ``FILE:LINE:`` line per problem), exit status 1, no traceback.
"""
import os
import textwrap

import pytest

from compressor.cli import main
from conftest import save_sst2_classifier, write_reviews

pytestmark = pytest.mark.unit


def run_cli(capsys, *args):
    with pytest.raises(SystemExit) as exit_info:
        main([str(a) for a in args])
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


def one_line_error(code, err, message):
    assert code == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert message in lines[0], err
    assert "Traceback" not in err


def write_recipe(tmp_path, body, name="r.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body).lstrip())
    return str(path)


def validate(capsys, path):
    """The problem lines of ``compressor recipe validate`` (it must refuse the recipe)."""
    code, out, err = run_cli(capsys, "recipe", "validate", path)
    assert code == 1 and "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert lines and all(line.startswith(f"{path}:") for line in lines), err
    return lines


def has(lines, path, line, message):
    return any(l.startswith(f"{path}:{line}:") and message in l for l in lines)


HEAD = "name: t\ntask: sst2\nteacher: {model: m}\n"


# -- recipe settings whose legal values are known are checked by `validate`, with their line --------

@pytest.mark.parametrize("body, line, message", [
    (HEAD + "stages:\n  - bench: {peers: [pytorch-fp32, tensorrt]}\n", 5, "unknown peer 'tensorrt'"),
    # the bench preset is the quantize stage's list: avx512 was bench's own spelling
    (HEAD + "stages:\n  - bench:\n      preset: avx512\n", 6,
     "unknown preset 'avx512'; use avx2, avx512_vnni, amx, arm64, auto"),
    (HEAD + "device: tpu\n", 4, "unknown device 'tpu'"),
    (HEAD + "stages:\n  - finetune: {epochs: 1, device: tpu}\n", 5, "unknown device 'tpu'"),
    (HEAD + "stages:\n  - evaluate:\n      split: validation\n", 6, "unknown split 'validation'; use dev, train"),
    (HEAD + "stages:\n  - distill:\n      student: {kind: layers, num_layers: 0}\n", 6,
     "num_layers must be at least 1; leave it out for half the teacher's layers"),
], ids=["bench-peer", "bench-preset", "device-tpu", "stage-device-tpu", "split-validation",
        "num-layers-0"])
def test_validate_refuses_settings_run_would_fail_on(capsys, tmp_path, body, line, message):
    path = write_recipe(tmp_path, body)
    lines = validate(capsys, path)
    assert has(lines, path, line, message), lines


def test_bench_and_quantize_presets_are_one_list(tmp_path):
    """A preset the quantize stage takes, the bench stage takes (and the other way round)."""
    from compressor.recipe import validate_recipe
    from compressor.core.presets import PRESET_NAMES

    for preset in PRESET_NAMES:
        path = write_recipe(tmp_path, HEAD + f"stages:\n  - bench: {{preset: {preset}}}\n"
                                            f"  - quantize: {{preset: {preset}}}\n")
        assert validate_recipe(path) == [], preset


@pytest.mark.parametrize("stage, problems", [
    ("finetune:\n      epochs: many\n      batch_size: 2.5\n      precision: fp8\n      device: tpu\n",
     [(6, "epochs must be a number"), (7, "batch_size must be an integer"),
      (8, "unknown precision 'fp8'"), (9, "unknown device 'tpu'")]),
    ("quantize:\n      method: fppp\n      preset: avx3\n      calibration: sometimes\n",
     [(6, "method 'fppp' is not available"), (7, "unknown preset 'avx3'"),
      (8, "unknown calibration 'sometimes'")]),
    ("bench:\n      peers: [tensorrt]\n      preset: avx512\n      engines: [onnx]\n",
     [(6, "unknown peer 'tensorrt'"), (7, "unknown preset 'avx512'"), (8, "unknown engine 'onnx'")]),
], ids=["finetune", "quantize", "bench"])
def test_every_error_in_a_stage_is_reported(capsys, tmp_path, stage, problems):
    path = write_recipe(tmp_path, HEAD + "stages:\n  - " + stage)
    lines = validate(capsys, path)
    assert len(lines) == len(problems), lines
    for line, message in problems:
        assert has(lines, path, line, message), (line, message, lines)


# -- tiny task checkpoints ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def sst2_checkpoint(tmp_path_factory, minilm_dir):
    return save_sst2_classifier(tmp_path_factory.mktemp("ckpt") / "bert-sst2", minilm_dir, max_length=32)


@pytest.fixture(scope="module")
def sst2_export(tmp_path_factory, sst2_checkpoint):
    from compressor.export import export_onnx

    out = str(tmp_path_factory.mktemp("exp") / "bert")
    export_onnx(sst2_checkpoint, out, optimize=False, parity=False)
    return out


def test_run_validates_the_whole_recipe_before_any_stage(capsys, tmp_path, sst2_checkpoint):
    path = write_recipe(tmp_path, f"""
        name: late
        task: sst2
        data: {{dir: embedded, dev_limit: 8}}
        device: cpu
        teacher: {sst2_checkpoint}
        stages:
          - evaluate: {{split: dev}}
          - bench: {{peers: [tensorrt], sentences: 4, memory: false}}
        """)
    out = tmp_path / "run"
    code, _, err = run_cli(capsys, "run", path, "--out", out)
    assert code == 1 and "Traceback" not in err
    assert err.strip().splitlines() == [f"error: {path}:8: stage 'bench': unknown peer 'tensorrt'; use "
                                        "pytorch-fp32, pytorch-int8, ort-fp32, ort-o2, ort-o2-int8, inc-int8, "
                                        "openvino-fp32, openvino-int8"]
    assert not out.exists()  # not even the teacher was scored


# -- predict: never over the input; every row labelled -----------------------------------------

def _model(kind, sst2_checkpoint, sst2_export):
    return [sst2_export, "--onnx"] if kind == "onnx" else [sst2_checkpoint, "--device", "cpu"]


@pytest.mark.parametrize("kind", ["pytorch", "onnx"])
def test_predict_never_writes_over_its_input(capsys, tmp_path, monkeypatch, sst2_checkpoint, sst2_export,
                                             kind):
    data = tmp_path / "texts.csv"
    data.write_text("sentence\na fine film\na dull mess\n")
    before = data.read_text()
    model = _model(kind, sst2_checkpoint, sst2_export)
    monkeypatch.chdir(tmp_path)
    link = tmp_path / "link.csv"
    link.symlink_to(data)
    for output in (data, "texts.csv", "./sub/../texts.csv", link):
        (tmp_path / "sub").mkdir(exist_ok=True)
        code, _, err = run_cli(capsys, "predict", *model, "--input", data, "--output", output)
        one_line_error(code, err, "is the input file")
        assert data.read_text() == before
    # a user's other file is not overwritten either; a predictions file of an earlier run is
    other = tmp_path / "notes.txt"
    other.write_text("my notes\n")
    code, _, err = run_cli(capsys, "predict", *model, "--input", data, "--output", other)
    one_line_error(code, err, "already exists and is not a predictions file")
    assert other.read_text() == "my notes\n"
    preds = tmp_path / "preds.tsv"
    for _ in range(2):
        main(["predict", *model, "--input", str(data), "--output", str(preds)])
    assert preds.read_text().splitlines()[0] == "index\tprediction"


@pytest.mark.parametrize("kind", ["pytorch", "onnx"])
@pytest.mark.parametrize("ext", ["csv", "tsv"])
def test_blank_and_empty_rows_are_kept_unlabelled(capsys, tmp_path, sst2_checkpoint, sst2_export, kind, ext):
    """14 rows in, 14 rows out: an empty text ("" in a CSV) or a blank line between rows is a row,
    which gets an empty prediction (it is not labelled); the other 12 are."""
    rows = [f"text number {i}" for i in range(12)]
    empty = '""' if ext == "csv" else ""
    data = tmp_path / f"texts.{ext}"
    data.write_text("sentence\n" + "\n".join(rows[:5] + [empty] + rows[5:9] + [""] + rows[9:]) + "\n\n")
    out = tmp_path / "p.tsv"
    main(["predict", *_model(kind, sst2_checkpoint, sst2_export), "--input", str(data),
          "--output", str(out)])
    printed = capsys.readouterr().out
    assert "12 rows labelled" in printed and "2 row(s) with no text left unlabelled" in printed
    lines = out.read_text().splitlines()
    assert len(lines) == 15 and lines[0] == "index\tprediction"
    assert [l.split("\t")[0] for l in lines[1:]] == [str(n) for n in range(2, 16)]  # the input's lines
    assert [n for n, l in enumerate(lines[1:], 2) if l.split("\t")[1] == ""] == [7, 12]


# -- training --------------------------------------------------------------------------------------

def test_mixed_label_vocabularies_are_refused(capsys, tmp_path, tiny_models):
    train = tmp_path / "train.csv"
    write_reviews(train, 16)
    text = train.read_text().splitlines()
    mixed = [text[0]] + [l.replace(",pos", ",1").replace(",neg", ",0") if i % 2 else l
                         for i, l in enumerate(text[1:])]
    train.write_text("\n".join(mixed) + "\n")
    out = tmp_path / "ckpt"
    code, _, err = run_cli(capsys, "finetune", tiny_models["bert"], "--train-file", train,
                           "--dev-file", train, "--text-column", "review", "--label-column", "sentiment",
                           "--max-steps", "1", "--device", "cpu", "--out", out)
    one_line_error(code, err, f"{train}: the labels mix numbers (0, 1) and names (neg, pos)")
    assert not out.exists()


def test_diverged_weights_end_the_run_without_a_checkpoint(capsys, tmp_path, tiny_models, glue_dir):
    base = ["finetune", tiny_models["bert"], "--task", "sst2", "--data-dir", glue_dir,
            "--train-limit", "16", "--dev-limit", "16", "--batch-size", "16", "--max-length", "32",
            "--max-steps", "1", "--device", "cpu"]
    out = tmp_path / "blown"
    code, _, err = run_cli(capsys, *base, "--lr", "1e6", "--out", out)
    one_line_error(code, err, "training diverged at step 1")
    assert "learning rate 1e+06 is probably too high" in err
    assert not out.exists()
    # ordinary training is untouched by the check
    main(base + ["--lr", "1e-3", "--out", str(tmp_path / "fine")])
    assert os.path.isfile(tmp_path / "fine" / "model.safetensors")


def test_num_layers_0_is_refused_at_the_command_line(capsys, tmp_path, sst2_checkpoint):
    code, _, err = run_cli(capsys, "distill", sst2_checkpoint, "--out", tmp_path / "s",
                           "--data-dir", "embedded", "--student", "kind=layers", "--student", "num_layers=0",
                           "--max-steps", "1", "--device", "cpu")
    one_line_error(code, err, "num_layers must be at least 1; leave it out for half the teacher's layers")
    assert not (tmp_path / "s").exists()
