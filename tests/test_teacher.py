"""One teacher: every method that learns from a teacher takes ``teacher:`` with one default
(``input``) and one meaning (input / recipe / a folder), resolved by compressor.engine.teacher."""
import dataclasses
from types import SimpleNamespace

import pytest
import torch
import transformers

from conftest import save_tiny_classifier

SENTENCES = ["a fine film", "dull and long", "the best of the year"]


def _classifier(path, minilm_dir, seed: int) -> str:
    """A tiny random BERT SST-2 classifier (``seed`` picks its weights) saved as the toolkit saves one."""
    return save_tiny_classifier(path, minilm_dir, max_length=32, seed=seed)


def make_folders(root, minilm_dir) -> dict:
    """Three different classifiers: the stage's input, the recipe's teacher, another folder."""
    return {name: _classifier(root / name, minilm_dir, seed) for seed, name in
            enumerate(("input", "recipe", "folder"))}


def make_which(folders):
    """``which(teacher) -> name``: the folder whose model gives ``teacher``'s logits."""
    from compressor.core.data import get_task
    from compressor.core.models import load_for_task

    task = get_task("sst2")
    tokenizer = transformers.AutoTokenizer.from_pretrained(folders["input"])
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    batch.pop("token_type_ids", None)
    reference = {}
    for name, path in folders.items():
        model, _ = load_for_task(path, task)
        with torch.no_grad():
            reference[name] = model.eval()(**batch).logits

    def which(teacher) -> str:
        with torch.no_grad():
            out = teacher.to("cpu").eval()(**batch).logits
        found = [name for name, ref in reference.items() if torch.allclose(out, ref, atol=1e-5)]
        assert len(found) == 1, found
        return found[0]
    return which


@pytest.fixture(scope="module")
def folders(tmp_path_factory, minilm_dir):
    return make_folders(tmp_path_factory.mktemp("teachers"), minilm_dir)


@pytest.fixture(scope="module")
def logits(folders):
    return make_which(folders)


def _setting(name, folders):
    return folders["folder"] if name == "folder" else name


CASES = [("input", "input"), ("recipe", "recipe"), ("folder", "folder"), (None, "input")]


def _data(glue_dir, rows=16):
    from compressor.core.data import get_task, load_data

    task = get_task("sst2")
    return task, load_data(task, "train", glue_dir, rows), load_data(task, "dev", glue_dir, 8)


class _Stop(Exception):
    """Raised by a spy once it has seen what it looks for (nothing need train)."""


# -- the setting --------------------------------------------------------------------

@pytest.mark.unit
def test_resolve_teacher_gives_the_folder_each_value_names(folders):
    from compressor.core.errors import CompressorError
    from compressor.engine.teacher import resolve_teacher

    assert resolve_teacher("input", folders["input"], folders["recipe"]) == folders["input"]
    assert resolve_teacher("input", None, folders["recipe"]) is None   # the model held in memory
    assert resolve_teacher("recipe", folders["input"], folders["recipe"]) == folders["recipe"]
    assert resolve_teacher(folders["folder"], folders["input"], folders["recipe"]) == folders["folder"]
    with pytest.raises(CompressorError) as err:
        resolve_teacher("recipe", folders["input"], None)
    assert "\n" not in str(err.value) and "outside a recipe" in str(err.value)


def _configs_with_a_teacher():
    """``{(stage, type name): config class}`` for every registered stage config (and every type
    its tags pick) that has a ``teacher`` setting."""
    from compressor.core.registry import all_stages
    from compressor.core.settings import variants

    found = {}
    for name, entry in all_stages().items():
        for cls in [entry.config_cls, *variants(entry.config_cls).values()]:
            if dataclasses.is_dataclass(cls) and "teacher" in {f.name for f in dataclasses.fields(cls)}:
                found[(name, cls.__name__)] = cls
    return found


