"""BERT-of-Theseus: the group wrapper runs the successors at p=1 and the predecessor at p=0,
the schedule's rates, a frozen predecessor, and an ordinary smaller model at the end."""
import copy

import numpy as np
import pytest
import torch
import transformers

from conftest import save_sst2_classifier, tiny_config
from test_cli import run_cli


def _classifier(arch: str, layers: int = 4, vocab: int = 200):
    config = tiny_config(arch)
    config.num_hidden_layers, config.num_labels, config.vocab_size = layers, 2, vocab
    config.hidden_dropout_prob = config.attention_probs_dropout_prob = 0.0   # train mode, same outputs
    torch.manual_seed(0)
    return transformers.AutoModelForSequenceClassification.from_config(config)


def _inputs():
    torch.manual_seed(1)
    ids = torch.randint(5, 200, (3, 11))
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    return {"input_ids": ids, "attention_mask": mask}


class _State:
    def __init__(self, model, total_steps=10, seed=0):
        from compressor.engine.train import TrainConfig
        self.model, self.total_steps, self.step, self.world_size = model, total_steps, 0, 1
        self.config = TrainConfig(seed=seed)


@pytest.mark.parametrize("arch,init", [("bert", "last"), ("mpnet", "first"), ("bert", "prefix")])
def test_p1_runs_the_successors_and_p0_the_predecessor(arch, init):
    from compressor.core.arch import arch_of
    from compressor.theseus.replace import Replacing, TheseusGroup, successor_model, theseus_model

    model = _classifier(arch)
    original = copy.deepcopy(model).eval()
    spec = arch_of(model)
    picked = {"last": [1, 3], "first": [0, 2], "prefix": [0, 1]}[init]
    expected = copy.deepcopy(model).eval()   # built here, not by the code under test
    spec.set_layers(expected, torch.nn.ModuleList(copy.deepcopy(spec.get_layers(expected)[i])
                                                  for i in picked))
    theseus_model(model, 2, init)
    assert len(spec.get_layers(model)) == 2 and all(
        isinstance(g, TheseusGroup) for g in spec.get_layers(model))
    model.train()
    outputs = {}
    for p in (1.0, 0.0):
        callback = Replacing("constant", rate=p)
        state = _State(model)
        callback.on_train_begin(state)
        callback.on_step_begin(state)
        with torch.no_grad():
            outputs[p] = model(**_inputs()).logits
    with torch.no_grad():
        want_successors = expected(**_inputs()).logits
        want_predecessor = original(**_inputs()).logits
        # hidden states: one per group plus the embeddings
        assert len(model.eval()(**_inputs(), output_hidden_states=True).hidden_states) == 3
    assert not torch.allclose(want_successors, want_predecessor)
    torch.testing.assert_close(outputs[1.0], want_successors)
    torch.testing.assert_close(outputs[0.0], want_predecessor)
    with torch.no_grad():   # eval mode: the successors, whatever was drawn
        torch.testing.assert_close(model.eval()(**_inputs()).logits, want_successors)
    plain = successor_model(model)
    assert plain.config.num_hidden_layers == 2
    assert set(plain.state_dict()) == set(expected.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(plain(**_inputs()).logits, want_successors)


def test_a_constant_rate_draws_each_group_at_that_rate():
    from compressor.theseus.replace import Replacing, theseus_model

    model = _classifier("bert", layers=4)
    groups = theseus_model(model, 4)
    callback = Replacing("constant", rate=0.3)
    state = _State(model, seed=5)
    callback.on_train_begin(state)
    counts = []
    for _ in range(500):
        callback.on_step_begin(state)
        counts.append(sum(g.replaced for g in groups))
    assert np.mean(counts) / 4 == pytest.approx(0.3, abs=0.04)
    assert len(set(counts)) > 2     # drawn per group, not once per step


def test_the_linear_schedule_rises_to_one():
    from compressor.theseus.replace import Replacing, replacement_rate, theseus_model

    rates = [replacement_rate("linear", t, k=0.1, b=0.3) for t in range(10)]
    np.testing.assert_allclose(rates, [0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.0, 1.0])
    assert replacement_rate("constant", 7, rate=0.5) == 0.5
    model = _classifier("bert")
    theseus_model(model, 2)
    callback = Replacing("linear", k=0.0, b=0.2)   # k 0: reach 1 at the last step
    state = _State(model, total_steps=5)
    callback.on_train_begin(state)
    seen = []
    for step in range(5):
        state.step = step
        callback.on_step_begin(state)
        seen.append(callback.rates[-1])
    np.testing.assert_allclose(seen, [0.2, 0.4, 0.6, 0.8, 1.0])
    assert callback.summary()["last_rate"] == pytest.approx(1.0)


@pytest.fixture(scope="module")
def sst2(glue_dir):
    from compressor.core.data import get_task, load_data

    task = get_task("sst2")
    return load_data(task, "train", glue_dir, 48), load_data(task, "dev", glue_dir, 24)


def test_phase_one_leaves_the_predecessor_as_it_was(sst2, minilm_dir):
    from compressor.theseus.replace import Replacing, groups_of, theseus_model
    from compressor.theseus.stage import TheseusLoss
    from compressor.engine.train import TrainConfig, fit

    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    model = _classifier("bert", vocab=tokenizer.vocab_size)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    theseus_model(model, 2)
    callback = Replacing("constant", rate=0.5)
    fit(model, tokenizer, *sst2, TrainConfig(epochs=1, batch_size=8, max_length=32, lr=1e-3,
                                             device="cpu", warmup=0), TheseusLoss(),
        callbacks=[callback])
    assert 0 < sum(callback.replaced) < 2 * len(callback.replaced)   # both kinds of steps ran
    groups = groups_of(model)
    for g, first in zip(groups, (0, 2)):
        for i, layer in enumerate(g.predecessors):
            for name, value in layer.state_dict().items():
                assert torch.equal(value, before[f"bert.encoder.layer.{first + i}.{name}"]), name
    moved = [not torch.equal(v, before[f"bert.encoder.layer.{3 if j else 1}.{name}"])
             for j, g in enumerate(groups) for name, v in g.successor.state_dict().items()]
    assert any(moved)
    # the embeddings and classifier are frozen with the predecessor by default
    assert torch.equal(model.classifier.weight, before["classifier.weight"])


@pytest.mark.parametrize("arch", ["bert", "mpnet"])
def test_the_result_is_a_plain_smaller_model_that_reloads_identically(arch, sst2, minilm_dir, tmp_path):
    from compressor.core.models import checkpoint_meta, load_for_task, save_checkpoint
    from compressor.engine.scoring import predict_logits
    from compressor.theseus.config import TheseusConfig
    from compressor.theseus.replace import TheseusGroup
    from compressor.theseus.stage import run_theseus

    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    model = _classifier(arch, vocab=tokenizer.vocab_size)
    config = TheseusConfig(num_layers=2, schedule="linear", b=0.5, replacing_epochs=1,
                           finetune_epochs=1, train={"batch_size": 16, "max_length": 32, "device": "cpu"},
                           kd={"weight": 1.0, "temperature": 2.0})
    train, dev = sst2
    small, record = run_theseus(model, tokenizer, train, dev, config)
    assert type(small).__name__ == type(_classifier(arch)).__name__
    assert not any(isinstance(m, TheseusGroup) for m in small.modules())
    assert small.config.num_hidden_layers == 2 and record["groups"] == [2, 2]
    assert record["parameters"] < record["parameters_before"]
    assert [p["phase"] for p in record["phases"]] == ["replacing", "finetune"]
    assert record["phases"][0]["replacing"]["last_rate"] == pytest.approx(1.0)
    save_checkpoint(small, tokenizer, str(tmp_path / "m"), checkpoint_meta(train.task, 32, "theseus"))
    again, tok = load_for_task(str(tmp_path / "m"))
    assert again.config.num_hidden_layers == 2
    np.testing.assert_array_equal(predict_logits(small, tokenizer, dev.examples, 32),
                                  predict_logits(again, tok, dev.examples, 32))


def test_the_stage_runs_in_a_recipe(tmp_path, minilm_dir, glue_dir):
    import json
    import os

    from compressor.recipe import run_recipe, validate_recipe

    teacher = save_sst2_classifier(tmp_path / "teacher", minilm_dir)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"""name: tiny-theseus
task: sst2
data: {{train_limit: 48, dev_limit: 24}}
teacher: {teacher}
device: cpu
stages:
  - theseus: {{num_layers: 1, schedule: linear, b: 0.5, replacing_epochs: 1, finetune_epochs: 1,
               train: {{batch_size: 16, max_length: 32}}, kd: {{weight: 0.5}}}}
  - evaluate: {{split: dev}}
""")
    assert validate_recipe(str(recipe)) == []
    out = tmp_path / "run"
    manifest = run_recipe(str(recipe), str(out), data_dir=glue_dir, log=lambda m: None)
    stage = manifest["stages"][1]
    assert stage["dir"] == "01-theseus"
    assert json.load(open(out / "01-theseus" / "config.json"))["num_hidden_layers"] == 1
    record = json.load(open(out / "01-theseus" / "record.json"))
    assert record["parameters"] < record["parameters_before"] and len(record["phases"]) == 2
    assert manifest["stages"][2]["score"] == pytest.approx(record["score"])
    assert os.path.exists(out / "01-theseus" / "model.safetensors")


