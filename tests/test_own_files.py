"""A model trained on the user's own files goes through every command without being told the
files again (its compressor.json records them: absolute path, sha256, columns); a file that
moved is one line, a changed one a warning line; predict writes label names and probabilities."""
import json
import re
import shutil

import pytest

from compressor.cli import main
from conftest import save_sst2_classifier, write_reviews

pytestmark = pytest.mark.integration

QUICK = ["--batch-size", "16", "--max-length", "16", "--device", "cpu"]


def run_cli(capsys, *args):
    """(exit code, stdout, stderr) of one command."""
    code = 0
    try:
        main([str(a) for a in args])
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def ok(capsys, *args):
    code, out, err = run_cli(capsys, *args)
    assert code in (0, None), f"{args[0]} failed ({code}):\n{out}\n{err}"
    return out, err


def one_line_error(code, err, message):
    lines = [l for l in err.strip().splitlines() if not l.startswith("note: ")]
    assert code == 1 and len(lines) == 1 and lines[0].startswith("error: "), err
    assert message in lines[0], err
    assert "Traceback" not in err


@pytest.fixture(scope="module")
def reviews(tmp_path_factory):
    root = tmp_path_factory.mktemp("reviews")
    return root, write_reviews(root / "train.csv", 400), write_reviews(root / "dev.csv", 32, start=400)


def test_a_csv_model_goes_through_every_command_with_no_data_flags(tiny_models, reviews, tmp_path,
                                                                  capsys, monkeypatch):
    root, train, dev = reviews
    teacher, student, pruned = tmp_path / "rev", tmp_path / "rev-student", tmp_path / "rev-pruned"
    onnx, int8 = tmp_path / "rev-onnx", tmp_path / "rev-int8"
    monkeypatch.setenv("COMPRESSOR_PROGRESS", "1")   # the dev lines print with the progress
    out, err = ok(capsys, "finetune", "--model", tiny_models["bert"], "--train-file", train,
                  "--dev-file", dev, "--text-column", "review", "--label-column", "sentiment",
                  "--out", teacher, "--epochs", "3", "--lr", "2e-3", *QUICK)
    # one line per dev evaluation as training goes: step, metric, score
    evaluations = re.findall(r"finetune sentiment step (\d+)/75: dev accuracy [\d.]+, score [\d.]+", err)
    assert evaluations == ["25", "50", "75"], err
    monkeypatch.setenv("COMPRESSOR_PROGRESS", "0")
    meta = json.loads((teacher / "compressor.json").read_text())
    assert meta["task"] == "sentiment"   # named after its label column, not the file stem 'train'
    files = meta["data_files"]
    assert files["train"]["path"] == train and files["dev"]["path"] == dev
    assert len(files["train"]["sha256"]) == 64
    assert files["text_columns"] == ["review"] and files["label_column"] == "sentiment"
    assert json.loads((teacher / "metrics.json").read_text())["score"] > 90

    ok(capsys, "distill", "--teacher", teacher, "--out", student, "--student", "num_layers=1",
       "--epochs", "2", "--lr", "2e-3", *QUICK)
    ok(capsys, "prune", "--model", student, "--out", pruned, "--set", "heads=0.5", "--set", "ffn=0.5",
       "--set", "device=cpu", "--recover", "epochs=1", "--recover", "device=cpu")
    out, _ = ok(capsys, "export", pruned, "--out", onnx, "--parity-limit", "8")
    assert "parity on 8 dev rows" in out
    out, _ = ok(capsys, "quantize", onnx, "--out", int8, "--method", "static", "--train-limit", "32")
    assert "sentiment dev: accuracy" in out and "(32 examples" in out
    for folder in (student, pruned, onnx, int8):   # carried into every folder made from it
        assert json.loads((folder / "compressor.json").read_text())["data_files"] == files, folder
    record = json.loads((int8 / "quantize.json").read_text())
    assert record["examples"] == 32 and record["score"] is not None
    out, _ = ok(capsys, "quantize", onnx, "--out", tmp_path / "dyn")   # dynamic: scored too
    assert json.loads((tmp_path / "dyn" / "quantize.json").read_text())["examples"] == 32

    bench = tmp_path / "bench" / "bench.json"
    out, _ = ok(capsys, "bench", int8, "--sentences", "8", "--batch-sizes", "none", "--no-memory",
                "--block", "8", "--pause", "0", "--out", bench)
    rows = json.loads(bench.read_text())["rows"]
    assert rows and all(r["value"] is not None for r in rows)   # each variant scored on the dev file

    out, _ = ok(capsys, "eval", pruned, "--out", tmp_path / "eval.json")
    assert "sentiment dev: accuracy" in out and "(32 examples" in out
    assert json.loads((tmp_path / "eval.json").read_text())["data"] == dev

    # predictions are the user's own label names; probabilities on request
    texts = tmp_path / "texts.csv"
    texts.write_text('review\n"the film was awful, and long 2"\n""\n"the film was great, and long 3"\n')
    ok(capsys, "predict", onnx, "--onnx", "--input", texts, "--output", tmp_path / "p.tsv", "--probabilities")
    lines = (tmp_path / "p.tsv").read_text().splitlines()
    assert lines[0] == "index\tprediction\tp_neg\tp_pos"
    assert [l.split("\t")[1] for l in lines[1:]] == ["neg", "", "pos"]
    assert lines[2] == "3\t\t\t"


