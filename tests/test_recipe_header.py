"""The recipe header (name, description, task, data, teacher, device, seed) is a settings
dataclass: its problems come at their lines, in the words a stage's settings get."""
import importlib.util
import os

import pytest

pytestmark = pytest.mark.unit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _problems(tmp_path, text):
    from compressor.recipe import validate_recipe

    path = tmp_path / "r.yaml"
    path.write_text(text)
    return str(path), validate_recipe(str(path))


@pytest.mark.parametrize("text, line, message", [
    ("task: sst2\nteacher: {model: m}\ncolour: red\n", 3,
     "recipe has no setting 'colour'; it takes name, description, task, data, teacher, device, seed, stages"),
    ("task: sst2\nteacher: {model: m}\ndata:\n  dir: x\n  rows: 5\n", 5, "data has no setting 'rows'"),
    ("task: sst2\nteacher:\n  model: m\n  epochs: 3\n", 4, "teacher has no setting 'epochs'; it takes model, finetune"),
    ("task: sst2\nteacher: {model: m}\nseed: many\n", 3, "seed must be an integer, got 'many'"),
    ("task: sst2\nteacher: {model: m}\nname: [a, b]\n", 3, "name must be a string"),
    ("task: sst2\nteacher: {model: m}\ndata:\n  train_limit: lots\n", 4, "data.train_limit must be an integer"),
    ("task: sst2\nteacher: {model: m}\ndata:\n  dev_limit: 0\n", 4, "data.dev_limit must be a positive integer"),
    ("task: sst2\nteacher:\n  model: m\n  finetune:\n    epochs: 1\n    lr: fast\n", 6,
     "teacher.finetune.lr must be a number"),
    ("task: sst2\nteacher:\n  finetune: {epochs: 1}\n", 2, "teacher.model must name a checkpoint folder"),
    ("task: sst2\nteacher: 5\n", 2, "teacher must be a checkpoint path or a mapping"),
    ("task: sst2\nteacher: {model: m}\ndevice: tpu\n", 3, "unknown device 'tpu'"),
    ("task: sst2\nteacher: {model: m}\nstages: {distill: {}}\n", 3, "stages must be a list"),
])
def test_a_header_problem_comes_with_its_line(tmp_path, text, line, message):
    path, problems = _problems(tmp_path, text)
    assert any(p.startswith(f"{path}:{line}: recipe") and message in p for p in problems), problems


def test_every_header_problem_is_reported_at_once(tmp_path):
    path, problems = _problems(tmp_path, "task: sst2\nteacher:\n  model: m\n  finetune: {epochs: x}\n"
                                         "seed: y\ncolour: z\nstages:\n  - finetune: {lr: w}\n")
    assert [p.split(":")[1] for p in problems] == ["4", "5", "6", "8"], problems


def test_the_header_builds_the_recipe(tmp_path):
    from compressor.recipe import load_recipe

    path = tmp_path / "r.yaml"
    path.write_text("name: n\ndescription: what it does\ntask: sst2\ndevice: cpu\nseed: 7\n"
                    "data: {dir: embedded, train_limit: 32, text_columns: review}\n"
                    "teacher: {model: m, finetune: }\nstages:\n  - finetune: {epochs: 1}\n")
    recipe = load_recipe(str(path))
    assert (recipe.name, recipe.description, recipe.task.name) == ("n", "what it does", "sst2")
    assert (recipe.device, recipe.seed, recipe.data_dir, recipe.train_limit) == ("cpu", 7, "embedded", 32)
    # an empty finetune fine-tunes with the defaults, on the recipe's device and seed
    assert recipe.teacher_model == "m" and recipe.teacher_finetune.epochs == 3.0
    assert (recipe.teacher_finetune.device, recipe.teacher_finetune.seed) == ("cpu", 7)
    assert (recipe.stages[0].config.device, recipe.stages[0].config.seed) == ("cpu", 7)
    path.write_text("task: sst2\nteacher: m\ndevice: cpu\n")
    recipe = load_recipe(str(path), device="auto")   # --device replaces the file's
    assert (recipe.name, recipe.teacher_model, recipe.teacher_finetune, recipe.device) == ("r", "m", None, "auto")


def test_the_settings_reference_lists_the_header():
    spec = importlib.util.spec_from_file_location("docs_hooks", os.path.join(ROOT, "docs", "hooks.py"))
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    page = hooks.render()
    assert "## The recipe header {#header}" in page
    for key in ("`data.train_limit`", "`teacher.model`", "`teacher.finetune`", "`seed`"):
        assert f"| {key} |" in page, key