def test_recipe_validate_names_the_line_of_a_bad_theseus_setting(tmp_path, capsys):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("name: t\ntask: sst2\nteacher: minilm\nstages:\n"
                      "  - theseus:\n      num_layers: 3\n      schedule: sideways\n"
                      "      kd: {weight: -1}\n      epochs: 2\n")
    from test_faults_validate import has, validate

    lines = validate(capsys, str(recipe))
    assert has(lines, recipe, 7, "schedule"), lines
    assert has(lines, recipe, 8, "weight"), lines
    assert has(lines, recipe, 9, "replacing_epochs"), lines


def test_two_gloo_processes_replace_modules_then_prune(tmp_path, minilm_dir, glue_dir):
    """Under data parallel a successor whose group was not replaced still gets a (zero)
    gradient: without one, DDP stops at the next step. The same two processes then run a prune
    stage (head importance, then recovery) on the student: one ``--nproc 2`` launch for both
    (the prune check was test_faults_probe's own launch)."""
    import json
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    teacher = save_sst2_classifier(tmp_path / "teacher", minilm_dir)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"""name: ddp-theseus
task: sst2
data: {{train_limit: 96, dev_limit: 16}}
teacher: {teacher}
device: cpu
stages:
  - theseus: {{num_layers: 1, rate: 0.5, replacing_epochs: 2, finetune_epochs: 1,
               train: {{batch_size: 8, max_length: 16}}, freeze_shared: false}}
  - prune:
      heads: 0.5
      importance_rows: 16
      batch_size: 8
      max_length: 16
      recover: {{mode: finetune, train: {{epochs: 1, batch_size: 8, max_length: 16}}}}
""")
    env = {**os.environ, "COMPRESSOR_PROGRESS": "0", "PYTHONPATH": root}
    done = subprocess.run([sys.executable, "-m", "compressor", "run", str(recipe), "--out",
                           str(tmp_path / "two"), "--data-dir", glue_dir, "--nproc", "2"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    record = json.loads((tmp_path / "two" / "01-theseus" / "record.json").read_text())
    replacing = record["phases"][0]
    assert replacing["processes"] == 2 and replacing["steps"] == 24
    assert 0 < replacing["replacing"]["replaced_share"] < 1   # steps without the successor ran
    config = json.loads((tmp_path / "two" / "01-theseus" / "config.json").read_text())
    assert config["num_hidden_layers"] == 1
    record = json.loads((tmp_path / "two" / "02-prune" / "record.json").read_text())
    assert record["parameters"] < record["parameters_before"]


def test_the_api_writes_a_checkpoint_and_its_record(tmp_path, minilm_dir, glue_dir):
    import json

    from compressor.core.errors import CompressorError
    from compressor.core.models import load_for_task
    from compressor.theseus import theseus

    model = save_sst2_classifier(tmp_path / "teacher", minilm_dir)
    out = tmp_path / "small"
    record = theseus(model, str(out), {"num_layers": 1, "replacing_epochs": 1, "finetune_epochs": 0},
                     data_dir=glue_dir, train_limit=32, dev_limit=16, batch_size=16, max_length=16)
    assert [p["phase"] for p in record["phases"]] == ["replacing"]
    saved = json.load(open(out / "metrics.json"))
    assert saved["score"] == record["score"] and saved["layers_before"] == 2
    assert load_for_task(str(out))[0].config.num_hidden_layers == 1
    with pytest.raises(CompressorError, match="num_layers must be between 1 and the model's 2"):
        theseus(model, str(tmp_path / "x"), num_layers=3, data_dir=glue_dir, train_limit=8,
                dev_limit=8)


def test_theseus_command_writes_the_smaller_model(tmp_path, capsys, minilm_dir, glue_dir):
    from compressor.cli import main
    from compressor.core.models import load_for_task

    model = save_sst2_classifier(tmp_path / "teacher", minilm_dir)
    main(["theseus", model, "--out", str(tmp_path / "small"), "--set", "num_layers=1",
          "--set", "replacing_epochs=1", "--set", "finetune_epochs=0", "--set", "batch_size=16",
          "--set", "kd.weight=1", "--data-dir", glue_dir, "--train-limit", "32", "--dev-limit", "16"])
    assert "compressed model:" in capsys.readouterr().out
    assert load_for_task(str(tmp_path / "small"))[0].config.num_hidden_layers == 1
    code, _, err = run_cli(capsys, "theseus", model, "--out", str(tmp_path / "x"),
                           "--set", "schedule=sometimes", "--data-dir", glue_dir)
    assert code == 1 and len(err.strip().splitlines()) == 1 and "schedule" in err
