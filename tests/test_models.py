"""Loading checkpoints: the good ones load, the bad ones say what is wrong."""
import json
import os
import shutil

import pytest
import torch

from compressor.core.data import get_task
from compressor.core.errors import CompressorError
from compressor.core.io import atomic_dir
from compressor.core.models import (count_parameters, load_for_task, resolve_model, save_checkpoint,
                               size_on_disk)

pytestmark = pytest.mark.unit


def test_base_encoder_gets_a_head_sized_for_the_task(tiny_models):
    model, tokenizer = load_for_task(tiny_models["bert"], get_task("rte"))
    assert model.config.num_labels == 2
    assert model.config.id2label == {0: "entailment", 1: "not_entailment"}
    model, _ = load_for_task(tiny_models["bert"], get_task("stsb"))
    assert model.config.num_labels == 1 and model.config.problem_type == "regression"


def test_classifier_with_other_label_count_is_refused(tiny_models, tmp_path):
    model, tok = load_for_task(tiny_models["bert"], get_task("sst2"))
    save_checkpoint(model, tok, str(tmp_path / "clf"), {"task": "sst2"})
    with pytest.raises(CompressorError, match="2 labels but task stsb has 1"):
        load_for_task(str(tmp_path / "clf"), get_task("stsb"))


def test_alias_resolves_to_the_packaged_minilm(minilm_dir):
    assert resolve_model("minilm-l6") == minilm_dir
    assert os.path.isfile(os.path.join(minilm_dir, "model.safetensors"))


@pytest.mark.parametrize("case, message", [
    ("missing", "checkpoint not found"),
    ("no_config", "has no config.json"),
    ("bad_config", "corrupt checkpoint"),
    ("truncated_weights", "corrupt checkpoint"),
])
def test_bad_checkpoints_fail_with_one_line(tiny_models, tmp_path, case, message):
    path = tmp_path / "ckpt"
    if case != "missing":
        shutil.copytree(tiny_models["bert"], path)
    if case == "no_config":
        os.remove(path / "config.json")
    elif case == "bad_config":
        (path / "config.json").write_text("{ not json")
    elif case == "truncated_weights":
        weights = path / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[:1000])
    with pytest.raises(CompressorError, match=message) as err:
        load_for_task(str(path) if case != "missing" else "./no/such/ckpt", get_task("sst2"))
    assert "\n" not in str(err.value)


def test_hub_id_offline_fails_at_once(monkeypatch):
    import compressor.core.models as models
    monkeypatch.setattr(models, "hub_reachable", lambda: False)
    with pytest.raises(CompressorError, match="bert-base-uncased is no local folder, and the model hub"):
        load_for_task("bert-base-uncased", get_task("sst2"))


def test_shared_parameters_count_once():
    a = torch.nn.Linear(4, 4)
    model = torch.nn.Sequential(a, a)
    assert count_parameters(model) == 20


def test_checkpoint_folder_appears_whole_or_not_at_all(tiny_models, tmp_path):
    model, tok = load_for_task(tiny_models["bert"], get_task("sst2"))
    target = tmp_path / "out"
    with pytest.raises(RuntimeError):
        with atomic_dir(str(target)) as tmp:
            model.save_pretrained(tmp)
            raise RuntimeError("killed midway")
    assert not target.exists()
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".out")]  # no temporary left over
    size = save_checkpoint(model, tok, str(target), {"task": "sst2"}, {"record.json": {"a": 1}})
    assert size == size_on_disk(str(target)) > 0
    assert json.loads((target / "record.json").read_text()) == {"a": 1, "size_bytes": size}


def test_written_files_keep_the_usual_permissions(tmp_path):
    from compressor.core.io import write_json
    mask = os.umask(0o022)
    try:
        write_json(str(tmp_path / "r.json"), {"a": 1})
        with atomic_dir(str(tmp_path / "d")) as tmp:
            open(os.path.join(tmp, "f"), "w").close()
    finally:
        os.umask(mask)
    assert (tmp_path / "r.json").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "d").stat().st_mode & 0o777 == 0o755
