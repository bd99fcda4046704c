"""Fine-tuning and evaluation, on tiny random encoders of every architecture and real GLUE rows."""
import json
import os

import pytest
import torch
import transformers

from compressor.core.errors import CompressorError
from compressor.engine.scoring import evaluate, predict
from compressor.engine.train import TrainConfig, finetune
from conftest import write_reviews

pytestmark = pytest.mark.unit

QUICK = dict(epochs=1, batch_size=16, max_length=32, lr=1e-3, device="cpu")


@pytest.mark.parametrize("arch, task", [("bert", "sst2"), ("roberta", "rte"),
                                        ("distilbert", "sst2"), ("mpnet", "stsb")])
def test_finetune_then_evaluate_every_architecture(tiny_models, glue_dir, tmp_path, arch, task):
    out = tmp_path / "ckpt"
    record = finetune(tiny_models[arch], task, str(out), data_dir=glue_dir, train_limit=64,
                      dev_limit=48, config=TrainConfig(**QUICK))
    # the folder is a plain Hugging Face checkpoint
    model = transformers.AutoModelForSequenceClassification.from_pretrained(out)
    assert model.config.model_type == arch
    saved = json.loads((out / "metrics.json").read_text())
    for key in ("task", "split", "metrics", "examples", "seed", "wall_time_s", "versions", "loss_curve"):
        assert key in saved
    assert saved["task"] == task and saved["examples"] == 48 and saved["train_examples"] == 64
    assert saved["versions"]["transformers"] == transformers.__version__
    # evaluating the checkpoint again gives the metrics training recorded for its best step
    again = evaluate(str(out), split="dev", data_dir=glue_dir, limit=48, device="cpu")
    assert again["task"] == task
    for name, value in record["metrics"].items():
        assert again["metrics"][name] == pytest.approx(value, abs=1e-6)


def test_same_seed_same_result(tiny_models, glue_dir, tmp_path):
    runs = [finetune(tiny_models["bert"], "sst2", str(tmp_path / f"run{i}"), data_dir=glue_dir,
                     train_limit=64, dev_limit=32, config=TrainConfig(**QUICK)) for i in range(2)]
    assert runs[0]["metrics"] == runs[1]["metrics"]
    weights = [transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / f"run{i}")
               .classifier.weight for i in range(2)]
    assert torch.equal(*weights)


def test_training_learns_a_learnable_task(tiny_models, tmp_path):
    """On a user file whose label is visible in the text, a tiny model must get far above chance."""
    from compressor.core.data import read_user_file
    from compressor.core.models import load_for_task
    from compressor.engine.scoring import score
    from compressor.engine.train import fit, set_seed

    data = read_user_file(write_reviews(tmp_path / "train.csv", 400), ["review"], "sentiment")
    set_seed(0)
    model, tok = load_for_task(tiny_models["bert"], data.task)
    before = score(model, tok, data, 16)["accuracy"]
    result = fit(model, tok, data, data, TrainConfig(epochs=3, batch_size=16, max_length=16, lr=2e-3,
                                                      device="cpu"))
    after = score(model, tok, data, 16)["accuracy"]
    assert after >= 0.95 > before
    # the record keeps the loss: ten runs of steps ending at the last, falling as it learned
    curve = result["loss_curve"]
    assert len(curve) == 10 and curve[-1][0] == result["steps"] == 75
    assert [s for s, _ in curve] == sorted(s for s, _ in curve)
    assert curve[-1][1] < curve[0][1] / 2


