"""Distillation: each loss on hand-made tensors, layer mappings, students, projections,
small BiLSTM/CNN students, the stage and the command, and end-to-end runs that teach a student."""
import json
import math
from dataclasses import replace

import pytest
import torch
import transformers

from compressor.distill import DistillConfig, distill, layer_mapping
from compressor.engine import losses as L
from compressor.engine.students import (ConfigStudent, LayersStudent, build_student, student_config,
                                         teacher_layers_to_keep)
from compressor.core.errors import CompressorError
from compressor.core.models import count_parameters, load_for_task
from conftest import write_reviews


# -- losses on hand-made tensors ----------------------------------------------

def test_soft_cross_entropy_known_values():
    student = torch.tensor([[0.0, 0.0]])
    teacher = torch.tensor([[0.0, math.log(3.0)]])           # teacher probabilities 1/4, 3/4
    assert L.soft_cross_entropy(student, teacher).item() == pytest.approx(math.log(2))
    # T=2: the teacher softens to (1, sqrt 3)/(1 + sqrt 3); the T² factor scales the value
    assert L.soft_cross_entropy(student, teacher, 2.0).item() == pytest.approx(4 * math.log(2))
    # against itself it is the teacher's entropy, its minimum
    p = torch.tensor([0.25, 0.75])
    entropy = -(p * p.log()).sum().item()
    assert L.soft_cross_entropy(teacher, teacher).item() == pytest.approx(entropy)
    assert L.logits_mse(torch.tensor([[1.0, 3.0]]), torch.tensor([[0.0, 1.0]])).item() == 2.5
    assert L.task_loss(torch.tensor([[0.0, 0.0]]), torch.tensor([1])).item() == pytest.approx(math.log(2))
    assert L.task_loss(torch.tensor([[2.0]]), torch.tensor([0.5])).item() == pytest.approx(2.25)


def test_hidden_losses_count_real_tokens_only():
    mask = torch.tensor([[1, 1, 0]])
    student = torch.zeros(1, 3, 4)
    teacher = torch.ones(1, 3, 4)
    teacher[0, 2] = 100.0                                     # padding: must not count
    assert L.hidden_mse(student, teacher, mask).item() == pytest.approx(1.0)
    assert L.hidden_mse(student, teacher).item() > 100        # without the mask it would
    # BERT-PKD: unit vectors at right angles are sqrt(2) apart; the first token only
    s = torch.tensor([[[2.0, 0.0], [5.0, 5.0]]])
    t = torch.tensor([[[0.0, 3.0], [1.0, 1.0]]])
    assert L.hidden_mse(s, t, tokens="cls", normalize=True).item() == pytest.approx(2.0)
    assert L.hidden_mse(s, t, tokens="all", normalize=True).item() == pytest.approx(1.0)
    # DistilBERT's cosine loss: same direction 0, right angle 1, opposite 2
    a = torch.tensor([[[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]]])
    b = torch.tensor([[[3.0, 0.0], [0.0, 2.0], [-1.0, 0.0]]])
    assert L.cosine_loss(a, b).item() == pytest.approx(1.0)
    assert L.cosine_loss(a, b, torch.tensor([[1, 1, 0]])).item() == pytest.approx(0.5)


def test_attention_losses_known_values():
    teacher = torch.tensor([[[[1.0, 0.0], [0.5, 0.5]]]])        # [batch 1, head 1, 2 x 2]
    student = torch.tensor([[[[0.5, 0.5], [0.5, 0.5]]]])
    assert L.attention_kl(student, teacher).item() == pytest.approx(math.log(2) / 2)
    assert L.attention_kl(teacher, teacher).item() == pytest.approx(0.0, abs=1e-6)
    assert L.attention_mse(student, teacher).item() == pytest.approx(0.125)   # (.25 + .25) / 4
    with pytest.raises(CompressorError, match="head counts"):
        L.attention_mse(student, teacher.expand(1, 2, 2, 2))