@pytest.mark.unit
def test_every_stage_that_learns_from_a_teacher_has_one_default():
    from compressor.engine.train_config import DEFAULT_TEACHER

    found = _configs_with_a_teacher()
    stages = {stage for stage, _ in found}
    assert {"distill", "prune", "share", "theseus", "early_exit", "augment"} <= stages, stages
    defaults = {key: next(f for f in dataclasses.fields(cls) if f.name == "teacher").default
                for key, cls in found.items()}
    assert set(defaults.values()) == {DEFAULT_TEACHER} == {"input"}, defaults
    helps = {next(f for f in dataclasses.fields(cls) if f.name == "teacher").metadata.get("help")
             for cls in found.values()}
    assert len(helps) == 1 and None not in helps   # one meaning, said once


@pytest.mark.unit
def test_an_empty_teacher_is_refused_with_its_line(tmp_path):
    from compressor.recipe import validate_recipe

    path = tmp_path / "r.yaml"
    path.write_text("task: sst2\nteacher: {model: m}\nstages:\n  - theseus:\n      teacher: ''\n")
    problems = validate_recipe(str(path))
    assert any(p.startswith(f"{path}:5:") and "teacher is input" in p for p in problems), problems


# -- each method picks the model its setting names ---------------------------------------

def _ctx(folders, task, train, dev):
    def split(name):
        if name == "holdout":
            from compressor.core.errors import CompressorError
            raise CompressorError("no rows held out")
        return {"train": train, "dev": dev}[name]
    return SimpleNamespace(model_dir=folders["input"], teacher_dir=folders["recipe"], task=task,
                           data_dir=None, split=split, out_dir="", stage_dir=lambda name: None,
                           recipe=SimpleNamespace(train_limit=None, user_data=None, name="t"))


@pytest.mark.parametrize("setting, expected", CASES)
def test_distill_learns_from_the_teacher_its_setting_names(setting, expected, folders, logits, glue_dir,
                                                            monkeypatch):
    import compressor.distill.stage as stage
    from compressor.engine.distiller import DistillConfig

    seen = {}

    def spy(teacher, *args, **kwargs):
        seen["teacher"] = teacher
        raise _Stop

    monkeypatch.setattr(stage, "distill_model", spy)
    config = DistillConfig(train={"device": "cpu"}, **({} if setting is None else {"teacher": _setting(setting, folders)}))
    with pytest.raises(_Stop):
        stage.distill_stage(_ctx(folders, *_data(glue_dir)), config)
    assert logits(seen["teacher"]) == expected


@pytest.mark.parametrize("setting, expected", CASES)
def test_augment_labels_with_the_teacher_its_setting_names(setting, expected, folders, glue_dir, monkeypatch):
    import compressor.augment.stage as stage
    from compressor.augment.config import AugmentConfig

    seen = {}

    def spy(teacher_dir, *args, **kwargs):
        seen["folder"] = teacher_dir
        raise _Stop

    monkeypatch.setattr(stage, "make_augmented", spy)
    monkeypatch.setattr(stage, "dev_rows", lambda *a: None)
    config = AugmentConfig(**({} if setting is None else {"teacher": _setting(setting, folders)}))
    with pytest.raises(_Stop):
        stage.augment_stage(_ctx(folders, *_data(glue_dir)), config)
    assert seen["folder"] == folders[expected]


@pytest.mark.parametrize("stage", ["prune", "share"])
@pytest.mark.parametrize("setting, expected", CASES)
def test_prune_and_share_recover_from_the_teacher_their_setting_names(stage, setting, expected, folders, logits):
    from compressor.core.data import get_task
    from compressor.core.registry import get_stage
    from compressor.core.settings import config_from_dict
    from compressor.engine.job import load_with_teacher

    config = config_from_dict(get_stage(stage).config_cls,
                              {} if setting is None else {"teacher": _setting(setting, folders)})
    model, _, teacher, _, _ = load_with_teacher(folders["input"], get_task("sst2"), config, folders["recipe"])
    assert logits(teacher) == expected
    assert teacher is not model and not any(p.requires_grad for p in teacher.parameters())


