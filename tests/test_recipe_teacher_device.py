"""A recipe handed a trained teacher (--teacher) scores it on the recipe's device: the model goes
where its batches go. On the GPU machine the teacher stayed on the CPU while the batches went to
CUDA, and every recipe of the seed systems stopped at its first stage."""
import numpy as np
import torch

import compressor.recipe.stage  # noqa: F401  imported before any patch of compressor.core.device, so
import compressor.engine.scoring as scoring  # its own resolve_device is the real one once a patch is undone
from compressor.recipe import run_recipe
from tests.conftest import save_sst2_classifier
import pytest

pytestmark = pytest.mark.unit


def test_the_teacher_and_its_batches_are_on_one_device(tmp_path, minilm_dir, glue_dir, monkeypatch):
    teacher = save_sst2_classifier(tmp_path / "teacher", minilm_dir)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"task: sst2\nteacher: {teacher}\ndata: {{train_limit: 8, dev_limit: 8}}\n"
                      "stages:\n  - evaluate: {split: dev}\n")
    # a device other than the CPU the checkpoint loads on ('meta': no GPU needed)
    other = torch.device("meta")
    monkeypatch.setattr("compressor.core.device.resolve_device", lambda *a, **k: other)
    monkeypatch.setattr("compressor.recipe.stage.resolve_device", lambda *a, **k: other)
    seen = []

    def spy(model, tokenizer, examples, max_length, batch_size=64, device=None, **kw):
        seen.append((next(model.parameters()).device, device))
        return np.zeros((len(examples), model.config.num_labels), dtype=np.float32)

    monkeypatch.setattr(scoring, "predict_logits", spy)
    run_recipe(str(recipe), str(tmp_path / "run"), data_dir=glue_dir, log=lambda _: None)
    assert len(seen) == 2                       # the teacher stage, then the evaluate stage
    assert all(model == device == other for model, device in seen), seen


def test_with_a_score_cache_a_teacher_is_scored_once_for_many_recipes(tmp_path, minilm_dir, glue_dir, monkeypatch):
    """$COMPRESSOR_SCORE_CACHE (opt in): the second recipe on the same teacher and dev rows reads
    the teacher's score; other dev rows, or a changed teacher file, are scored again."""
    import json

    teacher = save_sst2_classifier(tmp_path / "teacher", minilm_dir)
    monkeypatch.setenv("COMPRESSOR_SCORE_CACHE", str(tmp_path / "cache"))
    calls = []
    real = scoring.predict_logits

    def counting(model, tokenizer, examples, *a, **k):
        calls.append(len(examples))
        return real(model, tokenizer, examples, *a, **k)

    monkeypatch.setattr(scoring, "predict_logits", counting)

    def run(name, dev_limit):
        recipe = tmp_path / f"{name}.yaml"
        recipe.write_text(f"name: {name}\ntask: sst2\nteacher: {teacher}\n"
                          f"data: {{train_limit: 8, dev_limit: {dev_limit}}}\nstages:\n  - evaluate: {{split: dev}}\n")
        manifest = run_recipe(str(recipe), str(tmp_path / name), data_dir=glue_dir, log=lambda _: None)
        return manifest["stages"][0]["score"]

    first = run("a", 8)
    assert calls == [8, 8]                       # teacher, then the evaluate stage
    assert run("b", 8) == first and calls == [8, 8, 8]      # the teacher's score came from the cache
    run("c", 12)
    assert calls[-2:] == [12, 12]                # other rows: scored again
    with open(tmp_path / "teacher" / "config.json") as f:
        config = json.load(f)
    config["note"] = "changed"
    with open(tmp_path / "teacher" / "config.json", "w") as f:
        json.dump(config, f)
    run("d", 8)
    assert calls[-2:] == [8, 8]                  # a changed teacher file: scored again
