"""The headline's seed-system recipes (recipes/mpnet/) run end to end, each on a random
MPNet task checkpoint of MPNet-base's depth and head count (narrow) given as --teacher, on small slices of SST-2: every stage they chain
(distillation of each kind, Theseus, sharing, pruning, vocabulary, export, quantisation, early
exit, benchmark) accepts MPNet, whose layers share one relative-position bias."""
import glob
import json
import os
import re

import pytest
import yaml

from compressor.recipe import run_recipe

pytestmark = pytest.mark.e2e

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
RECIPES = sorted(glob.glob(os.path.join(ROOT, "recipes", "mpnet", "*.yaml")))


@pytest.fixture(scope="module")
def mpnet_teacher(tmp_path_factory, minilm_dir):
    import torch
    import transformers

    from compressor.core.data import get_task
    from compressor.core.models import checkpoint_meta, save_checkpoint
    from tests.conftest import tiny_config

    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    config = tiny_config("mpnet")    # 12 layers and 12 heads as MPNet-base, narrow (48)
    config.update({"num_hidden_layers": 12, "num_attention_heads": 12, "hidden_size": 48,
                   "intermediate_size": 64})
    config.vocab_size, config.num_labels = tokenizer.vocab_size, 2
    torch.manual_seed(0)
    model = transformers.AutoModelForSequenceClassification.from_config(config)
    path = str(tmp_path_factory.mktemp("mpnet") / "teacher")
    save_checkpoint(model, tokenizer, path, checkpoint_meta(get_task("sst2"), 32, "test"))
    return path


def shrunk(path: str, out: str, general_teacher: str = "", general_cache: str = "",
           peers: bool = True) -> str:
    """The recipe with small data slices, one epoch a phase, narrow students, the CPU, and a
    short benchmark: every stage and phase the recipe names still runs, on less. ``peers``
    false: the benchmark times the run's own models alone (the peers are the teacher's, the
    same in every chain: one recipe's run times them)."""
    with open(out, "w") as f:
        yaml.safe_dump(shrunk_doc(path, general_teacher, general_cache, peers), f)
    return out


def shrunk_doc(path: str, general_teacher: str = "", general_cache: str = "", peers: bool = True) -> dict:
    with open(path) as f:
        doc = yaml.safe_load(f)
    doc["data"] = {"train_limit": 48, "dev_limit": 16}
    doc["device"] = "cpu"
    for stage in doc["stages"]:
        (name, settings), = stage.items()
        settings = settings if settings is not None else {}
        stage[name] = settings
        recover = settings.get("recover") or {}
        for block in (settings.get("train") or {}, recover.get("train") or {}):   # bf16 is the GPU's: on a CPU
            if block.get("precision") == "bf16":                  # without AVX-512 BF16 it is
                block["precision"] = "fp32"                       # emulated, ten times slower
            if block.get("epochs", 0) > 1:                        # one pass checks the stage runs
                block["epochs"] = 1
        for key in [k for k in settings if k.endswith("_epochs")]:   # each phase (general, intermediate,
            settings[key] = min(settings[key], 1)                      # replacing, ...) still runs: once
        student = settings.get("student") or {}
        if student.get("kind") == "config":      # a student of its own shape, narrower than the teacher
            student.update(hidden_size=24, ffn_size=32)   # (48) as the papers' are: same depth and heads
        if name == "bench":
            settings.update(sentences=4, threads=[1], batch_sizes=[],
                            peers=[p for p in settings.get("peers", []) if p != "inc-int8" and peers])
        if name == "early_exit":
            settings["calibrate"] = {**settings.get("calibrate", {}), "rows": 16, "target": 0.99}
        if name == "augment":
            settings["copies"] = 2                       # 20 copies of 48 rows, 13 epochs: minutes here
        if name == "share" and settings.get("embedding_rank"):
            settings["embedding_rank"] = 8               # the tiny model's width is 48
        if name == "quantize" and settings.get("method") == "mixed":
            settings["max_drop"] = 100.0
        if settings.get("general_teacher") not in (None, "teacher"):   # the base encoder: here, the teacher's
            settings["general_teacher"] = general_teacher
        if settings.get("general_cache"):
            settings["general_cache"] = general_cache
    return doc