def test_a_moved_or_changed_file_is_one_line(tiny_models, tmp_path, capsys):
    root = tmp_path / "data"
    root.mkdir()
    train, dev = write_reviews(root / "train.csv", 32), write_reviews(root / "dev.csv", 16, start=32)
    model = tmp_path / "m"
    ok(capsys, "finetune", "--model", tiny_models["bert"], "--train-file", train, "--dev-file", dev,
       "--text-column", "review", "--label-column", "sentiment",
       "--task", "reviews", "--out", model, "--max-steps", "2", *QUICK)
    assert json.loads((model / "compressor.json").read_text())["task"] == "reviews"   # --task names it

    moved = tmp_path / "elsewhere.csv"
    shutil.move(dev, moved)
    for command in (["eval", model], ["export", model, "--out", tmp_path / "x"],
                    ["distill", "--teacher", model, "--out", tmp_path / "s", "--max-steps", "1", *QUICK]):
        code, _, err = run_cli(capsys, *command)
        one_line_error(code, err, f"the dev file {dev} that {model}/compressor.json records is gone")
        assert "--dev-file" in err
    # --dev-file points elsewhere; the recorded columns still apply
    out, _ = ok(capsys, "export", model, "--out", tmp_path / "x", "--dev-file", moved, "--parity-limit", "4")
    assert "parity on 4 dev rows" in out

    shutil.copy(moved, dev)
    with open(dev, "a") as f:
        f.write('"the film was nice, and long 3",pos\n')
    out, err = ok(capsys, "eval", model, "--out", tmp_path / "e.json")
    warnings = [l for l in err.splitlines() if l.startswith("warning: ")]
    assert len(warnings) == 1 and f"{dev} has changed since" in warnings[0] and "sha256" in warnings[0]
    assert "(17 examples" in out


def test_predict_writes_label_names_and_probabilities(minilm_dir, tmp_path, capsys):
    model = save_sst2_classifier(tmp_path / "sst2", minilm_dir, max_length=32)
    texts = tmp_path / "texts.tsv"
    texts.write_text("sentence\na warm and funny film\n\ndull and far too long\n")
    ok(capsys, "predict", model, "--input", texts, "--output", tmp_path / "p.tsv", "--device", "cpu")
    lines = (tmp_path / "p.tsv").read_text().splitlines()
    assert lines[0] == "index\tprediction" and len(lines) == 4
    assert {l.split("\t")[1] for l in lines[1:]} - {""} <= {"negative", "positive"}
    assert lines[2].split("\t")[1] == ""   # an empty row is not labelled

    out, _ = ok(capsys, "predict", model, "--input", texts, "--output", tmp_path / "p.tsv",
                "--probabilities", "--device", "cpu")
    assert "2 rows labelled" in out and "1 row(s) with no text left unlabelled" in out
    rows = [l.split("\t") for l in (tmp_path / "p.tsv").read_text().splitlines()]
    assert rows[0] == ["index", "prediction", "p_negative", "p_positive"]
    for row in (rows[1], rows[3]):
        p = [float(x) for x in row[2:]]
        assert sum(p) == pytest.approx(1, abs=1e-3)
        assert row[1] == ("negative", "positive")[p.index(max(p))]
    assert rows[2] == ["3", "", "", ""]


def test_probabilities_of_a_regression_task_are_one_line(tmp_path, capsys, minilm_dir):
    import transformers

    from compressor.core.data import get_task
    from compressor.core.models import checkpoint_meta, save_checkpoint
    from conftest import tiny_config

    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    config = tiny_config("bert")
    config.vocab_size, config.num_labels = tokenizer.vocab_size, 1
    model = transformers.AutoModelForSequenceClassification.from_config(config)
    save_checkpoint(model, tokenizer, str(tmp_path / "stsb"), checkpoint_meta(get_task("stsb"), 32, "test"))
    texts = tmp_path / "pairs.csv"
    texts.write_text("sentence1,sentence2\na,b\n")
    code, _, err = run_cli(capsys, "predict", tmp_path / "stsb", "--input", texts, "--output",
                           tmp_path / "p.tsv", "--probabilities", "--device", "cpu")
    one_line_error(code, err, "task stsb predicts a score (regression): it has no class probabilities")


@pytest.mark.parametrize("column, name", [("sentiment", "sentiment"), ("label", "custom"),
                                          ("target", "custom"), ("sst2", "custom")])
def test_an_unnamed_own_file_task_is_named_after_its_label_column(column, name):
    from compressor.core.data.userfiles import default_task_name

    assert default_task_name(column) == name