def _spy_teacher_loss(monkeypatch, seen):
    from compressor.engine.teacher import TeacherLoss

    def spy(self, teacher=None, *args, **kwargs):
        seen["teacher"] = teacher
        raise _Stop

    monkeypatch.setattr(TeacherLoss, "__init__", spy)


@pytest.mark.parametrize("setting, expected", CASES)
def test_theseus_learns_from_the_teacher_its_setting_names(setting, expected, folders, logits, glue_dir,
                                                            monkeypatch):
    from compressor.core.models import load_for_task
    from compressor.theseus.config import TheseusConfig
    from compressor.theseus.stage import run_theseus

    task, train, dev = _data(glue_dir)
    model, tokenizer = load_for_task(folders["input"], task)
    seen = {}
    _spy_teacher_loss(monkeypatch, seen)
    config = TheseusConfig(num_layers=1, kd={"weight": 1.0}, train={"device": "cpu", "max_length": 32},
                           **({} if setting is None else {"teacher": _setting(setting, folders)}))
    with pytest.raises(_Stop):
        run_theseus(model, tokenizer, train, dev, config, recipe_teacher=folders["recipe"])
    assert logits(seen["teacher"]) == expected


@pytest.mark.parametrize("setting, expected", CASES)
def test_early_exit_soft_targets_come_from_the_teacher_its_setting_names(setting, expected, folders, glue_dir,
                                                                          monkeypatch):
    import compressor.exit.train as exit_train
    from compressor.core.models import load_for_task
    from compressor.engine.distiller import teacher_logits_cache
    from compressor.exit.configs import EarlyExitConfig
    from compressor.exit.stage import run_early_exit

    task, train, dev = _data(glue_dir)
    model, tokenizer = load_for_task(folders["input"], task)
    seen = {}

    def spy(self, config, cache, exits, regression, teacher_logits=None):
        seen["cache"], seen["teacher_logits"] = cache, teacher_logits
        raise _Stop

    monkeypatch.setattr(exit_train.ExitLoss, "__init__", spy)
    config = EarlyExitConfig(training="self_distill", train={"device": "cpu", "max_length": 32},
                             calibrate={"rows": 4},
                             **({} if setting is None else {"teacher": _setting(setting, folders)}))
    with pytest.raises(_Stop):
        run_early_exit(model, tokenizer, train, dev, config, recipe_teacher=folders["recipe"])
    if expected == "input":   # the model's own logits, computed with its exits' inputs
        assert seen["teacher_logits"] is None and seen["cache"] is not None
        return
    reference, _ = load_for_task(folders[expected], task)
    wanted = teacher_logits_cache(reference, tokenizer, tokenizer, train.examples, 32, torch.device("cpu"))
    got = seen["teacher_logits"]
    assert set(got) <= set(wanted) and len(got) >= 8
    assert all(torch.allclose(got[k], wanted[k], atol=1e-5) for k in got)


# -- outside a recipe -------------------------------------------------------------

@pytest.mark.parametrize("method", ["distill", "augment", "prune"])
def test_teacher_recipe_outside_a_recipe_is_one_line(method, folders, tmp_path):
    from compressor.core.errors import CompressorError

    if method == "distill":
        from compressor.engine.distiller import DistillConfig, distill
        call = lambda: distill(folders["input"], str(tmp_path / "o"), config=DistillConfig(teacher="recipe"))
    elif method == "augment":
        from compressor.augment.api import augment
        call = lambda: augment(folders["input"], str(tmp_path / "o"), teacher="recipe")
    else:
        from compressor.core.data import get_task
        from compressor.engine.job import load_with_teacher
        from compressor.prune.configs import PruneConfig
        call = lambda: load_with_teacher(folders["input"], get_task("sst2"), PruneConfig(teacher="recipe"))
    with pytest.raises(CompressorError) as err:
        call()
    assert "\n" not in str(err.value) and "outside a recipe" in str(err.value)