def test_minilm_relation_across_widths_and_heads():
    torch.manual_seed(0)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    teacher = {k: torch.randn(2, 4, 12) for k in "qkv"}       # hidden 12
    student = {k: torch.randn(2, 4, 8) for k in "qkv"}        # hidden 8
    rel = L.relation(teacher["q"], teacher["k"], 4, mask)
    assert rel.shape == (2, 4, 4, 4)
    assert torch.allclose(rel.sum(-1), torch.ones(2, 4, 4))
    assert rel[0, :, :, 3].abs().max() < 1e-6                 # padded keys get no weight
    # one head by hand: softmax(q kᵀ / sqrt(d))
    q, k = teacher["q"][1], teacher["k"][1]
    assert torch.allclose(L.relation(teacher["q"], teacher["k"], 1)[1, 0],
                          torch.softmax(q @ k.T / math.sqrt(12), -1), atol=1e-6)
    loss = L.relation_kl(student, teacher, ("qk", "vv"), heads=4, mask=mask)
    assert loss.item() > 0
    assert L.relation_kl(teacher, teacher, ("qk", "vv", "qq", "kk"), 4, mask).item() == \
        pytest.approx(0.0, abs=1e-5)
    with pytest.raises(CompressorError, match="relation heads"):
        L.relation_kl(student, teacher, heads=5)


def test_layer_mappings():
    assert layer_mapping(3, 6, "uniform") == [(1, 2), (2, 4), (3, 6)]
    assert layer_mapping(4, 6, "uniform") == [(1, 2), (2, 3), (3, 5), (4, 6)]
    assert layer_mapping(3, 6, "skip") == [(1, 2), (2, 4)]          # BERT-PKD skip
    assert layer_mapping(6, 12, "skip") == [(i, 2 * i) for i in range(1, 6)]
    assert layer_mapping(6, 12, "last") == [(i, 6 + i) for i in range(1, 6)]   # 7..11
    assert layer_mapping(3, 6, [1, 3, 6]) == [(1, 1), (2, 3), (3, 6)]
    for bad in ([1, 2, 3, 4], [0], [7]):
        with pytest.raises(CompressorError):
            layer_mapping(3, 6, bad)
    with pytest.raises(CompressorError, match="unknown layer mapping"):
        layer_mapping(3, 6, "every")


def test_loss_config_checks_and_stages():
    from compressor.core.settings import from_values

    config = from_values(L.Losses, {"kd": {"weight": 1, "temperature": "2"}, "hidden": 2, "attention": 1},
                         "losses")
    assert config["kd"].temperature == 2.0
    first, second = config.intermediate_only(), config.prediction_only()
    assert list(first) == ["hidden", "attention"] and first["hidden"].weight == 2
    assert list(second) == ["kd"]
    for bad, message in (({"kd": -1}, "losses.kd"), ({"kd": 0}, "every weight is 0"),
                         ({"hiden": 1}, "unknown loss 'hiden'"),
                         ({"hidden": {"mapping": "middle"}}, "hidden.mapping"),
                         ({"attention": {"measure": "l1"}}, "measure"),
                         ({"minilm": {"relations": ["qv"]}}, "relation 'qv'")):
        with pytest.raises(CompressorError, match=message):
            from_values(L.Losses, bad, "losses")


# -- students -------------------------------------------------------------------

def test_layer_picks():
    spec = LayersStudent(num_layers=3)
    assert teacher_layers_to_keep(spec, 6) == [1, 3, 5]         # DistilBERT: every other layer
    assert teacher_layers_to_keep(LayersStudent(num_layers=4), 12) == [1, 4, 7, 10]
    assert teacher_layers_to_keep(LayersStudent(num_layers=3, pick="first"), 6) == [1, 2, 3]
    assert teacher_layers_to_keep(LayersStudent(num_layers=2, pick="last"), 6) == [5, 6]
    assert teacher_layers_to_keep(LayersStudent(layers=[2, 6]), 6) == [2, 6]
    with pytest.raises(CompressorError, match="teacher layer 7"):
        teacher_layers_to_keep(LayersStudent(layers=[7]), 6)
    with pytest.raises(CompressorError, match="exceeds"):
        teacher_layers_to_keep(LayersStudent(num_layers=8), 6)


@pytest.fixture(scope="module")
def teachers(tiny_models, tmp_path_factory):
    """Tiny task classifiers (2 layers, hidden 32) of two architectures, untrained but saved."""
    from compressor.core.data import get_task

    root = tmp_path_factory.mktemp("teachers")
    out = {}
    for arch in ("bert", "mpnet"):
        torch.manual_seed(0)
        model, tok = load_for_task(tiny_models[arch], get_task("sst2"))
        model.save_pretrained(root / arch)
        tok.save_pretrained(root / arch)
        out[arch] = str(root / arch)
    return out