def test_predict_labels_a_glue_test_file(tiny_models, glue_dir, tmp_path):
    out = tmp_path / "ckpt"
    finetune(tiny_models["bert"], "sst2", str(out), data_dir=glue_dir, train_limit=32,
             dev_limit=16, config=TrainConfig(**QUICK))
    test_file = tmp_path / "test.tsv"
    with open(os.path.join(glue_dir, "SST-2", "test.tsv")) as f:
        test_file.write_text("".join(f.readlines()[:41]))
    result = predict(str(out), str(test_file), str(tmp_path / "pred.tsv"), device="cpu")
    lines = (tmp_path / "pred.tsv").read_text().splitlines()
    assert result["rows"] == 40 and lines[0] == "index\tprediction" and len(lines) == 41
    assert lines[1].split("\t")[0] == "0"
    assert {line.split("\t")[1] for line in lines[1:]} <= {"negative", "positive"}   # SST-2's names


def test_user_file_needs_its_text_columns(tiny_models, glue_dir, tmp_path):
    out = tmp_path / "ckpt"
    finetune(tiny_models["bert"], "sst2", str(out), data_dir=glue_dir, train_limit=16,
             dev_limit=16, config=TrainConfig(**QUICK))
    user = tmp_path / "mine.csv"
    user.write_text('id,review\n1,"a fine, warm film"\n2,dull\n')
    predict(str(out), str(user), str(tmp_path / "p.tsv"), text_columns=["review"], device="cpu")
    assert len((tmp_path / "p.tsv").read_text().splitlines()) == 3
    with pytest.raises(CompressorError, match="column"):
        predict(str(out), str(user), str(tmp_path / "p.tsv"), text_columns=["text"], device="cpu")


@pytest.mark.parametrize("change, message", [
    (dict(device="cuda"), "no CUDA GPU"),
    (dict(precision="fp16"), "fp16 training needs a CUDA GPU"),
    (dict(lr=0.0), "lr must be positive"),
])
def test_impossible_settings_are_refused(tiny_models, glue_dir, tmp_path, monkeypatch, change,
                                        message):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # also on a GPU machine
    config = TrainConfig(**{**QUICK, **change})
    with pytest.raises(CompressorError, match=message):
        finetune(tiny_models["bert"], "sst2", str(tmp_path / "o"), data_dir=glue_dir,
                 train_limit=8, config=config)


def test_mixed_precision_where_this_machine_allows_it(tiny_models, glue_dir, tmp_path):
    """bf16 trains on CPU and CUDA; fp16 (with loss scaling) only on CUDA, where it is tried too."""
    precisions = ["bf16", "fp16"] if torch.cuda.is_available() else ["bf16"]
    for precision in precisions:
        record = finetune(tiny_models["bert"], "sst2", str(tmp_path / precision), data_dir=glue_dir,
                          train_limit=64, dev_limit=32,
                          config=TrainConfig(**{**QUICK, "device": "auto", "precision": precision}))
        assert 0.0 <= record["metrics"]["accuracy"] <= 1.0
        assert record["config"]["precision"] == precision
        assert record["history"] and record["steps"] == 4


def test_bf16_on_a_cpu_that_emulates_it_says_so_once(capsys, monkeypatch):
    """An x86 CPU without AVX-512 BF16 or AMX runs bf16 emulated (about ten times slower than
    fp32 here): one line on stderr, once; none where the CPU has bf16 or on ARM."""
    from compressor.core import device

    monkeypatch.setattr(device, "_WARNED", set())
    assert not device._warn_emulated_bf16({"avx2", "avx512_bf16"}, "x86_64")
    assert not device._warn_emulated_bf16({"amx_bf16"}, "x86_64")
    assert not device._warn_emulated_bf16(set(), "aarch64")
    assert capsys.readouterr().err == ""
    assert device._warn_emulated_bf16({"avx2"}, "x86_64")
    assert not device._warn_emulated_bf16({"avx2"}, "x86_64")      # once per process
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bf16 on this CPU" in err and "fp32" in err


