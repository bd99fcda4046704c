"""FP32 master weights whatever dtype a checkpoint was stored in; a warning for a model at
chance (the majority-class baseline); training logs through accelerate's trackers (issue 30)."""
import glob
import json
import os

import pytest
import torch
import transformers
from safetensors import safe_open

from conftest import tiny_config, write_reviews

pytestmark = pytest.mark.integration

LOW = (torch.float16, torch.bfloat16)


def _reviews(tmp_path, rows=200):
    from compressor.core.data import UserData

    train = write_reviews(tmp_path / "train.csv", rows)
    dev = write_reviews(tmp_path / "dev.csv", 48, start=rows)
    return UserData(train, dev, ("review",), "sentiment")


def _tiny_classifier(minilm_dir, seed=0):
    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    config = tiny_config("bert")
    config.vocab_size, config.num_labels = tokenizer.vocab_size, 2
    torch.manual_seed(seed)
    return transformers.AutoModelForSequenceClassification.from_config(config), tokenizer


def _saved_fp16(path, minilm_dir) -> str:
    """A tiny checkpoint whose weights are stored in fp16, as many hub checkpoints are."""
    model, tokenizer = _tiny_classifier(minilm_dir)
    model.half().save_pretrained(path)
    tokenizer.save_pretrained(path)
    with safe_open(os.path.join(path, "model.safetensors"), "pt") as f:
        assert {f.get_tensor(k).dtype for k in f.keys()} == {torch.float16}
    return str(path)


def _stored_dtypes(folder) -> set:
    with safe_open(os.path.join(folder, "model.safetensors"), "pt") as f:
        return {f.get_tensor(k).dtype for k in f.keys()}


def _config_dtype(folder):
    config = json.load(open(os.path.join(folder, "config.json")))
    return config.get("dtype", config.get("torch_dtype"))


def test_a_checkpoint_stored_in_fp16_loads_in_float32(tmp_path, minilm_dir, monkeypatch):
    from compressor.core.models import load_for_task

    path = _saved_fp16(tmp_path / "fp16", minilm_dir)
    # transformers 5 loads a checkpoint in its stored dtype unless told otherwise: stand in for it
    # here (transformers 4.57 is pinned) and check the loader asks for float32
    original = transformers.AutoModelForSequenceClassification.from_pretrained.__func__
    asked = {}

    def stored_dtype(cls, *args, **kwargs):
        asked.update(kwargs)
        model = original(cls, *args, **kwargs)
        return model if (kwargs.get("dtype") or kwargs.get("torch_dtype")) else model.half()

    monkeypatch.setattr(transformers.AutoModelForSequenceClassification, "from_pretrained",
                        classmethod(stored_dtype))
    net, _ = load_for_task(path)
    assert (asked.get("dtype") or asked.get("torch_dtype")) is torch.float32
    assert {p.dtype for p in net.parameters()} == {torch.float32}
    assert net.config.dtype == torch.float32


def test_a_shaped_checkpoint_stored_in_fp16_loads_in_float32(tmp_path, minilm_dir):
    """A folder of per-layer shapes is built from its config (``from_config``), which takes the
    config's dtype: fp16 here, as the folder says."""
    from compressor.core.data import get_task
    from compressor.core.loaders import read_meta
    from compressor.core.models import checkpoint_meta, load_for_task, save_checkpoint
    from compressor.core.shapes import resize_layers

    model, tokenizer = _tiny_classifier(minilm_dir)
    resize_layers(model, heads=[[2, 3], None])   # the toolkit's own head removal (transformers 5 has no prune_heads)
    model.half()
    model.config.dtype = torch.float16
    out = tmp_path / "pruned-fp16"
    save_checkpoint(model, tokenizer, str(out), checkpoint_meta(get_task("sst2"), 32, "test"))
    assert read_meta(str(out)).get("shape") and _stored_dtypes(out) == {torch.float16}
    net, _ = load_for_task(str(out), get_task("sst2"))
    assert {p.dtype for p in net.parameters()} == {torch.float32}


def test_fit_keeps_fp32_master_weights_and_learns(tmp_path, minilm_dir):
    """An fp16 model given to the training loop trains float32 weights (and optimiser state)."""
    from compressor.core.data import load_data
    from compressor.engine.train import Callback, TrainConfig, fit

    user = _reviews(tmp_path)
    task = user.task()
    train, dev = load_data(task, "train", user_data=user), load_data(task, "dev", user_data=user)
    model, tokenizer = _tiny_classifier(minilm_dir)
    model.half()
    seen = []

    class Dtypes(Callback):
        def on_optimizer_step(self, state):
            seen.append({p.dtype for p in state.model.parameters()}
                        | {v.dtype for s in state.optimizer.state.values() for v in s.values()
                           if torch.is_tensor(v) and v.is_floating_point()})

    result = fit(model, tokenizer, train, dev, TrainConfig(epochs=3, batch_size=16, max_length=16,
                                                           lr=2e-3, device="cpu", precision="bf16"),
                 callbacks=[Dtypes()])
    assert seen and all(s == {torch.float32} for s in seen)
    curve = result["loss_curve"]
    assert curve[-1][1] < curve[0][1]
    assert result["best"]["metrics"]["accuracy"] >= 0.9


