"""Task data augmentation (TinyBERT): N copies a row, words replaced with probability p from K
candidates, each sentence of a pair on its own, stop-words and non-words kept, teacher logits as
the only targets, cached by digest, never from dev or held-out rows; distillation trains on them."""
import json
import math
import os
import random
import re

import pytest
import torch
import transformers
from click.testing import CliRunner

from conftest import save_sst2_classifier, save_tiny_classifier, tiny_config

pytestmark = pytest.mark.integration


def _rows(folder):
    with open(os.path.join(folder, "augmented.jsonl")) as f:
        return [json.loads(line) for line in f]


def _swapped_words(train, folder):
    """``(before, after)`` for every word a copy in ``folder`` changed in its training row's first text
    (copies keep the row's words and punctuation in place)."""
    for row in _rows(folder):
        before = re.findall(r"\w+|[^\w\s]", train.examples[row["row"]].texts[0])
        after = re.findall(r"\w+|[^\w\s]", row["texts"][0])
        assert len(before) == len(after)
        yield from ((a, b) for a, b in zip(before, after) if a != b)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One neighbour table for the module's runs (all share the tiny teacher's embeddings)."""
    return str(tmp_path_factory.mktemp("augment-cache"))


@pytest.fixture(scope="module")
def teacher(tmp_path_factory, minilm_dir):
    return save_sst2_classifier(tmp_path_factory.mktemp("sst2") / "teacher", minilm_dir)


@pytest.fixture(scope="module")
def mrpc_teacher(tmp_path_factory, minilm_dir):
    return save_tiny_classifier(tmp_path_factory.mktemp("mrpc") / "teacher", minilm_dir, task="mrpc")


@pytest.mark.unit
def test_stop_words_punctuation_and_numbers_are_kept():
    from compressor.augment.api import augment_text, word_spans

    text = "The film's 2 best scenes , at 3pm ! Its ending: unforgettable."
    spans = word_spans(text)
    assert [text[s:e] for s, e in spans] == ["film", "best", "scenes", "ending", "unforgettable"]
    copy, replaced = augment_text(text, spans, [["movie"]] * len(spans), 1.0, random.Random(0))
    assert replaced == 5
    assert copy == "The movie's 2 movie movie , at 3pm ! Its movie: movie."
    # a capitalised word keeps its case; p = 0 keeps the sentence
    assert augment_text("Great fun", word_spans("Great fun"), [["good"], ["joy"]], 1.0, random.Random(0))[0] == "Good joy"
    assert augment_text(text, spans, [["movie"]] * len(spans), 0.0, random.Random(0)) == (text, 0)


@pytest.mark.unit
def test_keep_form_drops_other_forms_and_the_words_own_inflections():
    from compressor.augment import AugmentConfig
    from compressor.augment.forms import form, keep_form

    # MPNet-base's nearest whole words (docs/augmentation.md): inflections and other forms go
    assert keep_form("run", ["runs", "running", "ran", "runners", "runner", "race", "walk"]) == ["race", "walk"]
    assert keep_form("gave", ["gives", "give", "giving", "given", "provided", "took"]) == ["provided", "took"]
    assert keep_form("tall", ["taller", "tallest", "height", "short"]) == ["height", "short"]
    assert keep_form("Running", ["jumping", "runner", "walks", "Swimming"]) == ["jumping", "Swimming"]
    # a singular reflexive keeps singular ones: number agreement stays, the stems differ
    assert keep_form("himself", ["herself", "themselves", "myself"]) == ["herself", "myself"]
    # a word that only starts the same is dropped with the stem; a suffix needs three letters before it
    assert keep_form("run", ["runway", "rust"]) == ["rust"]
    assert form("thing") == ("base", "thing") and form("string") == ("ing", "str")
    assert form("cities") == ("s", "city") and form("glass") == ("base", "glass")
    assert form("quickly") == ("ly", "quick") and form("ran") == ("past", "run")
    # off by default, and then out of the digest: sets made before the setting keep their digests
    assert "keep_form" not in AugmentConfig().digest_settings()
    assert AugmentConfig(keep_form=True).digest_settings()["keep_form"] is True


@pytest.mark.unit
def test_rows_without_labels_are_left_out_of_the_task_loss():
    from compressor.core.batches import collate
    from compressor.engine.losses import task_loss, task, Signals, LossSettings

    items = [{"input_ids": [1, 2], "label": 1}, {"input_ids": [1], "label": None}]
    batch = collate(items, 0, regression=False)
    assert batch["labels"].tolist() == [1, -100]
    logits = torch.tensor([[0.2, 0.9], [5.0, -5.0]])
    signals = Signals(student=type("S", (), {"logits": logits})(), teacher=None, teacher_logits=None,
                      labels=batch["labels"], mask=batch["attention_mask"], regression=False, project=None)
    assert torch.isclose(task(signals, LossSettings()), task_loss(logits[:1], torch.tensor([1])))
    scores = collate([{"input_ids": [1], "label": 0.5}, {"input_ids": [1], "label": None}], 0, regression=True)
    assert scores["labels"][0] == 0.5 and math.isnan(scores["labels"][1])
    signals.labels, signals.student.logits = scores["labels"], torch.tensor([[1.0], [9.0]])
    assert torch.isclose(task(signals, LossSettings()), torch.tensor(0.25))
    assert "labels" not in collate([{"input_ids": [1], "label": None}], 0, regression=False)


def test_copies_and_replace_rate_are_respected(teacher, glue_dir, tmp_path, cache):
    from compressor.augment import augment

    record = augment(teacher, str(tmp_path / "a"), {"copies": 5, "replace_rate": 0.4, "cache": cache},
                     data_dir=glue_dir, train_limit=60)
    rows = _rows(tmp_path / "a")
    assert record["source_rows"] == 60 and record["rows"] == len(rows) == 5 * record["augmented_from"]
    per_row = {}
    for row in rows:
        per_row[row["row"]] = per_row.get(row["row"], 0) + 1
        assert len(row["logits"]) == 2 and "label" not in row
    assert set(per_row.values()) == {5}
    assert record["candidates_from"] == "embedding"
    # the teacher's labels of the copies beside the gold labels of the rows, each label's share
    assert set(record["label_share_copies"]) == set(record["label_share_training"]) == {"0", "1"}
    assert abs(sum(record["label_share_copies"].values()) - 1) < 1e-3
    argmax = [max(range(2), key=lambda i: row["logits"][i]) for row in rows]
    assert abs(record["label_share_copies"]["1"] - sum(argmax) / len(argmax)) < 1e-3
    # words the vocabulary splits have no neighbours and stay: p of the others change
    with_candidates = 1 - record["words_without_candidates"] / record["words"]
    assert abs(record["replaced_share"] / with_candidates - 0.4) < 0.05, record

    augment(teacher, str(tmp_path / "none"), {"copies": 2, "replace_rate": 0.0, "cache": cache},
            data_dir=glue_dir, train_limit=20)
    augment(teacher, str(tmp_path / "all"), {"copies": 2, "replace_rate": 1.0, "cache": cache},
            data_dir=glue_dir, train_limit=20)
    from compressor.augment import STOP_WORDS
    from compressor.augment.candidates import whole_words
    from compressor.core.data import get_task, load_data

    vocabulary = whole_words(transformers.AutoTokenizer.from_pretrained(teacher))
    train = load_data(get_task("sst2"), "train", glue_dir, 20)
    for row in _rows(tmp_path / "none"):
        assert row["texts"] == list(train.examples[row["row"]].texts)
    for row in _rows(tmp_path / "all"):   # every word that may change did, nothing else
        before = re.findall(r"\w+|[^\w\s]", train.examples[row["row"]].texts[0])
        after = re.findall(r"\w+|[^\w\s]", row["texts"][0])
        assert len(before) == len(after)
        for a, b in zip(before, after):
            may_change = (a.isalpha() and len(a) > 1 and a.lower() not in STOP_WORDS
                          and (a in vocabulary or a.lower() in vocabulary))
            assert (a.lower() != b.lower()) == may_change, (a, b)


def test_only_words_change_and_stop_words_stay(teacher, glue_dir, tmp_path, cache):
    from compressor.augment import STOP_WORDS, augment
    from compressor.core.data import get_task, load_data

    augment(teacher, str(tmp_path / "a"), {"copies": 4, "cache": cache}, data_dir=glue_dir, train_limit=40)
    train = load_data(get_task("sst2"), "train", glue_dir, 40)
    changed = 0
    for a, b in _swapped_words(train, tmp_path / "a"):
        changed += 1
        assert a.isalpha() and len(a) > 1 and a.lower() not in STOP_WORDS, (a, b)
        assert b.isalpha()
    assert changed > 0


def test_each_sentence_of_a_pair_is_augmented_on_its_own(mrpc_teacher, glue_dir, tmp_path, cache):
    from compressor.augment import AugmentConfig, augment
    from compressor.augment.api import augment_rows
    from compressor.augment.candidates import EmbeddingNeighbours
    from compressor.core.data import Dataset, get_task, load_data
    from compressor.core.models import load_for_task

    record = augment(mrpc_teacher, str(tmp_path / "a"), {"copies": 6, "replace_rate": 0.05, "cache": cache},
                     data_dir=glue_dir, train_limit=30)
    train = load_data(get_task("mrpc"), "train", glue_dir, 30)
    rows = _rows(tmp_path / "a")
    assert record["rows"] == len(rows) == 6 * record["augmented_from"]
    only_first = only_second = 0
    for row in rows:
        first, second = train.examples[row["row"]].texts
        only_first += row["texts"][0] != first and row["texts"][1] == second
        only_second += row["texts"][0] == first and row["texts"][1] != second
    assert only_first and only_second   # the two sentences draw apart

    # sentence 1 of a pair is augmented as it would be alone
    model, tokenizer = load_for_task(mrpc_teacher, get_task("mrpc"))
    neighbours = EmbeddingNeighbours(model, tokenizer, 15, cache_dir=cache)
    config = AugmentConfig(copies=3, replace_rate=0.5)
    pairs, _, _ = augment_rows(Dataset(train.task, "train", train.examples[:5], "x"), neighbours, config)
    alone = Dataset(get_task("sst2"), "train", [type(e)(texts=e.texts[:1], label=e.label, guid=e.guid)
                                                for e in train.examples[:5]], "x")
    singles, _, _ = augment_rows(alone, neighbours, config)
    assert [p.texts[0] for p in pairs] == [s.texts[0] for s in singles]


def test_no_dev_or_held_out_row_is_augmented(teacher, glue_dir, tmp_path, cache):
    import shutil

    from compressor.augment import AugmentConfig, augment
    from compressor.augment.api import augment_rows
    from compressor.core.data import get_task, holdout, load_data

    task = get_task("sst2")
    held_teacher = str(tmp_path / "held")
    shutil.copytree(teacher, held_teacher)
    _, held, record = holdout.draw(load_data(task, "train", glue_dir, 64), 16, 42)
    with open(os.path.join(held_teacher, "compressor.json")) as f:
        meta = json.load(f)
    with open(os.path.join(held_teacher, "compressor.json"), "w") as f:
        json.dump({**meta, "holdout": record}, f)
    augment(held_teacher, str(tmp_path / "a"), {"copies": 2, "cache": cache}, data_dir=glue_dir, train_limit=48)
    train = holdout.training_rows(task, glue_dir, 48, None, held_teacher)
    dev = load_data(task, "dev", glue_dir)
    kept_out = {t for rows in (dev, held) for e in rows.examples for t in e.texts}
    rows = _rows(tmp_path / "a")
    sources = {r["row"] for r in rows}
    assert len(sources) == 48
    assert not {t for i in sources for t in train.examples[i].texts} & kept_out
    assert not {t for r in rows for t in r["texts"]} & kept_out

    # a training row that is also a dev row is not augmented
    from compressor.augment.candidates import EmbeddingNeighbours
    from compressor.core.models import load_for_task

    model, tokenizer = load_for_task(teacher, task)
    neighbours = EmbeddingNeighbours(model, tokenizer, 15, cache_dir=cache)
    rows, made_from, counts = augment_rows(train, neighbours, AugmentConfig(copies=2),
                                           exclude=[type(dev)(task, "dev", train.examples[3:5], "dev")])
    assert 3 not in made_from and 4 not in made_from and counts["skipped_rows"] == 2


def test_cache_is_reused_and_invalidated_by_settings(teacher, glue_dir, tmp_path, cache):
    from compressor.augment import augment

    out = str(tmp_path / "a")
    first = augment(teacher, out, {"copies": 2, "cache": cache}, data_dir=glue_dir, train_limit=20)
    stamp = os.path.getmtime(os.path.join(out, "augmented.jsonl"))
    again = augment(teacher, out, {"copies": 2, "cache": cache}, data_dir=glue_dir, train_limit=20)
    assert again["reused"] == os.path.abspath(out) and again["digest"] == first["digest"]
    assert os.path.getmtime(os.path.join(out, "augmented.jsonl")) == stamp
    changed = augment(teacher, out, {"copies": 3, "cache": cache}, data_dir=glue_dir, train_limit=20)
    assert not changed.get("reused") and changed["digest"] != first["digest"]
    assert len(_rows(out)) == 3 * changed["augmented_from"]
    # the cache folder keeps each set by digest: another folder gets the first one back
    other = augment(teacher, str(tmp_path / "b"), {"copies": 2, "cache": cache}, data_dir=glue_dir, train_limit=20)
    assert other["reused"] == os.path.join(cache, first["digest"])
    assert _rows(tmp_path / "b") == _rows(os.path.join(cache, first["digest"]))
    # other rows: another digest
    rows = augment(teacher, str(tmp_path / "c"), {"copies": 2, "cache": cache}, data_dir=glue_dir, train_limit=21)
    assert rows["digest"] != first["digest"] and not rows.get("reused")


def test_masked_lm_head_is_detected_and_used(teacher, glue_dir, tmp_path, minilm_dir, cache):
    from compressor.augment import augment, masked_lm

    assert masked_lm(teacher) is None   # a classifier: no LM head in its checkpoint
    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    config = tiny_config("bert")
    config.vocab_size = tokenizer.vocab_size
    torch.manual_seed(0)
    mlm = str(tmp_path / "mlm")
    transformers.BertForMaskedLM(config).save_pretrained(mlm)
    tokenizer.save_pretrained(mlm)
    assert masked_lm(mlm) is not None
    record = augment(teacher, str(tmp_path / "a"), {"copies": 2, "mlm_model": mlm, "cache": cache},
                     data_dir=glue_dir, train_limit=10)
    assert record["candidates_from"] == "mlm" and record["rows"] == 20
    with pytest.raises(Exception, match="no masked-LM head"):
        augment(teacher, str(tmp_path / "b"), {"source": "mlm", "cache": cache}, data_dir=glue_dir, train_limit=4)


def test_distillation_trains_on_the_augmented_rows_with_one_teacher_pass(teacher, glue_dir, tmp_path, cache,
                                                                       monkeypatch):
    from compressor.augment import augment
    from compressor.engine import distiller

    augment(teacher, str(tmp_path / "aug"), {"copies": 2, "max_length": 64, "cache": cache},
            data_dir=glue_dir, train_limit=24)
    seen = []
    real = distiller.predict_logits
    monkeypatch.setattr(distiller, "predict_logits",
                        lambda model, tok, examples, *a, **k: seen.append(len(examples)) or real(model, tok, examples, *a, **k))
    config = distiller.DistillConfig(student={"kind": "layers", "num_layers": 1}, losses={"kd": 1, "task": 1},
                                     augment=str(tmp_path / "aug"),
                                     train={"epochs": 1, "batch_size": 16, "max_length": 64, "device": "cpu"})
    record = distiller.distill(teacher, str(tmp_path / "student"), config=config, data_dir=glue_dir,
                               train_limit=24, dev_limit=16)
    assert seen == [24]   # the teacher labels the training rows; the copies brought their logits
    assert record["augmented_rows"] == 48 and record["phases"][-1]["train_examples"] == 72
    assert all(math.isfinite(v) for p in record["phases"] for point in p["loss_curve"] for v in point)
    with pytest.raises(Exception, match="other training rows"):
        distiller.distill(teacher, str(tmp_path / "s2"), config=config, data_dir=glue_dir, train_limit=20,
                          dev_limit=16)


def test_recipe_augment_then_two_stage_distill(teacher, glue_dir, tmp_path):
    import yaml

    from compressor.recipe import run_recipe

    recipe = {"name": "augment-distill", "task": "sst2", "teacher": teacher, "device": "cpu",
              "data": {"train_limit": 24, "dev_limit": 16},
              "stages": [{"augment": {"copies": 2, "max_length": 64}},
                         {"distill": {"student": {"kind": "layers", "num_layers": 1},
                                      "losses": {"kd": 1, "task": 1, "hidden": 1, "attention": 1},
                                      "augment": "recipe", "intermediate_epochs": 1,
                                      "train": {"epochs": 1, "batch_size": 16, "max_length": 64}}}]}
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(recipe))
    manifest = run_recipe(str(path), str(tmp_path / "run"), data_dir=glue_dir, log=lambda m: None)
    assert [s["stage"] for s in manifest["stages"]] == ["teacher", "augment", "distill"]
    record = json.load(open(tmp_path / "run" / "02-distill" / "record.json"))
    assert record["augmented_rows"] == 48
    assert [(p["phase"], p["train_examples"]) for p in record["phases"]] == [("intermediate", 72), ("predict", 72)]
    assert record["cached_teacher_logits"]
    assert os.path.isfile(tmp_path / "run" / "01-augment" / "augmented.jsonl")
    # a second run skips both: the augmented rows stay as they are
    logs = []
    run_recipe(str(path), str(tmp_path / "run"), data_dir=glue_dir, log=logs.append)
    assert sum("skipped" in m for m in logs) == 3


def test_cli_augment(teacher, glue_dir, tmp_path, cache):
    from compressor.cli import cli

    args = ["augment", teacher, "--out", str(tmp_path / "a"), "--data-dir", glue_dir, "--train-limit", "8",
            "--set", "copies=3", "--set", f"cache={cache}", "--device", "cpu"]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "24 augmented rows from 8 of 8 training rows" in result.output
    assert len(_rows(tmp_path / "a")) == 24
    again = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert again.exit_code == 0 and "reused" in again.output


def test_cli_keep_form_changes_the_digest_and_substitutes_only_same_form_words(teacher, glue_dir, tmp_path,
                                                                               cache):
    from compressor.augment import STOP_WORDS
    from compressor.augment.forms import same_form
    from compressor.cli import cli
    from compressor.core.data import get_task, load_data

    records = {}
    for name, extra in (("off", []), ("on", ["--set", "keep_form=true"])):
        args = ["augment", teacher, "--out", str(tmp_path / name), "--data-dir", glue_dir, "--train-limit", "12",
                "--set", "copies=3", "--set", "replace_rate=1.0", "--set", f"cache={cache}", "--device", "cpu"]
        result = CliRunner().invoke(cli, args + extra, catch_exceptions=False)
        assert result.exit_code == 0, result.output
        records[name] = json.loads((tmp_path / name / "augment.json").read_text())
    assert records["on"]["digest"] != records["off"]["digest"]
    assert records["on"]["keep_form"] is True and "keep_form" not in records["off"]
    assert records["on"]["words_with_fewer_candidates"] >= 0
    train = load_data(get_task("sst2"), "train", glue_dir, 12)
    changed = 0
    for a, b in _swapped_words(train, tmp_path / "on"):
        changed += 1
        assert a.lower() not in STOP_WORDS and same_form(a, b), (a, b)
    assert changed > 0


def test_cli_distill_trains_on_an_augment_folder(teacher, glue_dir, tmp_path, cache):
    import json

    from compressor.cli import cli

    folder = str(tmp_path / "a")
    done = CliRunner().invoke(cli, ["augment", teacher, "--out", folder, "--data-dir", glue_dir,
                                    "--train-limit", "8", "--set", "copies=2", "--set", f"cache={cache}",
                                    "--device", "cpu"], catch_exceptions=False)
    assert done.exit_code == 0, done.output
    student = tmp_path / "s"
    done = CliRunner().invoke(cli, ["distill", teacher, "--augment", folder, "--out", str(student),
                                    "--data-dir", glue_dir, "--train-limit", "8", "--dev-limit", "8",
                                    "--student", "num_layers=1", "--epochs", "1", "--batch-size", "8",
                                    "--device", "cpu"], catch_exceptions=False)
    assert done.exit_code == 0, done.output
    record = json.loads((student / "metrics.json").read_text())
    assert record["augmented_rows"] == 16, {k: record[k] for k in record if "augment" in k}


def test_pruning_recovers_on_the_recipes_augmented_rows(teacher, glue_dir, tmp_path):
    """recover: {augment: recipe} trains the distillation recovery on the rows plus the copies,
    with the copies' logits from the augment stage (labelled by the recipe's teacher)."""
    import yaml

    from compressor.recipe import run_recipe

    recover = {"mode": "distill", "augment": "recipe", "train": {"epochs": 1, "batch_size": 16, "max_length": 64}}
    recipe = {"name": "augment-prune", "task": "sst2", "teacher": teacher, "device": "cpu",
              "data": {"train_limit": 24, "dev_limit": 16},
              "stages": [{"augment": {"copies": 2, "max_length": 64}},
                         {"prune": {"method": "structured", "heads": 0.5, "iterations": 1,
                                    "teacher": "recipe", "max_length": 64, "recover": recover}}]}
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(recipe))
    run_recipe(str(path), str(tmp_path / "run"), data_dir=glue_dir, log=lambda m: None)
    record = json.load(open(tmp_path / "run" / "02-prune" / "record.json"))
    assert record["config"]["recover"]["augment"] == "recipe"   # the recipe's words, not a path
    # one epoch over 24 rows + 48 copies at batch 16 is 5 steps (over the 24 rows alone: 2)
    assert [s["recovered"]["steps"] for s in record["pruning"]["steps"]] == [5]


def test_augmented_recovery_is_refused_without_distillation():
    from compressor.core.errors import CompressorError
    from compressor.engine.recovery import RecoverSettings

    with pytest.raises(CompressorError, match="recover.augment needs mode distill"):
        RecoverSettings(mode="finetune", augment="somewhere").check()


def test_stage_folder_settings_resolve_recipe_in_nested_sections():
    from compressor.core.settings import config_from_dict, resolve_stage_folders
    from compressor.prune.configs import PruneConfig

    config = config_from_dict(PruneConfig, {"method": "structured",
                                            "recover": {"mode": "distill", "augment": "recipe"}})
    resolved = resolve_stage_folders(config, lambda stage: f"/run/01-{stage}")
    assert resolved.recover.augment == "/run/01-augment" and config.recover.augment == "recipe"
    plain = config_from_dict(PruneConfig, {"method": "structured"})
    assert resolve_stage_folders(plain, lambda stage: 1 / 0) is plain   # nothing to resolve: untouched