def test_own_files_finetune_eval_and_predict(tiny_models, tmp_path, capsys):
    """A user's CSV files stand in for a GLUE task through the whole CLI."""
    from compressor.cli import main

    train = write_reviews(tmp_path / "train.csv", 400)
    dev = write_reviews(tmp_path / "dev.csv", 64, start=400)
    out = tmp_path / "ckpt"
    main(["finetune", tiny_models["bert"], "--train-file", train, "--dev-file", dev,
          "--text-column", "review", "--label-column", "sentiment", "--out", str(out),
          "--epochs", "3", "--lr", "2e-3", "--batch-size", "16", "--max-length", "16",
          "--device", "cpu"])
    record = json.loads((out / "metrics.json").read_text())
    assert record["task"] == "sentiment" and record["metrics"]["accuracy"] >= 0.95
    assert transformers.AutoConfig.from_pretrained(out).id2label == {0: "neg", 1: "pos"}
    # eval and predict need no task or columns: the checkpoint remembers them
    main(["eval", str(out), "--input", dev, "--label-column", "sentiment", "--device", "cpu"])
    again = json.loads((out / "eval-sentiment-user.json").read_text())
    assert again["metrics"] == record["metrics"]
    main(["predict", str(out), "--input", dev, "--output", str(tmp_path / "p.tsv"), "--device", "cpu"])
    predicted = [line.split("\t")[1] for line in (tmp_path / "p.tsv").read_text().splitlines()[1:]]
    truth = [line.rsplit(",", 1)[1] for line in open(dev).read().splitlines()[1:]]
    assert sum(p == t for p, t in zip(predicted, truth)) >= 0.95 * len(truth)


def test_dev_label_unknown_to_training_names_file_and_line(tiny_models, tmp_path):
    from compressor.core.data import UserData

    train = write_reviews(tmp_path / "train.csv", 16)
    dev = tmp_path / "dev.csv"
    dev.write_text('review,sentiment\n"fine",pos\n"meh",neutral\n')
    data = UserData(train, str(dev), ("review",), "sentiment")
    with pytest.raises(CompressorError, match=f"{dev}:3: label 'neutral' is not one of neg, pos"):
        finetune(tiny_models["bert"], None, str(tmp_path / "o"), user_data=data,
                 config=TrainConfig(**QUICK))


def test_gradient_accumulation_and_step_limit(tiny_models, glue_dir, tmp_path):
    """64 rows in batches of 8, two batches per step: 4 optimiser steps an epoch."""
    config = TrainConfig(**{**QUICK, "batch_size": 8, "grad_accum": 2, "epochs": 2})
    record = finetune(tiny_models["bert"], "sst2", str(tmp_path / "a"), data_dir=glue_dir,
                      train_limit=64, dev_limit=16, config=config)
    assert record["steps"] == 8 and [h["step"] for h in record["history"]] == [4, 8]
    config = TrainConfig(**{**QUICK, "batch_size": 8, "max_steps": 3, "eval_every": 2})
    record = finetune(tiny_models["bert"], "sst2", str(tmp_path / "b"), data_dir=glue_dir,
                      train_limit=64, dev_limit=16, config=config)
    assert record["steps"] == 3 and [h["step"] for h in record["history"]] == [2, 3]


def test_deterministic_kernels_only_when_asked(monkeypatch):
    """COMPRESSOR_DETERMINISTIC=1: set_seed turns PyTorch's deterministic kernels on (the GPU's
    default ones do not repeat a run with the same seed) and names cuBLAS's workspace; unset, it
    changes neither."""
    from compressor.engine.train import set_seed

    monkeypatch.delenv("COMPRESSOR_DETERMINISTIC", raising=False)
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    try:
        set_seed(1)
        assert not torch.are_deterministic_algorithms_enabled() and "CUBLAS_WORKSPACE_CONFIG" not in os.environ
        monkeypatch.setenv("COMPRESSOR_DETERMINISTIC", "1")
        set_seed(1)
        assert torch.are_deterministic_algorithms_enabled()
        assert torch.is_deterministic_algorithms_warn_only_enabled()
        assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    finally:
        torch.use_deterministic_algorithms(False)
