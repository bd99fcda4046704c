"""Training rows held out from fine-tuning (``compressor finetune --holdout N``): recorded in the
checkpoint, taken back by everything made from it, left out of every later stage's training
rows, and what a mixed-precision search can choose on (``search_on: holdout``)."""
import json
import os
from dataclasses import replace

import pytest

from compressor.core.errors import CompressorError


@pytest.fixture(scope="module")
def teacher(tmp_path_factory, tiny_models, glue_dir):
    """A tiny BERT fine-tuned on SST-2's first 64 training rows, 16 of them held out."""
    from compressor.cli import main

    out = str(tmp_path_factory.mktemp("holdout") / "teacher")
    main(["finetune", tiny_models["bert"], "--task", "sst2", "--out", out, "--data-dir", glue_dir,
          "--train-limit", "64", "--dev-limit", "16", "--holdout", "16", "--epochs", "1",
          "--batch-size", "16", "--max-length", "32", "--device", "cpu"])
    return out


def texts(dataset):
    return [tuple(e.texts) for e in dataset.examples]


def test_finetune_records_the_rows_it_held_out_and_trains_without_them(teacher, glue_dir):
    from compressor.core.data import get_task, holdout, load_data

    metrics = json.load(open(os.path.join(teacher, "metrics.json")))
    meta = json.load(open(os.path.join(teacher, "compressor.json")))
    assert metrics["train_examples"] == 48 and meta["holdout"] == metrics["holdout"]
    assert meta["holdout"]["rows"] == 16 and meta["holdout"]["examples"] == 64 and meta["holdout"]["seed"] == 42
    # the whole split gives the same rows back: the first 64 were drawn from
    whole = load_data(get_task("sst2"), "train", glue_dir)
    rest, held = holdout.split(whole, meta["holdout"], teacher)
    first = load_data(get_task("sst2"), "train", glue_dir, 64)
    assert len(held) == 16 and set(texts(held)) <= set(texts(first))
    assert not set(texts(held)) & set(texts(rest)) and len(rest) == len(whole) - 16
    assert held.split.startswith("holdout")
    # other rows, or too few, are refused
    with pytest.raises(CompressorError, match="held out rows of another training file"):
        holdout.split(replace(whole, examples=whole.examples[1:]), meta["holdout"], teacher)
    with pytest.raises(CompressorError, match="has only 10: load the whole split"):
        holdout.split(replace(whole, examples=whole.examples[:10]), meta["holdout"], teacher)
    # the export of the teacher carries the record (its compressor.json copies the teacher's)
    assert holdout.record_of(teacher) == (meta["holdout"], teacher)


def test_a_recipe_trains_no_stage_on_the_held_rows_and_searches_on_them(teacher, tmp_path, glue_dir, monkeypatch):
    from compressor.core.data import get_task, holdout, load_data
    from compressor.quantize import sensitivity as sens
    from compressor.recipe import run_recipe
    from compressor.recipe.runner import StageContext
    from compressor.recipe.schema import load_recipe

    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"""name: holdout
task: sst2
data: {{train_limit: 40, dev_limit: 16}}
teacher: {teacher}
device: cpu
stages:
  - export: {{}}
  - quantize: {{method: mixed, max_drop: 100, search_on: holdout}}
""")
    loaded = load_recipe(str(recipe))
    ctx = StageContext(loaded, get_task("sst2"), glue_dir, teacher, teacher, str(tmp_path / "x"))
    train, held = ctx.split("train"), ctx.split("holdout")
    _, expected = holdout.split(load_data(get_task("sst2"), "train", glue_dir), holdout.record_of(teacher)[0], teacher)
    assert texts(held) == texts(expected) and len(train) == 40
    assert not set(texts(held)) & set(texts(train))
    seen = []
    real = sens.graph_outputs
    monkeypatch.setattr(sens, "graph_outputs", lambda folder, rows, *a, **k: seen.append(rows.split) or real(folder, rows, *a, **k))
    manifest = run_recipe(str(recipe), str(tmp_path / "run"), data_dir=glue_dir, log=lambda m: None)
    record = json.load(open(tmp_path / "run" / manifest["stages"][-1]["dir"] / "record.json"))
    assert record["search"]["search_on"] == "holdout" and record["search"]["search_rows"] == 16
    assert seen and all(s.startswith("holdout") for s in seen)     # dev never scored in the search
    assert record["split"] == "dev" and record["examples"] == 16
    assert "coarse_rows" not in record["search"]       # max_drop 100 is coarser than a row's 6.25 points
    # every stage that writes a model is scored on the held-out rows too, on dev's path (the INT8
    # graph in onnxruntime), against the teacher's score there; the report shows it
    from compressor.core.metrics import task_score
    from compressor.core.models import load_for_task
    from compressor.engine.scoring import score

    graph = str(tmp_path / "run" / manifest["stages"][-1]["dir"])
    net, tok = load_for_task(graph, get_task("sst2"), pytorch=False)
    expected_held = task_score(get_task("sst2"), score(net, tok, held, 128, device="cpu"))
    assert record["holdout"]["rows"] == 16 and record["holdout"]["score"] == pytest.approx(expected_held)
    teacher_record = json.load(open(tmp_path / "run" / "00-teacher" / "record.json"))
    assert record["holdout"]["teacher_score"] == teacher_record["holdout"]["score"]
    assert record["holdout"]["retention"] == pytest.approx(expected_held / teacher_record["holdout"]["score"], abs=1e-4)
    assert "| held-out | vs teacher (held-out) |" in (tmp_path / "run" / "report.md").read_text()