def test_every_seed_system_has_an_mpnet_recipe():
    names = {os.path.basename(p)[:-5] for p in RECIPES}
    assert {"distilbert-6l", "pkd-6l", "tinybert-4l", "minilm-6l", "pd-minilm-l6", "theseus-6l",
            "albert-share", "q8bert-dynamic", "q8bert-qat", "qbert-mixed", "early-exit", "chain",
            "mobilebert-progressive", "qbert-mixed-holdout"} <= names


def held_out_teacher(teacher: str, out: str, glue_dir: str) -> str:
    """The teacher as if fine-tuned with --holdout 16 on SST-2's first 64 training rows (the
    draw recorded in its compressor.json), for the recipes that choose on held-out rows."""
    import shutil

    from compressor.core.data import get_task, holdout, load_data

    shutil.copytree(teacher, out)
    _, _, record = holdout.draw(load_data(get_task("sst2"), "train", glue_dir, 64), 16, 42)
    with open(os.path.join(out, "compressor.json")) as f:
        meta = json.load(f)
    with open(os.path.join(out, "compressor.json"), "w") as f:
        json.dump({**meta, "holdout": record}, f)
    return out


def chooses_on_holdout(recipe: str) -> bool:
    return bool(re.search(r"(search_on|split): holdout", open(recipe).read()))


def alike(recipes) -> list:
    """The recipes grouped where their shrunk forms run the same stages with the same settings
    (the task and teacher are the test's, the names differ): one run checks a group."""
    groups = {}
    for recipe in recipes:
        doc = shrunk_doc(recipe)
        for key in ("name", "task", "teacher"):      # the run's task and teacher are the test's
            doc.pop(key, None)
        key = json.dumps([doc, chooses_on_holdout(recipe)], sort_keys=True)
        groups.setdefault(key, []).append(recipe)
    return list(groups.values())


def test_recipes_that_shrink_alike_are_run_once():
    groups = alike(RECIPES)
    assert sorted(p for group in groups for p in group) == RECIPES
    twice = [[os.path.basename(p) for p in g] for g in groups if len(g) > 1]
    assert ["chain-augmented-sst2.yaml", "chain-augmented.yaml"] in twice   # CoLA's 20 copies shrink to 2
    assert not any({"qbert-mixed.yaml", "qbert-mixed-holdout.yaml"} <= set(g) for g in twice)   # where rows come from counts


@pytest.mark.parametrize("group", alike(RECIPES),
                         ids=lambda g: "+".join(os.path.basename(p)[:-5] for p in g))
def test_the_recipe_runs_on_an_mpnet_teacher(group, mpnet_teacher, glue_dir, tmp_path):
    from compressor.recipe import validate_recipe

    recipe = group[0]
    for other in group[1:]:                 # the run below is theirs too: they need only be valid
        assert validate_recipe(shrunk(other, str(tmp_path / "alike.yaml"), mpnet_teacher,
                                      str(tmp_path / "general"))) == [], other
    # the peers (the teacher's) are timed in chain.yaml's run; the other chains time their own models
    path = shrunk(recipe, str(tmp_path / "r.yaml"), mpnet_teacher, str(tmp_path / "general"),
                  peers=os.path.basename(recipe) == "chain.yaml")
    teacher = held_out_teacher(mpnet_teacher, str(tmp_path / "teacher"), glue_dir) \
        if chooses_on_holdout(recipe) else mpnet_teacher
    manifest = run_recipe(path, str(tmp_path / "run"), data_dir=glue_dir, task="sst2",
                          teacher=teacher, log=lambda msg: None)
    stages = manifest["stages"]
    assert stages[0]["dir"] == "00-teacher" and len(stages) == 1 + len(yaml.safe_load(open(recipe))["stages"])
    for s in stages:
        record = json.load(open(os.path.join(tmp_path, "run", s["dir"], "record.json")))
        assert record, s["dir"]
    if teacher != mpnet_teacher:      # chose on the 16 rows the teacher held out, nothing else
        records = [json.load(open(os.path.join(tmp_path, "run", s["dir"], "record.json"))) for s in stages[1:]]
        searched = [r["search"] for r in records if r.get("search")]
        calibrated = [r for r in records if r.get("calibration_split")]
        assert searched or calibrated
        assert all(s["search_on"] == "holdout" and s["search_rows"] == 16 for s in searched)
        assert all(r["calibration_split"].startswith("holdout") and r["calibration_rows"] == 16
                   for r in calibrated)
