"""Recipes: validation with line numbers, a run with a folder per stage, resume, refusals."""
import json
import os
import textwrap
from dataclasses import dataclass

import pytest

from compressor.core.errors import CompressorError
from compressor.recipe import (RecipeError, load_recipe, register_stage, run_recipe,
                               validate_recipe)
from compressor.core.registry import all_stages

pytestmark = pytest.mark.unit


def write(tmp_path, text, name="r.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip())
    return str(path)


GOOD = """
name: tiny
task: sst2
data:
  train_limit: 48
  dev_limit: 32
device: cpu
teacher:
  model: {model}
  finetune: {{epochs: 1, batch_size: 16, max_length: 32, lr: 1e-3}}
stages:
  - finetune: {{epochs: 1, batch_size: 16, max_length: 32, lr: 5e-4}}
  - evaluate: {{split: dev}}
"""


@pytest.mark.parametrize("body, line, message", [
    ("task: sst2\nteacher: {model: m}\nstages:\n  - distil_everything: {}\n", 4,
     "unknown stage 'distil_everything'"),
    ("task: sst2\nteacher: {model: m}\nstages:\n  - finetune:\n      epochs: 1\n      learning_rate: 1\n",
     6, "has no setting 'learning_rate'"),
    ("task: sst2\nteacher: {model: m}\nstages:\n  - finetune:\n      epochs: many\n", 5,
     "epochs must be a number"),
    ("task: sst2\nteacher: {model: m}\nstages:\n  - finetune: {batch_size: 2.5}\n", 4,
     "batch_size must be an integer"),
    ("task: sst9\nteacher: {model: m}\n", 1, "unknown task 'sst9'"),
    ("task: sst2\nteachr: {model: m}\n", 2, "recipe has no setting 'teachr'"),
    ("task: sst2\nteacher: {model: m}\nstages: [finetune: {epochs: 1}\n", 4, "not valid YAML"),
    ("task: sst2\nteacher: {model: m}\ndata: {train_limit: -3}\n", 3, "positive integer"),
    ("task: sst2\nteacher: {model: m}\nstages:\n  - finetune: {precision: fp8}\n", 4,
     "unknown precision 'fp8'"),
])
def test_each_problem_is_reported_with_its_line(tmp_path, body, line, message):
    path = write(tmp_path, body)
    problems = validate_recipe(path)
    assert any(p.startswith(f"{path}:{line}:") and message in p for p in problems), problems


def test_all_problems_are_reported_at_once(tmp_path):
    path = write(tmp_path, "task: nope\nteacher: {model: m}\nstages:\n  - foo: {}\n  - finetune: {x: 1}\n")
    with pytest.raises(RecipeError) as err:
        load_recipe(path)
    assert len(err.value.problems) == 3


@dataclass
class _Frozen:
    pass


@register_stage("test_freeze", _Frozen, produces="frozen")
def _freeze(ctx, config):
    """A test stage whose model cannot be trained any further."""
    return {"model_dir": ctx.model_dir}


def test_impossible_order_is_refused(tmp_path):
    path = write(tmp_path, "task: sst2\nteacher: {model: m}\nstages:\n  - test_freeze: {}\n"
                           "  - finetune: {epochs: 1}\n")
    problems = validate_recipe(path)
    assert problems == [f"{path}:5: stage 'finetune' cannot follow stage 'test_freeze': "
                        "it needs a hf model but gets a frozen one"]


def test_shipped_recipes_validate():
    root = os.path.join(os.path.dirname(__file__), "..")
    from compressor.recipe.demo import demo_recipe_path
    files = [demo_recipe_path()] + [os.path.join(root, "recipes", f)
                                    for f in os.listdir(os.path.join(root, "recipes"))
                                    if f.endswith(".yaml")]
    assert len(files) >= 2
    for f in files:
        assert validate_recipe(f) == [], f


def test_run_writes_a_folder_per_stage_and_resumes(tiny_models, glue_dir, tmp_path):
    recipe = write(tmp_path, GOOD.format(model=tiny_models["bert"]))
    out = tmp_path / "run"
    logs = []
    manifest = run_recipe(recipe, str(out), data_dir=glue_dir, log=logs.append)
    assert [s["dir"] for s in manifest["stages"]] == ["00-teacher", "01-finetune", "02-evaluate"]
    for s in manifest["stages"]:
        record = json.loads((out / s["dir"] / "record.json").read_text())
        for key in ("parameters", "size_bytes", "metrics", "wall_time_s", "config", "score"):
            assert record[key] is not None, (s["dir"], key)
    assert (out / "01-finetune" / "model.safetensors").exists()
    evaluate = json.loads((out / "02-evaluate" / "record.json").read_text())
    assert evaluate["model_dir"] == "01-finetune"
    assert evaluate["retention"] == pytest.approx(evaluate["score"] / manifest["stages"][0]["score"],
                                                  abs=1e-4)
    assert os.path.isfile(manifest["report"]) and "01-finetune" in open(manifest["report"]).read()

    # unchanged: everything is skipped
    logs.clear()
    run_recipe(recipe, str(out), data_dir=glue_dir, log=logs.append)
    assert sum("skipped" in line for line in logs) == 3

    # a changed last stage re-runs only itself
    logs.clear()
    changed = GOOD.format(model=tiny_models["bert"]).replace("split: dev", "split: dev, batch_size: 8")
    recipe = write(tmp_path, changed)
    run_recipe(recipe, str(out), data_dir=glue_dir, log=logs.append)
    assert [line for line in logs if "skipped" in line][:2] == [
        "[00-teacher] unchanged since its last run: skipped",
        "[01-finetune] unchanged since its last run: skipped"]
    assert "[02-evaluate] running" in logs


@dataclass
class _FailOnce:
    marker: str = ""


@register_stage("test_fail_once", _FailOnce)
def _fail_once(ctx, config):
    """Fails the first time (as if the run were killed), works the second."""
    if not os.path.exists(config.marker):
        open(config.marker, "w").close()
        raise KeyboardInterrupt
    return {"model_dir": ctx.model_dir}


def test_a_stopped_run_resumes_from_its_last_finished_stage(tiny_models, glue_dir, tmp_path):
    body = GOOD.format(model=tiny_models["bert"]).replace(
        "  - evaluate", f"  - test_fail_once: {{marker: {tmp_path / 'marker'}}}\n  - evaluate")
    recipe = write(tmp_path, body)
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        run_recipe(recipe, str(out), data_dir=glue_dir, log=lambda m: None)
    assert sorted(p for p in os.listdir(out) if not p.startswith(".")) == [
        "00-teacher", "01-finetune", "manifest.json"]  # nothing half-written
    logs = []
    run_recipe(recipe, str(out), data_dir=glue_dir, log=logs.append)
    logs = [line for line in logs if "a model at chance" not in line]   # (the tiny teacher is at chance)
    assert logs[:2] == ["[00-teacher] unchanged since its last run: skipped",
                        "[01-finetune] unchanged since its last run: skipped"]
    assert (out / "03-evaluate" / "record.json").exists()


def test_output_folder_of_another_run_is_refused(tiny_models, glue_dir, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "manifest.json").write_text(json.dumps({"recipe": "other", "task": "rte", "stages": []}))
    recipe = write(tmp_path, GOOD.format(model=tiny_models["bert"]))
    with pytest.raises(CompressorError, match="holds a run of recipe 'other'"):
        run_recipe(recipe, str(out), data_dir=glue_dir)
    (out / "manifest.json").unlink()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(CompressorError, match="holds other files"):
        run_recipe(recipe, str(out), data_dir=glue_dir)


def test_base_encoder_teacher_without_finetune_is_refused(tiny_models, glue_dir, tmp_path):
    recipe = write(tmp_path, f"task: sst2\nteacher: {{model: {tiny_models['bert']}}}\n")
    with pytest.raises(CompressorError, match="base encoder with no task head"):
        run_recipe(recipe, str(tmp_path / "run"), data_dir=glue_dir)


def test_builtin_stages_are_registered():
    assert {"finetune", "evaluate"} <= set(all_stages())


def test_recipe_on_the_users_own_files(tiny_models, tmp_path):
    from conftest import write_reviews

    train = write_reviews(tmp_path / "train.csv", 400)
    dev = write_reviews(tmp_path / "dev.csv", 32, start=400)
    recipe = write(tmp_path, f"""
name: reviews
task: reviews
data: {{train_file: {train}, dev_file: {dev}, text_columns: [review], label_column: sentiment}}
device: cpu
teacher:
  model: {tiny_models['bert']}
  finetune: {{epochs: 3, batch_size: 16, max_length: 16, lr: 2e-3}}
stages:
  - evaluate: {{}}
""")
    manifest = run_recipe(recipe, str(tmp_path / "run"), log=lambda m: None)
    assert manifest["task"] == "reviews"
    assert manifest["stages"][1]["metrics"]["accuracy"] >= 0.9
    bad = write(tmp_path, "data: {train_file: nope.csv, text_columns: [review]}\n"
                          "teacher: {model: m}\n", name="bad.yaml")
    assert validate_recipe(bad) == [f"{bad}:1: data.train_file: no such file 'nope.csv'"]


EVAL_ONLY = """
name: one-recipe-every-task
task: sst2
data: {dev_limit: 16}
device: cpu
teacher:
  model: minilm-l6
  finetune: {epochs: 3}
stages:
  - evaluate: {split: dev}
"""


def _task_checkpoint(path, task_name, minilm_dir):
    import torch
    import transformers

    from compressor.core.data import get_task
    from compressor.core.models import checkpoint_meta, save_checkpoint
    from tests.conftest import tiny_config

    task = get_task(task_name)
    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    config = tiny_config("bert")
    config.vocab_size, config.num_labels = tokenizer.vocab_size, task.num_labels
    torch.manual_seed(0)
    model = transformers.AutoModelForSequenceClassification.from_config(config)
    save_checkpoint(model, tokenizer, str(path), checkpoint_meta(task, 32, "test"))
    return str(path)


def test_task_and_teacher_overrides_run_one_recipe_on_another_task(tmp_path, glue_dir, minilm_dir):
    path = write(tmp_path, EVAL_ONLY)
    teacher = _task_checkpoint(tmp_path / "rte-teacher", "rte", minilm_dir)
    plain = load_recipe(path)
    recipe = load_recipe(path, task="rte", teacher=teacher)
    assert (plain.task.name, recipe.task.name) == ("sst2", "rte")
    assert recipe.teacher_model == teacher and recipe.teacher_finetune is None
    assert recipe.digest != plain.digest            # a resumed run never mixes the two
    manifest = run_recipe(path, str(tmp_path / "run"), data_dir=glue_dir, task="rte", teacher=teacher,
                          log=lambda msg: None)
    record = json.loads((tmp_path / "run" / "01-evaluate" / "record.json").read_text())
    assert record["task"] == "rte" and record["examples"] == 16
    assert manifest["stages"][0]["score"] is not None


def test_overrides_that_cannot_apply_are_refused(tmp_path):
    path = write(tmp_path, EVAL_ONLY)
    with pytest.raises(RecipeError, match="--task: unknown task 'sst9'"):
        load_recipe(path, task="sst9")
    rows = tmp_path / "train.tsv"
    rows.write_text("sentence\tlabel\ngood\t1\nbad\t0\n")
    own = write(tmp_path, f"task: sst2\ndata: {{train_file: {rows}, dev_file: {rows}}}\n"
                          "teacher: m\nstages:\n  - evaluate: {split: dev}\n", name="own.yaml")
    with pytest.raises(RecipeError, match="--task cannot override"):
        load_recipe(own, task="rte")


def test_a_teacher_of_another_task_is_refused_before_anything_runs(tmp_path, glue_dir, minilm_dir):
    path = write(tmp_path, EVAL_ONLY)
    teacher = _task_checkpoint(tmp_path / "sst2-teacher", "sst2", minilm_dir)
    with pytest.raises(CompressorError, match="was trained on sst2, but the recipe's task is rte"):
        run_recipe(path, str(tmp_path / "run"), data_dir=glue_dir, task="rte", teacher=teacher,
                   log=lambda msg: None)
    assert not (tmp_path / "run" / "00-teacher").exists()