def test_a_tolerance_finer_than_one_search_row_is_named(glue_dir, capsys):
    """250 rows move an accuracy in steps of 0.4 points: a 0.3 tolerance keeps a unit FP32 for one
    changed prediction; row_step names that (the search puts it in its record, coarse_rows, and on
    stderr); 2,000 rows (0.05 points) and a regression task do not."""
    from compressor.core.data import get_task, load_data
    from compressor.quantize.api import row_step

    rte = load_data(get_task("rte"), "train", glue_dir, limit=250)
    step = row_step(rte, 0.3)
    assert step["row_points"] == 0.4 and "250 search rows" in step["note"]
    assert row_step(load_data(get_task("sst2"), "train", glue_dir, limit=2000), 0.3) is None
    assert row_step(rte, 0.5) is None
    assert row_step(load_data(get_task("stsb"), "train", glue_dir, limit=250), 0.3) is None   # regression


def test_distillation_from_such_a_teacher_leaves_its_rows_out(teacher, tmp_path, glue_dir, monkeypatch):
    from compressor.distill import DistillConfig, distill
    from compressor.engine import distiller

    trained_on = []
    real = distiller.fit
    monkeypatch.setattr(distiller, "fit", lambda model, tok, rows, *a, **k: trained_on.append(rows) or real(model, tok, rows, *a, **k))
    result = distill(teacher, str(tmp_path / "student"), task="sst2", data_dir=glue_dir, train_limit=64,
                     dev_limit=8, config=DistillConfig(train=dict(epochs=1, batch_size=16, max_length=32, device="cpu"),
                                                       student={"kind": "layers", "num_layers": 1},
                                                       losses={"kd": 1}))
    assert result["phases"][-1]["train_examples"] == 64          # the limit, counted after the 16 left out
    from compressor.core.data import get_task, holdout, load_data

    rest, _ = holdout.split(load_data(get_task("sst2"), "train", glue_dir), holdout.record_of(teacher)[0], teacher)
    assert texts(trained_on[0]) == texts(replace(rest, examples=rest.examples[:64]))
    _, held = holdout.split(load_data(get_task("sst2"), "train", glue_dir), holdout.record_of(teacher)[0], teacher)
    assert not set(texts(held)) & set(texts(trained_on[0]))
    assert set(texts(held)) <= set(texts(load_data(get_task("sst2"), "train", glue_dir, 64)))   # else this proves nothing
    # the student records the rows too (it never trained on them): work from it finds them there
    student = str(tmp_path / "student")
    assert holdout.record_of(student) == (holdout.record_of(teacher)[0], student)