@pytest.mark.parametrize("arch", ["bert", "mpnet"])
def test_layer_student_copies_the_chosen_teacher_layers(teachers, arch):
    from compressor.core.arch import arch_of
    from compressor.core.data import get_task

    teacher, tok = load_for_task(teachers[arch], get_task("sst2"))
    student, _, made = build_student(LayersStudent(layers=[2]), teacher, tok, get_task("sst2"))
    spec = arch_of(student)
    assert made["teacher_layers"] == [2] and spec.num_layers(student.config) == 1
    s_layer, t_layer = spec.get_layers(student)[0], spec.get_layers(teacher)[1]
    for (name, a), (_, b) in zip(s_layer.named_parameters(), t_layer.named_parameters()):
        assert torch.equal(a, b), name
    assert torch.equal(spec.get_classifier(student).out_proj.weight if arch == "mpnet" else
                       spec.get_classifier(student).weight,
                       spec.get_classifier(teacher).out_proj.weight if arch == "mpnet" else
                       spec.get_classifier(teacher).weight)
    assert count_parameters(student) < count_parameters(teacher)
    assert len(spec.get_layers(teacher)) == 2                    # the teacher is left whole
    ids = tok(["a fine film"], return_tensors="pt")
    ids.pop("token_type_ids", None)
    assert student(**ids).logits.shape == (1, 2)


def test_narrow_student_and_other_architecture(teachers):
    from compressor.core.arch import arch_of
    from compressor.core.data import get_task

    teacher, tok = load_for_task(teachers["bert"], get_task("sst2"))
    spec = ConfigStudent(num_layers=1, hidden_size=24, heads=3, ffn_size=40)
    student, _, _ = build_student(spec, teacher, tok, get_task("sst2"))
    assert (student.config.hidden_size, student.config.num_hidden_layers,
            student.config.num_attention_heads, student.config.intermediate_size) == (24, 1, 3, 40)
    other, _, made = build_student(ConfigStudent(model_type="distilbert", num_layers=1,
                                               hidden_size=16, heads=2), teacher, tok, get_task("sst2"))
    assert made["model_type"] == "distilbert" and arch_of(other).hidden_size(other.config) == 16
    with pytest.raises(CompressorError, match="does not split"):
        build_student(ConfigStudent(hidden_size=30, heads=4), teacher, tok,
                      get_task("sst2"))


def test_bad_student_specs():
    for values, message in (({"kind": "gru"}, "kind 'gru'"), ({"kind": "pretrained"}, "needs model"),
                            ({"pick": "middle"}, "pick"), ({"layres": [1]}, "no setting 'layres'"),
                            ({"kind": "config", "model_type": "gpt2"}, "not registered")):
        with pytest.raises(CompressorError, match=message):
            student_config(values)


# -- end to end -------------------------------------------------------------------

QUICK = dict(batch_size=16, max_length=16, device="cpu", warmup=0.0, eval_every=0)


@pytest.fixture(scope="module")
def trained_teacher(tiny_models, tmp_path_factory):
    """A tiny BERT fine-tuned on reviews whose label is visible in the text (near 100%)."""
    from compressor.core.data import UserData
    from compressor.engine.train import TrainConfig, finetune

    root = tmp_path_factory.mktemp("reviews")
    data = UserData(write_reviews(root / "train.csv", 400), write_reviews(root / "dev.csv", 96, 400),
                    ("review",), "sentiment")
    finetune(tiny_models["bert"], "reviews", str(root / "teacher"), user_data=data,
             config=TrainConfig(epochs=3, lr=2e-3, **QUICK))
    return str(root / "teacher"), data


def _agreement(a, b, tok, examples):
    from compressor.engine.scoring import predict_logits
    return float((predict_logits(a, tok, examples, 16).argmax(-1) ==
                  predict_logits(b, tok, examples, 16).argmax(-1)).mean())


