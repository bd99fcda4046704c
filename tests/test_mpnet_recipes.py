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
    from tests.conftest import save_tiny_classifier

    # 12 layers and 12 heads as MPNet-base, narrow (48)
    shape = {"num_hidden_layers": 12, "num_attention_heads": 12, "hidden_size": 48, "intermediate_size": 64}
    return save_tiny_classifier(tmp_path_factory.mktemp("mpnet") / "teacher", minilm_dir, "mpnet", max_length=32,
                                shape=shape)


@pytest.fixture(scope="module")
def mpnet_student(tmp_path_factory, minilm_dir):
    """The teacher's shape at the chain's students' depth (6): what a recipe that works on a chain's
    student (tokens-after-chain: its schedules have one value per layer but the last) is given."""
    from tests.conftest import save_tiny_classifier

    shape = {"num_hidden_layers": 6, "num_attention_heads": 12, "hidden_size": 48, "intermediate_size": 64}
    return save_tiny_classifier(tmp_path_factory.mktemp("mpnet") / "student", minilm_dir, "mpnet", max_length=32,
                                shape=shape)


def on_a_student(recipe: str) -> bool:
    """Whether ``recipe`` prunes tokens of the model it is given (before any stage makes a student):
    its schedules are written for a chain's 6-layer student."""
    for stage in yaml.safe_load(open(recipe))["stages"]:
        (name, _), = stage.items()
        if name in ("distill", "theseus"):
            return False
        if name == "token_prune":
            return True
    return False


def shrunk(path: str, out: str, general_teacher: str = "", general_cache: str = "",
           peers: bool = True, bench: bool = True) -> str:
    """The recipe with small data slices, one epoch a phase, narrow students, the CPU, and a
    short benchmark: every stage and phase the recipe names still runs, on less. ``peers``
    false: the benchmark times the run's own models alone (the peers are the teacher's, the
    same in every chain: one recipe's run times them). ``bench`` false: no bench stage (the
    test builds each model as the bench's workers do, in its own process)."""
    with open(out, "w") as f:
        yaml.safe_dump(shrunk_doc(path, general_teacher, general_cache, peers, bench), f)
    return out


def shrunk_doc(path: str, general_teacher: str = "", general_cache: str = "", peers: bool = True,
               bench: bool = True) -> dict:
    with open(path) as f:
        doc = yaml.safe_load(f)
    if not bench:
        doc["stages"] = [s for s in doc["stages"] if "bench" not in s]
    doc["data"] = {"train_limit": 48, "dev_limit": 16}
    doc["device"] = "cpu"
    for stage in doc["stages"]:
        (name, settings), = stage.items()
        settings = settings if settings is not None else {}
        stage[name] = settings
        if name == "token_prune" and len(settings.get("candidates") or []) > 3:   # a search of three:
            settings["candidates"] = [settings["candidates"][i] for i in (0, -2, -1)]   # still ordered, and
        if name == "token_prune" and settings.get("search_steps"):              # one rules out another
            settings["search_steps"] = min(settings["search_steps"], 2)   # each candidate tuned 2 steps
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
        if name == "quantize" and settings.get("threads"):   # the GPU machine's CPU threads: here 2 cores,
            settings["threads"] = 1                           # shared, and graphs of 48 wide
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


_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


def _shape(value):
    """A setting with its numbers masked: recipes that differ only in sizes, epochs, rates or
    ratios run the same code paths shrunk (every value is still checked by validation). YAML reads
    ``5e-5`` as a string; the toolkit reads it as the number it is, and so does this."""
    if isinstance(value, list):
        return [_shape(v) for v in value]
    if isinstance(value, (int, float)) and not isinstance(value, bool) or \
            isinstance(value, str) and _NUMBER.match(value):
        return "number"
    return value


def _leaves(path: list, value, out: list) -> None:
    """Each setting inside nested blocks (``train: {lr: ...}``) as its own key path."""
    if isinstance(value, dict) and value:
        for key, inner in value.items():
            _leaves(path + [key], inner, out)
    else:
        out.append((".".join(map(str, path)), _shape(value)))


def features(recipe: str) -> set:
    """What a shrunk run of ``recipe`` exercises: each stage, and each of its settings (a key path
    inside nested blocks) with the value's shape (numbers masked: sizes, epochs and rates run the
    same code shrunk), and whether it chooses on held-out rows."""
    out = set()
    for stage in shrunk_doc(recipe)["stages"]:
        (name, settings), = stage.items()
        out.add(json.dumps([name, chooses_on_holdout(recipe)]))
        leaves: list = []
        _leaves([], settings or {}, leaves)
        out.update(json.dumps([name, key, value], sort_keys=True) for key, value in leaves)
    return out


def alike(recipes) -> list:
    """Groups of recipes, each run once by its first: a recipe runs when it exercises a stage
    setting no recipe run before it does (richest first); one whose every feature an earlier run
    exercised joins that run's group and is validated (the seed systems' augmented recipes
    cover most of their plain forms, the steps chains cover chain-augmented: 30 recipes, 16 runs)."""
    groups, seen = [], set()
    for recipe in sorted(recipes, key=lambda r: (-len(features(r)), r)):
        mine = features(recipe)
        if mine - seen:
            groups.append([recipe])
            seen |= mine
        else:   # joins the first run that exercised one of its features
            next(g for g in groups if mine & features(g[0])).append(recipe)
    return groups


