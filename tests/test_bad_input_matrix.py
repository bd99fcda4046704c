"""The bad-input matrix: what a user gets wrong at the command line, and what they see.

Every case runs the real ``compressor`` entry point and must end with exactly one
``error:`` line on stderr that names what is wrong (and where), a non-zero exit,
no traceback, and nothing half-written (no temporary names left behind). The
README's "Bad input and faults" section lists the same cases.
"""
import os
import shutil

import pytest

from compressor.cli import main

pytestmark = pytest.mark.unit


def _sst2(tmp, glue, train_lines=None, name="glue"):
    """A GLUE folder with SST-2 whose train.tsv is ``train_lines`` (default: 40 real rows)."""
    root = tmp / name
    (root / "SST-2").mkdir(parents=True)
    with open(os.path.join(glue, "SST-2", "train.tsv")) as f:
        real = f.readlines()
    lines = real[:40] if train_lines is None else train_lines(real)
    (root / "SST-2" / "train.tsv").write_text("".join(lines))
    shutil.copy(os.path.join(glue, "SST-2", "dev.tsv"), root / "SST-2" / "dev.tsv")
    return str(root)


def _file(tmp, name, text):
    path = tmp / name
    path.write_text(text)
    return str(path)


def _corrupt_copy(tmp, src, name, filename, data):
    dst = tmp / name
    shutil.copytree(src, dst)
    (dst / filename).write_bytes(data)
    return str(dst)


def _other_run(tmp):
    (tmp / "other").mkdir()
    _file(tmp / "other", "manifest.json", '{"recipe": "other", "task": "sst2", "stages": []}')
    return str(tmp / "other")


def _recipe(tmp, body, name="r.yaml"):
    return _file(tmp, name, body)


REVIEWS = "review,sentiment\n" + "".join(
    f'"the film was {w}",{"pos" if w in ("good", "great") else "neg"}\n'
    for w in ("good", "bad", "great", "awful") * 5)