def test_distillation_improves_the_student(trained_teacher, tmp_path):
    """One teacher layer on a 1-layer student, soft targets plus hidden MSE: far above chance."""
    from compressor.core.data import load_data

    teacher_dir, data = trained_teacher
    config = DistillConfig(train=dict(epochs=3, lr=3e-3, **QUICK), student={"kind": "config", "num_layers": 1},
                           losses={"kd": {"weight": 1, "temperature": 2}, "hidden": 1, "attention": 1})
    teacher, tok = load_for_task(teacher_dir, attn_implementation="eager")
    task = load_data(data.task(), "dev", user_data=data).task
    dev = load_data(task, "dev", user_data=data)
    torch.manual_seed(42)
    untrained, _, _ = build_student(config.student, teacher, tok, task)
    record = distill(teacher_dir, str(tmp_path / "student"), config=config, user_data=data)
    assert record["teacher_score"] > 95
    student, _ = load_for_task(str(tmp_path / "student"))
    assert _agreement(untrained, teacher, tok, dev.examples) < 0.8
    assert record["score"] > 90 and _agreement(student, teacher, tok, dev.examples) > 0.9
    assert record["retention"] == pytest.approx(record["score"] / record["teacher_score"], abs=1e-4)
    assert record["parameters"] < record["teacher_parameters"]
    assert record["cached_teacher_logits"] is False              # layer losses need the teacher live
    saved = json.loads((tmp_path / "student" / "metrics.json").read_text())
    assert saved["score"] == record["score"] and saved["size_bytes"] > 0


def test_two_stage_narrow_student_with_projections(trained_teacher, tmp_path):
    """TinyBERT's schedule: hidden 16 vs the teacher's 32 needs projections, which are not saved."""
    teacher_dir, data = trained_teacher
    config = DistillConfig(train=dict(epochs=2, lr=3e-3, **QUICK), intermediate_epochs=1,
                           student={"kind": "config", "num_layers": 1, "hidden_size": 16, "heads": 4},
                           losses={"kd": 1, "hidden": 1, "embedding": 1, "attention": 1})
    record = distill(teacher_dir, str(tmp_path / "s"), config=config, user_data=data)
    assert [p["phase"] for p in record["phases"]] == ["intermediate", "predict"]
    assert record["cached_teacher_logits"] is True               # the second stage needs logits only
    assert record["score"] > 80
    student = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / "s")
    assert student.config.hidden_size == 16
    assert count_parameters(student) == record["parameters"]      # no projection came along
    assert not any("projections" in k for k in student.state_dict())


def test_a_student_cut_from_its_teacher_starts_ahead_and_distils(trained_teacher, tmp_path):
    """init: teacher ranks the teacher's channels on training rows and records how."""
    teacher_dir, data = trained_teacher
    student = {"kind": "config", "num_layers": 1, "hidden_size": 16, "heads": 4, "ffn_size": 32}
    config = DistillConfig(train=dict(epochs=1, lr=3e-3, **QUICK), intermediate_epochs=1,
                           student={**student, "init": "teacher", "init_rows": 64},
                           losses={"kd": 1, "hidden": 1, "attention": 1})
    record = distill(teacher_dir, str(tmp_path / "cut"), config=config, user_data=data)
    assert record["student"]["init"] == "teacher" and record["student"]["importance"] == "activations"
    assert record["student"]["teacher_layers"] == [1]
    assert record["score"] > 80


def test_a_student_too_large_to_cut_is_refused_before_any_work(trained_teacher, tmp_path, monkeypatch):
    from compressor.engine import distiller

    teacher_dir, data = trained_teacher
    scored = []
    monkeypatch.setattr(distiller, "score", lambda *a, **k: scored.append(1))
    config = DistillConfig(train=dict(epochs=1, **QUICK),
                           student={"kind": "config", "num_layers": 1, "hidden_size": 64, "heads": 4,
                                    "init": "teacher"})
    with pytest.raises(CompressorError, match="hidden_size is 32"):
        distill(teacher_dir, str(tmp_path / "big"), config=config, user_data=data)
    assert not scored and not (tmp_path / "big").exists()


def test_minilm_and_cosine_losses_train(trained_teacher, tmp_path):
    teacher_dir, data = trained_teacher
    config = DistillConfig(train=dict(epochs=2, lr=3e-3, **QUICK),
                           student={"kind": "config", "num_layers": 1, "hidden_size": 16, "heads": 2},
                           losses={"task": 1, "minilm": 1, "cosine": 1})
    record = distill(teacher_dir, str(tmp_path / "s"), config=config, user_data=data)
    assert record["score"] > 80