def test_recipes_that_shrink_alike_are_run_once():
    groups = alike(RECIPES)
    assert sorted(p for group in groups for p in group) == RECIPES
    run = set().union(*(features(g[0]) for g in groups))
    for group in groups:
        for other in group[1:]:
            assert features(other) <= run, other        # every setting shape it has runs somewhere
    names = [[os.path.basename(p) for p in g] for g in groups]
    assert not any(g[0] == "chain-augmented.yaml" for g in names)   # chain-augmented-sst2 has its every feature
    assert len(groups) < len(RECIPES)


def _peers(recipe: str) -> list:
    return [p for stage in yaml.safe_load(open(recipe))["stages"] for name, settings in stage.items()
            if name == "bench" for p in (settings or {}).get("peers", [])]


# the peers (the teacher's, alike in every chain) are timed once: by the bench stage of the first
# recipe that names them, run alone on the teacher (worker processes, one per model: a PyTorch
# one takes seconds to start). In every chain's run, each model its bench stage would time is
# built and run here by the bench harness, in this process
PEERS_RUN = next(g[0] for g in alike(RECIPES) if _peers(g[0]))


def _built_as_the_bench_builds(run_dir: str, stages: list, dev) -> None:
    from compressor.bench.harness import build
    from compressor.bench.suite import specs_for

    texts = [ex.texts[0] for ex in dev.examples[:4]]
    built = []
    for s in stages:
        if not s.get("model_dir"):
            continue
        path = os.path.join(run_dir, s["model_dir"])
        for spec in specs_for(path, s["dir"]):
            logits = build(spec).logits(texts, batch_size=1)
            assert logits.shape == (4, 2) and (logits == logits).all(), s["dir"]
            built.append(s["dir"])
    assert set(built) == {s["dir"] for s in stages if s.get("model_dir")}   # the teacher's and every stage's


@pytest.mark.parametrize("group", alike(RECIPES),
                         ids=lambda g: os.path.basename(g[0])[:-5] + (f"+{len(g) - 1}" if len(g) > 1 else ""))
def test_the_recipe_runs_on_an_mpnet_teacher(group, mpnet_teacher, glue_dir, tmp_path, request):
    from compressor.recipe import validate_recipe

    recipe = group[0]
    given = request.getfixturevalue("mpnet_student") if on_a_student(recipe) else mpnet_teacher
    for other in group[1:]:                 # the run below is theirs too: they need only be valid
        assert validate_recipe(shrunk(other, str(tmp_path / "alike.yaml"), mpnet_teacher,
                                      str(tmp_path / "general"))) == [], other
    path = shrunk(recipe, str(tmp_path / "r.yaml"), mpnet_teacher, str(tmp_path / "general"), peers=False,
                  bench=False)
    teacher = held_out_teacher(given, str(tmp_path / "teacher"), glue_dir) if chooses_on_holdout(recipe) else given
    manifest = run_recipe(path, str(tmp_path / "run"), data_dir=glue_dir, task="sst2",
                          teacher=teacher, log=lambda msg: None)
    stages = manifest["stages"]
    names = [name for stage in yaml.safe_load(open(recipe))["stages"] for name in stage]
    ran = [n for n in names if n != "bench"]
    assert stages[0]["dir"] == "00-teacher" and [s["stage"] for s in stages[1:]] == ran
    if ran != names:   # what its bench stage would have timed: each model built and run as a worker does
        from compressor.core.data import load_split

        _built_as_the_bench_builds(str(tmp_path / "run"), stages, load_split("sst2", "dev", glue_dir, limit=4))
    if recipe == PEERS_RUN:   # its bench stage's peers, made from the teacher and run as a worker runs them
        from compressor.bench.harness import build
        from compressor.bench.peers import peer_specs
        from compressor.core.data import load_split

        doc = shrunk_doc(recipe, mpnet_teacher, str(tmp_path / "general"))
        peers = [p for s in doc["stages"] if "bench" in s for p in s["bench"]["peers"]]
        assert set(peers) - {"pytorch-fp32"}          # the teacher is that one; the others are made
        texts = [ex.texts[0] for ex in load_split("sst2", "dev", glue_dir, limit=4).examples]
        specs = peer_specs(teacher, str(tmp_path / "peers"), peers)
        assert [s.name for s in specs] == peers
        for spec in specs:
            logits = build(spec).logits(texts, batch_size=1)
            assert logits.shape == (4, 2) and (logits == logits).all(), spec.name
    for s in stages:
        record = json.load(open(os.path.join(tmp_path, "run", s["dir"], "record.json")))
        assert record, s["dir"]
    if teacher != given:      # chose on the 16 rows the teacher held out, nothing else
        records = [json.load(open(os.path.join(tmp_path, "run", s["dir"], "record.json"))) for s in stages[1:]]
        searched = [r["search"] for r in records if r.get("search")]
        calibrated = [r for r in records if r.get("calibration_split")]
        assert searched or calibrated
        assert all(s["search_on"] == "holdout" and s["search_rows"] == 16 for s in searched)
        assert all(r["calibration_split"].startswith("holdout") and r["calibration_rows"] == 16
                   for r in calibrated)