# (case id, arguments given {tmp, glue, bert}, what the error line must contain)
CASES = [
    # --- models and folders ---
    ("eval-missing-checkpoint", lambda f: ["eval", str(f.tmp / "nope")], "checkpoint not found"),
    ("eval-corrupt-weights", lambda f: ["eval", _corrupt_copy(
        f.tmp, f.bert, "bad", "model.safetensors", b"\0" * 64), "--task", "sst2",
        "--data-dir", f.glue], "corrupt checkpoint"),
    ("eval-config-not-json", lambda f: ["eval", _corrupt_copy(
        f.tmp, f.bert, "badcfg", "config.json", b"{ not json"), "--task", "sst2",
        "--data-dir", f.glue], "badcfg"),
    ("eval-file-not-folder", lambda f: ["eval", _file(f.tmp, "m.txt", "x"), "--task", "sst2"],
     "m.txt"),
    ("finetune-missing-model", lambda f: ["finetune", str(f.tmp / "nope"), "--task",
                                          "sst2", "--out", str(f.tmp / "o")], "not found"),
    ("finetune-nonempty-out", lambda f: ["finetune", f.bert, "--task", "sst2", "--out",
                                         os.path.dirname(_file(f.tmp, "mine.txt", "x")),
                                         "--data-dir", f.glue], "is not empty"),
    ("export-nonempty-out", lambda f: ["export", f.bert, "--out",
                                       os.path.dirname(_file(f.tmp, "mine.txt", "x"))],
     "is not empty"),
    ("quantize-nonempty-out", lambda f: ["quantize", f.bert, "--task", "sst2", "--out",
                                         os.path.dirname(_file(f.tmp, "mine.txt", "x"))],
     "is not empty"),
    ("distill-nonempty-out", lambda f: ["distill", f.bert, "--task", "sst2", "--out",
                                        os.path.dirname(_file(f.tmp, "mine.txt", "x"))],
     "is not empty"),
    ("distill-missing-teacher", lambda f: ["distill", str(f.tmp / "nope"), "--out",
                                           str(f.tmp / "o")], "not found"),
    ("export-missing-checkpoint", lambda f: ["export", str(f.tmp / "nope"), "--out",
                                             str(f.tmp / "o")], "not found"),
    ("quantize-missing-model", lambda f: ["quantize", str(f.tmp / "nope"), "--out",
                                          str(f.tmp / "o")], "not found"),
    ("bench-missing-model", lambda f: ["bench", str(f.tmp / "nope"), "--out",
                                       str(f.tmp / "r")], "nope"),
    ("predict-onnx-not-an-export", lambda f: ["predict", f.bert, "--onnx", "--input",
                                              _file(f.tmp, "in.txt", "good\n"), "--out",
                                              str(f.tmp / "out"), "--text-column", "text"],
     "not an ONNX export"),
    ("report-nothing-to-report", lambda f: ["report", str(f.tmp), "--out", str(f.tmp / "rep")],
     "work"),
    # --- tasks, splits, data folders ---
    ("finetune-unknown-task", lambda f: ["finetune", f.bert, "--task", "sst9", "--out",
                                         str(f.tmp / "o")], "unknown task 'sst9'"),
    ("finetune-folder-without-task", lambda f: ["finetune", f.bert, "--task", "rte",
                                                "--out", str(f.tmp / "o"), "--data-dir",
                                                str(f.tmp)], "no RTE/train.tsv under"),
    ("finetune-data-dir-missing", lambda f: ["finetune", f.bert, "--task", "sst2",
                                             "--out", str(f.tmp / "o"), "--data-dir",
                                             str(f.tmp / "nodata")], "nodata"),
    ("eval-unknown-split", lambda f: ["eval", f.bert, "--task", "sst2", "--split", "validation",
                                      "--data-dir", f.glue], "validation"),
    ("tsv-row-label-not-a-class", lambda f: ["finetune", f.bert, "--task", "sst2",
                                             "--out", str(f.tmp / "o"), "--data-dir", _sst2(
                                                 f.tmp, f.glue, lambda r: r[:2] + ["a fine film\tpositive\n"] + r[3:40])],
     "train.tsv:3:"),
    ("tsv-row-too-few-columns", lambda f: ["finetune", f.bert, "--task", "sst2",
                                           "--out", str(f.tmp / "o"), "--data-dir", _sst2(
                                               f.tmp, f.glue, lambda r: r[:5] + ["only-one-column\n"] + r[6:40])],
     "train.tsv:6:"),
    ("tsv-header-only", lambda f: ["finetune", f.bert, "--task", "sst2", "--out",
                                   str(f.tmp / "o"), "--data-dir",
                                   _sst2(f.tmp, f.glue, lambda r: r[:1])], "train.tsv"),
    ("train-limit-zero", lambda f: ["finetune", f.bert, "--task", "sst2", "--out",
                                    str(f.tmp / "o"), "--data-dir", f.glue, "--train-limit", "0"],
     "train"),
    ("dev-limit-zero", lambda f: ["finetune", f.bert, "--task", "sst2", "--out",
                                  str(f.tmp / "o"), "--data-dir", f.glue, "--dev-limit", "0", "--train-limit", "40"],
     "dev"),
    # --- the user's own files ---
    ("own-files-without-text-column", lambda f: ["finetune", f.bert, "--train-file",
                                                 _file(f.tmp, "t.csv", REVIEWS), "--out",
                                                 str(f.tmp / "o")], "--text-column"),
    ("own-file-missing", lambda f: ["finetune", f.bert, "--train-file",
                                    str(f.tmp / "none.csv"), "--text-column", "review",
                                    "--label-column", "sentiment", "--out", str(f.tmp / "o")],
     "none.csv"),
    ("own-file-unknown-column", lambda f: ["finetune", f.bert, "--train-file",
                                           _file(f.tmp, "t.csv", REVIEWS), "--text-column", "body",
                                           "--label-column", "sentiment", "--out",
                                           str(f.tmp / "o")], "body"),
    ("own-file-bad-jsonl-line", lambda f: ["finetune", f.bert, "--train-file",
                                           _file(f.tmp, "t.jsonl", '{"text": "a", "label": 1}\n{oops\n'),
                                           "--text-column", "text", "--out", str(f.tmp / "o")],
     "t.jsonl:2"),
    ("own-file-mixed-label-kinds", lambda f: ["finetune", f.bert, "--train-file",
                                              _file(f.tmp, "mixed.csv", "text,label\na,0\nb,1\nc,neg\nd,pos\n"),
                                              "--text-column", "text", "--out", str(f.tmp / "o")],
     "mixed.csv"),
    ("predict-input-missing", lambda f: ["predict", f.bert, "--input", str(f.tmp / "none.tsv"),
                                         "--out", str(f.tmp / "p"), "--task", "sst2"],
     "none.tsv"),
    ("predict-output-is-input", lambda f: ["predict", f.bert, "--task", "sst2", "--input",
                                           _file(f.tmp, "in.csv", "text\ngood\nbad\n"),
                                           "--output", str(f.tmp / "in.csv"), "--text-column",
                                           "text"], "in.csv"),
    # --- settings ---
    ("cuda-where-there-is-none", lambda f: ["finetune", f.bert, "--task", "sst2",
                                            "--out", str(f.tmp / "o"), "--data-dir", f.glue,
                                            "--device", "cuda", "--train-limit", "40"], "CUDA"),
    ("unknown-device", lambda f: ["finetune", f.bert, "--task", "sst2", "--out",
                                  str(f.tmp / "o"), "--data-dir", f.glue, "--device", "tpu", "--train-limit", "40"],
     "tpu"),
    ("unknown-precision", lambda f: ["finetune", f.bert, "--task", "sst2", "--out",
                                     str(f.tmp / "o"), "--data-dir", f.glue, "--precision", "fp8", "--train-limit", "40"],
     "fp8"),
    ("distill-unknown-student-kind", lambda f: ["distill", f.bert, "--out",
                                                str(f.tmp / "o"), "--student", "kind=giant"],
     "giant"),
    ("distill-unknown-loss", lambda f: ["distill", f.bert, "--out", str(f.tmp / "o"),
                                        "--loss", "telepathy=1"], "telepathy"),
    ("distill-zero-layers", lambda f: ["distill", f.bert, "--out", str(f.tmp / "o"),
                                       "--student", "num_layers=0", "--data-dir", f.glue, "--train-limit", "40"],
     "num_layers"),
    ("distill-loss-weight-not-a-number", lambda f: ["distill", f.bert, "--out",
                                                    str(f.tmp / "o"), "--loss", "kd=lots"], "lots"),
    ("quantize-unknown-method", lambda f: ["quantize", f.bert, "--out", str(f.tmp / "o"),
                                           "--method", "int3"], "int3"),
    ("bench-unknown-peer", lambda f: ["bench", f.bert, "--teacher", f.bert, "--peers", "ort-o9",
                                      "--out", str(f.tmp / "r")], "ort-o9"),
    ("batch-size-zero", lambda f: ["finetune", f.bert, "--task", "sst2", "--out",
                                   str(f.tmp / "o"), "--data-dir", f.glue, "--batch-size", "0",
                                   "--train-limit", "40"], "batch"),
    ("eval-limit-zero", lambda f: ["eval", f.bert, "--task", "sst2", "--data-dir", f.glue,
                                   "--limit", "0"], "limit"),
    ("predict-unknown-text-column", lambda f: ["predict", f.bert, "--task", "sst2", "--input",
                                               _file(f.tmp, "in.csv", "text\ngood\n"), "--out",
                                               str(f.tmp / "p"), "--text-column", "body"],
     "body"),
    ("unknown-option", lambda f: ["finetune", "--modle", f.bert], "--modle"),
    ("option-not-a-number", lambda f: ["finetune", f.bert, "--task", "sst2", "--out",
                                       str(f.tmp / "o"), "--epochs", "many"], "many"),
    ("unknown-command", lambda f: ["shrink", f.bert], "shrink"),
    # --- recipes ---
    ("recipe-file-missing", lambda f: ["run", str(f.tmp / "none.yaml"), "--out", str(f.tmp / "o")],
     "none.yaml"),
    ("recipe-not-yaml", lambda f: ["run", _recipe(f.tmp, "task: sst2\nstages: [finetune: {\n"),
                                   "--out", str(f.tmp / "o")], "r.yaml:"),
    ("recipe-unknown-stage", lambda f: ["run", _recipe(f.tmp, "task: sst2\nteacher: {model: m}\n"
                                                              "stages:\n  - shrink: {}\n"),
                                        "--out", str(f.tmp / "o")], "r.yaml:4: unknown stage"),
    ("recipe-unknown-key", lambda f: ["run", _recipe(f.tmp, f"task: sst2\nteacher: {f.bert}\nteachr: x\n"),
                                      "--out", str(f.tmp / "o")], "r.yaml:3: recipe has no setting 'teachr'"),
    ("recipe-impossible-order", lambda f: ["run", _recipe(
        f.tmp, "task: sst2\nteacher: {model: m}\nstages:\n  - export: {}\n  - distill: {}\n"),
        "--out", str(f.tmp / "o")], "r.yaml:5:"),
    ("recipe-bench-unknown-peer", lambda f: ["run", _recipe(
        f.tmp, "task: sst2\nteacher: {model: m}\nstages:\n  - export: {}\n"
               "  - bench: {peers: [ort-o9]}\n"), "--out", str(f.tmp / "o")], "r.yaml:5:"),
    ("recipe-unknown-device", lambda f: ["run", _recipe(
        f.tmp, f"task: sst2\ndevice: tpu\nteacher: {f.bert}\n"), "--out", str(f.tmp / "o")],
     "r.yaml:2:"),
    ("recipe-unknown-split", lambda f: ["run", _recipe(
        f.tmp, f"task: sst2\nteacher: {f.bert}\nstages:\n  - evaluate: {{split: validation}}\n"),
        "--out", str(f.tmp / "o")], "r.yaml:4:"),
    ("run-out-is-a-file", lambda f: ["run", _recipe(f.tmp, f"task: sst2\nteacher: {f.bert}\n"),
                                     "--out", _file(f.tmp, "o.txt", "x")], "o.txt"),
    ("run-out-of-another-recipe", lambda f: ["run", _recipe(f.tmp, f"task: sst2\nteacher: {f.bert}\n"),
                                             "--out", _other_run(f.tmp),
                                             "--data-dir", f.glue], "holds a run of recipe 'other'"),
    ("run-teacher-base-encoder-without-finetune", lambda f: [
        "run", _recipe(f.tmp, f"task: sst2\nteacher: {{model: {f.bert}}}\n"), "--out",
        str(f.tmp / "o"), "--data-dir", f.glue], "base encoder with no task head"),
    ("validate-missing-file", lambda f: ["recipe", "validate", str(f.tmp / "none.yaml")],
     "none.yaml"),
]


class _Fixtures:
    def __init__(self, tmp, glue, bert):
        self.tmp, self.glue, self.bert = tmp, glue, bert


@pytest.mark.parametrize("case, args, message", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line(case, args, message, tmp_path, glue_dir, tiny_models, capsys,
                               monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    work = tmp_path / "work"
    work.mkdir()
    argv = args(_Fixtures(work, glue_dir, tiny_models["bert"]))
    before = _tree(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    _, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert exit_info.value.code not in (0, None), (case, err)
    assert "Traceback" not in err, err
    assert len(lines) == 1 and lines[0].startswith("error: "), (case, err)
    assert message in lines[0], (case, lines[0])
    after = _tree(tmp_path)
    left = [p for p in after - before if ".tmp-" in p or p.endswith(".tmp")]
    assert not left, f"half-written files left behind: {left}"


def _tree(root):
    found = set()
    for base, dirs, files in os.walk(root):
        for name in dirs + files:
            found.add(os.path.join(base, name))
    return found


def test_the_matrix_has_more_than_fifty_cases():
    assert len(CASES) > 50