@pytest.mark.parametrize("kind", ["bilstm", "cnn"])
def test_small_student_learns_and_loads_like_any_checkpoint(trained_teacher, tmp_path, kind):
    from compressor.engine.scoring import evaluate, predict

    teacher_dir, data = trained_teacher
    config = DistillConfig(train=dict(epochs=3, lr=1e-2, **QUICK),
                           student={"kind": kind, "embedding_dim": 16, "hidden_size": 16},
                           losses={"logits_mse": 1})
    out = tmp_path / kind
    record = distill(teacher_dir, str(out), config=config, user_data=data)
    assert record["score"] > 90
    assert record["parameters"] < record["teacher_parameters"]
    assert json.loads((out / "compressor.json").read_text())["architecture"] == kind
    model, tok = load_for_task(str(out))
    assert count_parameters(model) == record["parameters"]
    ids = tok(["the film was good"], return_tensors="pt")
    logits = model(ids["input_ids"], ids["attention_mask"], ids.get("token_type_ids")).logits
    assert logits.shape == (1, 2)
    again = evaluate(str(out), input=data.dev, text_columns=["review"], label_column="sentiment",
                     device="cpu")
    assert again["score"] == pytest.approx(record["score"])
    result = predict(str(out), data.dev, str(tmp_path / "p.tsv"), text_columns=["review"])
    assert result["rows"] == 96
    with pytest.raises(CompressorError, match="no layers to match"):
        distill(teacher_dir, str(tmp_path / "x"), user_data=data, config=DistillConfig(
            train=QUICK, student={"kind": kind}, losses={"kd": 1, "hidden": 1}))


def test_distill_stage_in_a_recipe(trained_teacher, tmp_path):
    from compressor.recipe import run_recipe
    from compressor.recipe.schema import RecipeError, recipe_from_text

    teacher_dir, data = trained_teacher
    text = f"""
name: distill-test
task: reviews
data: {{train_file: {data.train}, dev_file: {data.dev}, text_columns: [review], label_column: sentiment}}
device: cpu
teacher: {teacher_dir}
stages:
  - distill:
      student: {{kind: layers, num_layers: 1}}
      losses: {{kd: {{weight: 1, temperature: 2}}}}
      train: {{epochs: 2, lr: 2e-3, max_length: 16}}
  - evaluate: {{split: dev}}
"""
    manifest = run_recipe(recipe_from_text(text), str(tmp_path / "run"))
    stage = manifest["stages"][1]
    assert stage["stage"] == "distill" and stage["score"] > 90
    assert stage["parameters"] < manifest["stages"][0]["parameters"]
    assert manifest["stages"][2]["score"] == pytest.approx(stage["score"])
    bad = text.replace("num_layers: 1", "num_layers: 1, colour: red")
    with pytest.raises(RecipeError, match=r"<recipe>:\d+: .*student has no setting 'colour'"):
        recipe_from_text(bad)
    with pytest.raises(RecipeError, match="losses.kd.temperature"):
        recipe_from_text(text.replace("temperature: 2", "temperature: 0"))


def test_distill_command(trained_teacher, tmp_path, capsys):
    from compressor.cli import main

    def run(*args):
        with pytest.raises(SystemExit) as exit_info:
            main(list(args))
        out, err = capsys.readouterr()
        return exit_info.value.code, out, err

    teacher_dir, data = trained_teacher
    out = tmp_path / "cli"
    base = ["distill", teacher_dir, "--out", str(out), "--device", "cpu",
            "--train-file", data.train, "--dev-file", data.dev, "--text-column", "review",
            "--label-column", "sentiment"]
    code, _, err = run(*base, "--student", "kind=lstm")
    assert code == 1 and err.strip() == ("error: student kind 'lstm' is unknown; use layers, config, "
                                         "pretrained, input, bilstm, cnn")
    code, _, err = run(*base, "--loss", "kd")
    assert code == 1 and "KEY=VALUE" in err and len(err.strip().splitlines()) == 1
    code, _, err = run("distill", str(tmp_path / "none"), "--out", str(out))
    assert code == 1 and "checkpoint not found" in err
    assert not out.exists()
    main(base + ["--student", "kind=layers", "--student", "layers=[2]", "--loss", "kd=1",
                 "--loss", "kd.temperature=2", "--epochs", "3", "--lr", "3e-3", "--max-length", "16",
                 "--batch-size", "16"])
    printed = capsys.readouterr().out
    assert "retention" in printed and str(out) in printed
    record = json.loads((out / "metrics.json").read_text())
    assert record["student"] == {"kind": "layers", "teacher_layers": [2]} and record["score"] > 90