def test_a_recipe_stage_folder_carries_the_held_rows_to_later_runs(teacher, tmp_path, glue_dir):
    """A stage's folder of one run is the input of another (token pruning on a chain's pruned
    student): that run's held-out choice needs the teacher's rows, which the folder records."""
    from compressor.core.data import holdout
    from compressor.recipe import run_recipe

    first = tmp_path / "first.yaml"
    first.write_text(f"""name: first
task: sst2
data: {{train_limit: 40, dev_limit: 16}}
teacher: {teacher}
device: cpu
stages:
  - prune: {{method: structured, heads: 0.5, ffn: 0.5, recover: {{mode: none}}}}
""")
    manifest = run_recipe(str(first), str(tmp_path / "run1"), data_dir=glue_dir, log=lambda m: None)
    pruned = str(tmp_path / "run1" / manifest["stages"][-1]["dir"])
    assert holdout.record_of(pruned) == (holdout.record_of(teacher)[0], pruned)
    second = tmp_path / "second.yaml"
    second.write_text(f"""name: second
task: sst2
data: {{train_limit: 40, dev_limit: 16}}
teacher: {pruned}
device: cpu
stages:
  - export: {{}}
  - quantize: {{method: auto, candidates: [dynamic, fp32], max_drop: 100, min_agreement: 0, search_on: holdout}}
""")
    manifest = run_recipe(str(second), str(tmp_path / "run2"), data_dir=glue_dir, log=lambda m: None)
    record = json.load(open(tmp_path / "run2" / manifest["stages"][-1]["dir"] / "record.json"))
    assert record["search"]["search_on"] == "holdout" and record["search"]["search_rows"] == 16


def test_bad_holdouts_are_one_line_errors(teacher, tiny_models, tmp_path, glue_dir, capsys):
    from test_cli import assert_one_line_error, run_cli

    code, _, err = run_cli(capsys, "finetune", tiny_models["bert"], "--task", "sst2", "--out",
                           str(tmp_path / "t"), "--data-dir", glue_dir, "--train-limit", "20", "--holdout", "20",
                           "--device", "cpu")
    assert_one_line_error(code, err, "holdout 20: the training split")
    assert not os.path.exists(tmp_path / "t")
    # a model whose teacher held nothing out has nothing to search on
    from conftest import save_sst2_classifier

    plain = save_sst2_classifier(tmp_path / "plain", tiny_models["bert"])
    code, _, err = run_cli(capsys, "quantize", plain, "--out", str(tmp_path / "q"), "--method", "mixed",
                           "--search-on", "holdout", "--data-dir", glue_dir, "--dev-limit", "8")
    assert_one_line_error(code, err, "search_on: holdout needs a model fine-tuned with --holdout N")
    assert not os.path.exists(tmp_path / "q")


def test_early_exit_can_calibrate_on_the_rows_the_teacher_held_out(teacher, tmp_path, glue_dir, capsys):
    """calibrate.split: holdout picks the threshold on rows neither the teacher nor its exits learned
    from; the exits train on every other training row (none taken for calibration)."""
    from compressor.exit import early_exit
    from test_cli import assert_one_line_error, run_cli

    record = early_exit(teacher, str(tmp_path / "ee"), {"train": {"epochs": 1, "max_length": 32},
                        "calibrate": {"split": "holdout", "rows": 10}}, data_dir=glue_dir,
                        train_limit=48, dev_limit=8)
    assert record["calibration_rows"] == 10 and record["calibration_split"].startswith("holdout")
    assert record["train_rows"] == 48                       # nothing of the 48 taken for calibration
    plain = early_exit(teacher, str(tmp_path / "ee2"), {"train": {"epochs": 1, "max_length": 32},
                       "calibrate": {"rows": 10}}, data_dir=glue_dir, train_limit=48, dev_limit=8)
    assert plain["train_rows"] == 38 and plain["calibration_split"].startswith("train")
    from conftest import save_sst2_classifier

    other = save_sst2_classifier(tmp_path / "plain", teacher)
    capsys.readouterr()   # what the calls above printed (their tiny models' at-chance notes)
    code, _, err = run_cli(capsys, "early-exit", other, "--out", str(tmp_path / "ee3"),
                           "--data-dir", glue_dir, "--train-limit", "16", "--dev-limit", "8",
                           "--set", "calibrate.split=holdout")
    assert_one_line_error(code, err, "calibrate.split: holdout needs a model fine-tuned with --holdout N")
    assert not os.path.exists(tmp_path / "ee3")