def test_finetune_of_an_fp16_checkpoint_saves_float32_and_learns(tmp_path, minilm_dir, capsys):
    from compressor.engine.train import TrainConfig, finetune

    path = _saved_fp16(tmp_path / "fp16", minilm_dir)
    out = tmp_path / "tuned"
    record = finetune(path, None, str(out), user_data=_reviews(tmp_path),
                      config=TrainConfig(epochs=3, batch_size=16, max_length=16, lr=5e-3, device="cpu"))
    assert _stored_dtypes(out) == {torch.float32}
    assert _config_dtype(out) == "float32"
    assert record["loss_curve"][-1][1] < record["loss_curve"][0][1]
    assert record["metrics"]["accuracy"] >= 0.9
    assert "warnings" not in record and "majority-class" not in capsys.readouterr().err


# -- a model at chance ------------------------------------------------------------------


def test_majority_baseline_and_chance_warning():
    from compressor.core.metrics import chance_warning, majority_baseline

    labels = [1, 1, 1, 0]
    assert majority_baseline("sst2", labels)[0] == pytest.approx(75.0)
    assert "majority-class baseline 75.00" in chance_warning("sst2", 75.0, labels)
    assert "always predicting '1'" in chance_warning("sst2", 50.0, labels)
    assert chance_warning("sst2", 75.01, labels) is None
    assert majority_baseline("cola", labels)[0] == 0.0        # MCC of one class
    assert chance_warning("cola", 12.0, labels) is None
    assert chance_warning("stsb", 3.0, [0.5, 2.0, 4.0]) is not None   # regression: r near 0
    assert chance_warning("stsb", 60.0, [0.5, 2.0, 4.0]) is None


def _one_class(path, minilm_dir) -> str:
    """A classifier that answers class 0 whatever the text."""
    model, tokenizer = _tiny_classifier(minilm_dir)
    with torch.no_grad():
        model.classifier.weight.zero_()
        model.classifier.bias.copy_(torch.tensor([20.0, -20.0]))
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def test_a_model_that_predicts_one_class_gets_a_warning(tmp_path, minilm_dir, capsys):
    from compressor.engine.train import TrainConfig, finetune

    path = _one_class(tmp_path / "one", minilm_dir)
    out = tmp_path / "tuned"
    record = finetune(path, None, str(out), user_data=_reviews(tmp_path, rows=32),
                      config=TrainConfig(max_steps=1, epochs=0, batch_size=16, max_length=16, lr=1e-9,
                                         device="cpu"))
    err = capsys.readouterr().err
    assert "warning: " in err and "majority-class baseline 50.00" in err
    assert record["score"] == pytest.approx(50.0)
    saved = json.load(open(out / "metrics.json"))
    assert saved["warnings"] and "majority-class baseline" in saved["warnings"][0]


def test_a_recipe_says_its_later_stages_start_from_a_model_at_chance(tmp_path, minilm_dir):
    from compressor.recipe import run_recipe

    user = _reviews(tmp_path, rows=32)
    teacher = _one_class(tmp_path / "one", minilm_dir)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"""name: chance
task: reviews
data: {{train_file: {user.train}, dev_file: {user.dev}, text_columns: [review], label_column: sentiment}}
device: cpu
teacher:
  model: {teacher}
  finetune: {{max_steps: 1, epochs: 0, batch_size: 16, max_length: 16, lr: 1e-9}}
stages:
  - evaluate: {{}}
""")
    logs = []
    out = tmp_path / "run"
    run_recipe(str(recipe), str(out), log=logs.append)
    text = "\n".join(logs)
    assert "[00-teacher] warning: " in text and "majority-class baseline 50.00" in text
    assert "[01-evaluate] starts from 00-teacher, a model at chance" in text
    record = json.load(open(out / "00-teacher" / "record.json"))
    assert record["warnings"] and record["at_chance"] == pytest.approx(50.0)
    assert "majority-class baseline" in (out / "report.md").read_text()


# -- trackers ---------------------------------------------------------------------------


def test_report_to_tensorboard_writes_an_events_file(tmp_path, minilm_dir):
    pytest.importorskip("tensorboard")
    from click.testing import CliRunner

    from compressor.cli import cli

    user = _reviews(tmp_path, rows=32)
    model, tokenizer = _tiny_classifier(minilm_dir)
    model.save_pretrained(tmp_path / "m")
    tokenizer.save_pretrained(tmp_path / "m")
    out = tmp_path / "tuned"
    result = CliRunner().invoke(cli, [
        "finetune", str(tmp_path / "m"), "--out", str(out), "--train-file", user.train,
        "--dev-file", user.dev, "--text-column", "review", "--label-column", "sentiment",
        "--epochs", "1", "--batch-size", "16", "--max-length", "16", "--device", "cpu",
        "--report-to", "tensorboard"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    events = glob.glob(str(out / "runs" / "*" / "events.out.tfevents.*"))
    assert events, sorted(os.listdir(out))
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(os.path.dirname(events[0]))
    acc.Reload()
    assert {"train/loss", "eval/score", "eval/accuracy"} <= set(acc.Tags()["scalars"])
    assert os.path.isfile(out / "model.safetensors")   # the checkpoint is there beside its logs


def test_report_to_names_a_missing_package_in_one_line():
    import importlib.util

    from compressor.core.errors import CompressorError
    from compressor.engine.train import TrainConfig

    with pytest.raises(CompressorError, match="unknown report_to 'tensorbored'"):
        TrainConfig(report_to="tensorbored").check()
    if importlib.util.find_spec("wandb") is None:
        with pytest.raises(CompressorError) as caught:
            TrainConfig(report_to="wandb").check()
        assert "needs the wandb package" in str(caught.value) and "\n" not in str(caught.value)
    TrainConfig(report_to="none").check()