def test_progressive_transfer_trains_one_layer_at_a_time_bottom_up(trained_teacher, tmp_path):
    """MobileBERT's schedule: phase l counts student layer l's pairs alone, the embeddings and the
    layers below stay fixed from layer 2 on, and the layers above get no update either."""
    from compressor.core.data import load_data
    from compressor.engine.distiller import distill_model
    from compressor.engine.train import Callback

    teacher_dir, data = trained_teacher
    config = DistillConfig(train=dict(epochs=2, lr=3e-3, **QUICK), intermediate_epochs=2, progressive=True,
                           student={"kind": "config", "num_layers": 2, "hidden_size": 16, "heads": 4},
                           losses={"kd": 1, "hidden": 1, "embedding": 1,
                                   "attention": {"weight": 1, "measure": "kl"}})
    teacher, tok = load_for_task(teacher_dir, attn_implementation="eager")
    train = load_data(data.task(), "train", user_data=data)
    dev = load_data(train.task, "dev", user_data=data)
    torch.manual_seed(0)
    student, _, _ = build_student(config.student, teacher, tok, train.task)
    parts = {"embeddings": student.bert.embeddings, "layer 1": student.bert.encoder.layer[0],
             "layer 2": student.bert.encoder.layer[1], "classifier": student.classifier}
    snapshots = []

    class Watch(Callback):
        def _take(self):
            return {k: torch.cat([p.detach().flatten().clone() for p in m.parameters()])
                    for k, m in parts.items()}

        def on_train_begin(self, state):
            self.before = self._take()

        def on_train_end(self, state):
            after = self._take()
            snapshots.append({k: not torch.equal(self.before[k], after[k]) for k in parts})

    _, _, record = distill_model(teacher, tok, train, dev, config, student=student,
                                 student_tokenizer=tok, callbacks=[Watch()])
    assert [p["phase"] for p in record["phases"]] == ["progressive layer 1", "progressive layer 2", "predict"]
    changed = dict(zip(["layer 1 phase", "layer 2 phase", "predict"], snapshots))
    assert changed["layer 1 phase"] == {"embeddings": True, "layer 1": True, "layer 2": False,
                                        "classifier": False}
    assert changed["layer 2 phase"] == {"embeddings": False, "layer 1": False, "layer 2": True,
                                        "classifier": False}
    assert all(changed["predict"].values())                       # the last stage trains everything
    assert record["score"] > 80
    assert all(p.requires_grad for p in student.parameters())     # nothing is left frozen


def test_progressive_transfer_needs_a_first_stage_and_a_layer_loss():
    with pytest.raises(CompressorError, match="set intermediate_epochs"):
        DistillConfig(progressive=True, losses={"kd": 1, "hidden": 1}).check()
    with pytest.raises(CompressorError, match="needs a hidden or attention loss"):
        DistillConfig(progressive=True, intermediate_epochs=1, losses={"kd": 1, "cosine": 1}).check()


def test_general_distillation_runs_first_on_unlabelled_text(trained_teacher, tmp_path, glue_dir):
    """TinyBERT's three stages: layer losses over the pooled GLUE text, then on the task's rows,
    then the prediction layer."""
    teacher_dir, data = trained_teacher
    config = DistillConfig(train=dict(epochs=2, lr=3e-3, **QUICK), intermediate_epochs=1, general_epochs=1,
                           general_rows=40, student={"kind": "config", "num_layers": 1, "hidden_size": 16, "heads": 4},
                           losses={"kd": 1, "hidden": 1, "attention": 1})
    record = distill(teacher_dir, str(tmp_path / "s"), config=config, data_dir=glue_dir, user_data=data)
    phases = {p["phase"]: p for p in record["phases"]}
    assert list(phases) == ["general", "intermediate", "predict"]
    assert phases["general"]["train_examples"] == 40 and phases["general"]["steps"] == 3   # 40 rows, batch 16
    assert phases["intermediate"]["train_examples"] == 400
    assert record["score"] > 80


def test_general_distillation_needs_a_layer_loss_and_its_text():
    from compressor.engine.distiller import distill_model

    with pytest.raises(CompressorError, match="general_epochs needs a layer loss"):
        DistillConfig(general_epochs=1, losses={"kd": 1}).check()
    with pytest.raises(CompressorError, match="needs unlabelled text"):   # a recovery, say: no text given
        distill_model(None, None, None, None, DistillConfig(general_epochs=1, losses={"kd": 1, "hidden": 1}))


