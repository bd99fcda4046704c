"""Data-parallel training: two CPU processes (gloo) train what one process trains."""
import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from compressor.core.distributed import shard

pytestmark = pytest.mark.e2e

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_shards_cover_the_rows_in_order():
    rows = list(range(7))
    parts = [shard(rows, i, 3) for i in range(3)]
    assert parts == [[0, 1, 2], [3, 4], [5, 6]]
    assert [shard(rows[:1], i, 2) for i in range(2)] == [[0], []]


def _recipe(path, tiny_bert, train, dev):
    path.write_text(f"""
name: ddp-test
task: reviews
data: {{train_file: {train}, dev_file: {dev}, text_columns: [review], label_column: sentiment}}
device: cpu
teacher:
  model: {tiny_bert}
  finetune: {{epochs: 2, batch_size: 16, lr: 2e-3, max_length: 16, eval_every: 4}}
stages:
  - distill:
      student: {{kind: layers, num_layers: 1}}
      losses: {{kd: {{weight: 1, temperature: 2}}}}
      train: {{epochs: 1, batch_size: 12, lr: 2e-3, max_length: 16}}
      cache_teacher_logits: false
""")
    return str(path)


def _weights(folder):
    return load_file(os.path.join(folder, "model.safetensors"))


def _tiny_bert_without_dropout(minilm_dir, path):
    """Dropout draws differ between one process and two (each rank draws for its own rows)."""
    import transformers

    from conftest import TINY

    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    torch.manual_seed(0)
    config = transformers.BertConfig(**TINY, vocab_size=tokenizer.vocab_size,
                                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    transformers.AutoModel.from_config(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def test_two_gloo_processes_train_as_one(minilm_dir, tmp_path):
    """A recipe (fine-tune a teacher, distil a student) run by ``--nproc 2`` on the CPU gives
    the weights and scores of the same recipe in one process, and rank 0 alone writes."""
    from compressor.recipe import run_recipe
    from conftest import write_reviews

    train = write_reviews(tmp_path / "train.csv", 96)   # 6 batches of 16; the last of 12 is 0
    dev = write_reviews(tmp_path / "dev.csv", 33, start=96)   # uneven shares of the dev rows
    model = _tiny_bert_without_dropout(minilm_dir, tmp_path / "tiny")
    recipe = _recipe(tmp_path / "r.yaml", model, train, dev)
    one = run_recipe(recipe, str(tmp_path / "one"))

    env = {**os.environ, "COMPRESSOR_PROGRESS": "0", "PYTHONPATH": ROOT}
    two_dir = tmp_path / "two"
    done = subprocess.run([sys.executable, "-m", "compressor", "run", recipe, "--out", str(two_dir),
                           "--nproc", "2"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("report:") == 1   # rank 0 alone prints the results
    # the same files as one process's run, no stray or temporary ones
    assert sorted(os.listdir(two_dir)) == sorted(os.listdir(tmp_path / "one"))
    import json

    two = json.loads((two_dir / "manifest.json").read_text())
    for a, b in zip(one["stages"], two["stages"]):
        assert a["dir"] == b["dir"] and a["fingerprint"] == b["fingerprint"]
        assert abs(a["score"] - b["score"]) <= 100 / 33 + 1e-9   # one dev row at most
        wa, wb = _weights(tmp_path / "one" / a["dir"]), _weights(two_dir / b["dir"])
        assert wa.keys() == wb.keys()
        for name in wa:
            torch.testing.assert_close(wb[name], wa[name], atol=2e-4, rtol=1e-3, msg=name)
        assert sorted(os.listdir(two_dir / b["dir"])) == sorted(os.listdir(tmp_path / "one" / a["dir"]))
    record = json.loads((two_dir / "01-distill" / "record.json").read_text())
    assert record["phases"][0]["processes"] == 2 and record["phases"][0]["train_rows"] == 96
    # the folder two processes wrote resumes like one process's: every stage is skipped
    logs = []
    again = run_recipe(recipe, str(two_dir), log=logs.append)
    logs = [line for line in logs if "a model at chance" not in line]   # (the tiny teacher is at chance)
    assert all("skipped" in line for line in logs) and len(logs) == 2, logs
    assert [s["fingerprint"] for s in again["stages"]] == [s["fingerprint"] for s in two["stages"]]


def test_nproc_refuses_what_cannot_run(tiny_models, tmp_path, monkeypatch, capsys):
    from compressor.cli import main

    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(SystemExit):
        main(["run", str(tmp_path / "r.yaml"), "--out", str(tmp_path / "o"), "--nproc", "2"])
    assert "already one of 2" in capsys.readouterr().err