def test_general_distillation_from_the_base_encoder_is_done_once_and_reused_by_other_tasks(tiny_models, tmp_path, glue_dir):
    """TinyBERT's task-agnostic stage as the paper runs it: the general phase learns from the
    encoder the task teachers come from, over text that is the same for every task (every
    task's dev sentences left out), kept in general_cache and loaded, not trained, by the next
    task's run, whatever its classifier."""
    import os

    base = tiny_models["bert"]
    cache = tmp_path / "general"
    config = DistillConfig(train=dict(epochs=1, lr=3e-3, **QUICK), general_epochs=1, general_rows=24,
                           general_teacher=base, general_cache=str(cache),
                           student={"kind": "config", "num_layers": 1, "hidden_size": 16, "heads": 4},
                           losses={"kd": 1, "hidden": 1, "attention": 1})
    first = distill(base, str(tmp_path / "sst2"), task="sst2", config=config, data_dir=glue_dir,
                    train_limit=32, dev_limit=16)
    kept = first["phases"][0]
    assert kept["phase"] == "general" and kept["steps"] == 2 and os.path.isdir(kept["kept"])
    assert len([d for d in os.listdir(cache) if not d.startswith(".")]) == 1
    for task in ("stsb", "rte"):                 # a regression head, and another classifier
        again = distill(base, str(tmp_path / task), task=task, config=config, data_dir=glue_dir,
                        train_limit=32, dev_limit=16)
        general = again["phases"][0]
        assert general["cached"] == kept["kept"] and general["steps"] == 0
        assert general["trained_by"]["digest"] == os.path.basename(kept["kept"])
        assert general["trained_by"]["loss_curve"] == kept["loss_curve"] and len(kept["loss_curve"]) == 2
        assert again["phases"][1]["phase"] == "predict" and again["phases"][1]["steps"] > 0
    # another general setting is another entry, trained
    other = distill(base, str(tmp_path / "other"), task="rte", config=replace(config, general_lr=1e-3),
                    data_dir=glue_dir, train_limit=32, dev_limit=16)
    assert "kept" in other["phases"][0] and other["phases"][0]["kept"] != kept["kept"]
    with pytest.raises(CompressorError, match="general_teacher and general_cache belong to general"):
        DistillConfig(general_cache=str(cache), losses={"kd": 1, "hidden": 1}).check()


def test_shared_general_text_leaves_out_every_tasks_dev_sentences(glue_dir):
    """The text of a shared general phase is one text: the same for SST-2 and STS-B, and without
    STS-B's dev sentences even when SST-2 asks (STS-B's training file holds some of them)."""
    from compressor.core.data import get_task, load_split, unlabelled_text

    stsb, sst2 = get_task("stsb"), get_task("sst2")
    stsb_dev = {t.strip() for e in load_split(stsb, "dev", glue_dir).examples for t in e.texts}
    own = {t.strip() for e in load_split(stsb, "train", glue_dir).examples for t in e.texts}
    both = stsb_dev & own
    assert both                                             # what makes the difference visible
    plain = unlabelled_text(sst2, glue_dir, own=load_split(sst2, "train", glue_dir, limit=50),
                            dev=load_split(sst2, "dev", glue_dir))
    shared = unlabelled_text(sst2, glue_dir, own=load_split(sst2, "train", glue_dir, limit=50),
                             dev=load_split(sst2, "dev", glue_dir), shared=True)
    assert both & {e.texts[0] for e in plain.examples}
    assert not both & {e.texts[0] for e in shared.examples}
    from_stsb = unlabelled_text(stsb, glue_dir, own=load_split(stsb, "train", glue_dir),
                                dev=load_split(stsb, "dev", glue_dir), shared=True)
    assert [e.texts[0] for e in from_stsb.examples] == [e.texts[0] for e in shared.examples]


def test_a_run_waits_for_the_general_phase_another_run_is_training(tmp_path, capsys):
    """The cache entry is taken under a lock: a second run blocks (and says so) until the first
    lets go, then finds what it kept."""
    import threading
    import time

    from compressor.engine import general

    events = []
    with general.locked(str(tmp_path), "k") as path:
        def second():
            with general.locked(str(tmp_path), "k"):
                events.append(("second", time.monotonic()))
        thread = threading.Thread(target=second)
        thread.start()
        time.sleep(0.3)
        assert not events                      # still waiting
        events.append(("first done", time.monotonic()))
    thread.join(5)
    assert [e for e, _ in events] == ["first done", "second"]
    assert path == str(tmp_path / "k") and "waiting for it" in capsys.readouterr().err
