"""Whole-layer pruning (method layers) and LayerDrop: the right layers go, the result is an
ordinary smaller model, and LayerDrop skips layers only while training."""
import copy

import pytest
import torch
import transformers

from conftest import ARCHS, tiny_config, write_reviews
from compressor.core.arch import arch_of
from compressor.core.errors import CompressorError
from compressor.core.models import count_parameters
from compressor.prune.configs import LayersPruneConfig
from compressor.engine.job import RecoveryJob
from compressor.prune.layers import LayerDrop, keep_layers, prune_layers

pytestmark = pytest.mark.unit

SENTENCES = ["the film was good, and long 3", "an awful, sad and poor film", "fine"]


@pytest.fixture(scope="module")
def tokenizer(minilm_dir):
    return transformers.AutoTokenizer.from_pretrained(minilm_dir)


@pytest.fixture(scope="module")
def reviews(tmp_path_factory):
    from compressor.core.data import read_user_file

    root = tmp_path_factory.mktemp("reviews")
    train = read_user_file(write_reviews(root / "train.csv", 48), ["review"], "sentiment")
    dev = read_user_file(write_reviews(root / "dev.csv", 16, start=48), ["review"], "sentiment",
                         task=train.task)
    return train, dev


def build(arch, tokenizer, layers=4, seed=0, dropout=True, **extra):
    """A tiny random 2-label classifier of ``arch`` with ``layers`` layers."""
    config = tiny_config(arch)
    values = {k: v for k, v in config.to_dict().items() if k != "layer_types"}   # per layer (5.x)
    config = type(config).from_dict({**values, arch_of(config).num_layers_key: layers})
    config.vocab_size, config.num_labels = tokenizer.vocab_size, 2
    if not dropout:
        for key in ("hidden_dropout_prob", "attention_probs_dropout_prob", "dropout", "attention_dropout"):
            if hasattr(config, key):
                setattr(config, key, 0.0)
    torch.manual_seed(seed)
    return transformers.AutoModelForSequenceClassification.from_config(config, **extra).eval()


def inputs(tokenizer, model):
    enc = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    if not arch_of(model).uses_token_type_ids:
        enc.pop("token_type_ids", None)
    return dict(enc)


def logits(model, batch):
    with torch.no_grad():
        return model.eval()(**batch).logits


def top_hidden(model, batch):
    """The last layer's output (a random head's logits barely tell layers apart)."""
    with torch.no_grad():
        return model.eval()(**batch, output_hidden_states=True).hidden_states[-1]


def make_job(model, tokenizer, reviews, recover=None, **settings):
    train, dev = reviews
    settings = {"importance_rows": 32, **settings}
    config = LayersPruneConfig(recover=recover or {"mode": "none"}, batch_size=16, max_length=16,
                               device="cpu", **settings)
    config.check()
    return RecoveryJob(model, tokenizer, train, dev, config, torch.device("cpu"))


def layer_weights(model):
    return [{k: v.clone() for k, v in layer.state_dict().items()}
            for layer in arch_of(model).get_layers(model)]


def same_weights(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def one_line_error(excinfo, *words):
    text = str(excinfo.value)
    assert "\n" not in text and all(w in text for w in words), text


# -- rules -----------------------------------------------------------------------

@pytest.mark.parametrize("n, settings, kept", [
    (4, dict(rule="top", drop=1), [0, 1, 2]),
    (4, dict(rule="top"), [0, 1]),                       # drop 0: half
    (5, dict(rule="top"), [0, 1]),                       # half kept: max(1, 5 // 2)
    (4, dict(rule="every_other"), [0, 2]),
    (6, dict(rule="every_other"), [0, 2, 4]),
    (5, dict(rule="every_other"), [0, 2]),               # as a pick=every student of 5 layers
    (4, dict(rule="list", layers=[3, 1]), [0, 2]),
    (4, dict(rule="list", layers=[0]), [1, 2, 3]),
])
def test_each_rule_drops_the_right_layers(tokenizer, reviews, n, settings, kept):
    model = build("bert", tokenizer, layers=n)
    before = layer_weights(model)
    params = count_parameters(model)
    job = make_job(model, tokenizer, reviews, **settings)
    record = prune_layers(job, job.config)
    assert record["kept"] == kept
    assert record["dropped"] == [i for i in range(n) if i not in kept]
    assert model.config.num_hidden_layers == len(kept)
    after = layer_weights(model)
    assert len(after) == len(kept)
    assert all(same_weights(after[j], before[i]) for j, i in enumerate(kept))
    assert record["parameters_before"] == params
    assert record["parameters_after"] == count_parameters(model) < params
    assert record["recovery"] is None and "importance" not in record


def test_every_other_matches_the_distillation_students_pick(tokenizer):
    from compressor.engine.students import LayersStudent, build_student
    from compressor.core.data import get_task

    teacher = build("bert", tokenizer, layers=6)
    student, _, note = build_student(LayersStudent(pick="every"), teacher, tokenizer, get_task("sst2"))
    model = copy.deepcopy(teacher)
    keep_layers(model, [0, 2, 4])
    assert note["teacher_layers"] == [1, 3, 5]
    batch = inputs(tokenizer, model)
    assert torch.equal(logits(student, batch), logits(model, batch))


@pytest.mark.parametrize("arch", ARCHS)
def test_pruned_model_equals_one_built_from_the_kept_layers(arch, tokenizer, reviews):
    model = build(arch, tokenizer)
    batch = inputs(tokenizer, model)
    unpruned = top_hidden(model, batch)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    job = make_job(model, tokenizer, reviews, rule="list", layers=[0, 2])
    prune_layers(job, job.config)
    spec = arch_of(model)
    # by hand: a fresh 2-layer model given the old layers 1 and 3 as its layers 0 and 1
    config = copy.deepcopy(model.config)
    direct = transformers.AutoModelForSequenceClassification.from_config(config).eval()
    assert len(spec.get_layers(direct)) == 2
    renamed = {}
    for key, value in state.items():
        for old, new in ((0, None), (1, 0), (2, None), (3, 1)):
            prefix = f"{spec.layers}.{old}."
            if key.startswith(prefix):
                key = None if new is None else f"{spec.layers}.{new}." + key[len(prefix):]
                break
        if key is not None:
            renamed[key] = value
    direct.load_state_dict(renamed)
    assert torch.allclose(top_hidden(model, batch), top_hidden(direct, batch), atol=1e-5)
    assert torch.allclose(logits(model, batch), logits(direct, batch), atol=1e-6)
    # and it differs from the unpruned model (the test can tell)
    assert not torch.allclose(unpruned, top_hidden(model, batch), atol=1e-2)


@pytest.mark.parametrize("arch", ["bert", "mpnet"])
def test_pruned_model_saves_and_loads_to_identical_logits(arch, tokenizer, reviews, tmp_path):
    from compressor.core.models import checkpoint_meta, load_for_task, read_meta, save_checkpoint

    model = build(arch, tokenizer)
    job = make_job(model, tokenizer, reviews, rule="every_other")
    prune_layers(job, job.config)
    task = reviews[0].task
    save_checkpoint(job.model, tokenizer, str(tmp_path / "ckpt"), checkpoint_meta(task, 16, "test"))
    loaded, _ = load_for_task(str(tmp_path / "ckpt"), task)
    assert len(arch_of(loaded).get_layers(loaded)) == 2
    assert read_meta(str(tmp_path / "ckpt"))["shape"]["layers"] == 2
    batch = inputs(tokenizer, model)
    assert torch.equal(logits(job.model, batch), logits(loaded, batch))
    assert torch.equal(top_hidden(job.model, batch), top_hidden(loaded, batch))


# -- importance --------------------------------------------------------------------

def test_importance_is_the_loss_rise_when_a_layer_is_skipped(tokenizer, reviews):
    model = build("bert", tokenizer)
    job = make_job(model, tokenizer, reviews, rule="importance", drop=1, importance_rows=16)
    reference = copy.deepcopy(model)

    def mean_loss(m):
        total, rows = 0.0, 0
        with torch.no_grad():
            for batch in job.batches():
                total += float(job.loss(m, batch)) * len(batch["input_ids"])
                rows += len(batch["input_ids"])
        return total / rows

    base = mean_loss(reference)
    # skipping a BERT layer is the same as taking it out
    rises = [mean_loss(keep_layers(copy.deepcopy(reference), [j for j in range(4) if j != i])) - base
             for i in range(4)]
    record = prune_layers(job, job.config)
    assert record["baseline_loss"] == pytest.approx(base, abs=1e-5)
    assert record["importance"] == pytest.approx(rises, abs=1e-5)
    least = min(range(4), key=lambda i: rises[i])
    assert record["dropped"] == [least]


class MatchTheOriginal(RecoveryJob):
    """A job whose loss is the squared distance from the unpruned model's top hidden states:
    nothing skipped costs 0, skipping a layer that changes them costs more."""

    def loss(self, model, batch):
        batch = {k: v for k, v in batch.items() if k != "labels"}
        with torch.no_grad():
            target = self.teacher(**batch, output_hidden_states=True).hidden_states[-1]
        return ((model(**batch, output_hidden_states=True).hidden_states[-1] - target) ** 2).mean()


def test_importance_drops_the_layer_whose_removal_hurts_least(tokenizer, reviews):
    model = build("bert", tokenizer)
    # layer 2 adds nothing to its input (attention and FFN outputs zero): LayerNorm(x) = x
    layer = arch_of(model).get_layers(model)[2]
    with torch.no_grad():
        for linear in (layer.attention.output.dense, layer.output.dense):
            linear.weight.zero_()
            linear.bias.zero_()
    job = make_job(model, tokenizer, reviews, rule="importance", drop=1)
    job = MatchTheOriginal(**{**job.__dict__, "teacher": copy.deepcopy(model).eval()})
    record = prune_layers(job, job.config)
    assert record["dropped"] == [2] and record["kept"] == [0, 1, 3]
    scores = record["importance"]
    assert abs(scores[2]) < 1e-6 and min(scores[i] for i in (0, 1, 3)) > 1e-4
    assert len(arch_of(job.model).get_layers(job.model)) == 3


# -- bad settings --------------------------------------------------------------------

@pytest.mark.parametrize("settings, words", [
    (dict(rule="list", layers=[4]), ["layer 4", "0..3"]),
    (dict(rule="list", layers=[1, -1]), ["layer -1", "0..3"]),
    (dict(rule="list", layers=[0, 1, 2, 3]), ["all 4 layers"]),
    (dict(rule="list"), ["rule list needs layers"]),
    (dict(rule="top", layers=[1]), ["'layers' is for rule list"]),
    (dict(rule="every_other", drop=1), ["'drop' is for rules"]),
    (dict(rule="top", drop=4), ["drop 4 leaves none"]),
])
def test_bad_settings_give_one_line_errors(tokenizer, reviews, settings, words):
    model = build("bert", tokenizer)
    job = make_job(model, tokenizer, reviews, **settings)
    with pytest.raises(CompressorError) as excinfo:
        prune_layers(job, job.config)
    one_line_error(excinfo, *words)
    assert len(arch_of(model).get_layers(model)) == 4   # nothing changed


def test_a_first_layer_built_unlike_the_others_stays(tokenizer, reviews):
    """ModernBERT's first layer has no attention norm: the list rule refuses to drop it and
    the importance rule never does."""
    model = build("modernbert", tokenizer)
    job = make_job(model, tokenizer, reviews, rule="list", layers=[0, 1])
    with pytest.raises(CompressorError) as excinfo:
        prune_layers(job, job.config)
    one_line_error(excinfo, "layer 0", "must stay")
    job = make_job(model, tokenizer, reviews, rule="importance", drop=3)
    record = prune_layers(job, job.config)
    assert record["kept"] == [0]
    assert torch.isfinite(logits(job.model, inputs(tokenizer, job.model))).all()


# -- LayerDrop -------------------------------------------------------------------------

@pytest.mark.parametrize("arch", ARCHS)
def test_layerdrop_rate_1_makes_every_layer_the_identity_while_training(arch, tokenizer):
    model = build(arch, tokenizer, attn_implementation="eager")
    batch = inputs(tokenizer, model)
    clean = logits(model, batch)
    drop = LayerDrop(1.0).attach(model)
    assert drop.draw() == [True] * 4
    model.train()
    # attention weights too: DistilBERT's layer tuple is (weights, hidden states)
    out = model(**batch, labels=torch.tensor([0, 1, 0]), output_hidden_states=True,
                output_attentions=True)
    assert len(out.hidden_states) == 5
    assert all(torch.equal(h, out.hidden_states[0]) for h in out.hidden_states[1:])
    out.loss.backward()
    # every weight of every layer got a gradient (zero), as data parallel needs
    for layer in arch_of(model).get_layers(model):
        grads = [p.grad for p in layer.parameters()]
        assert all(g is not None and not g.any() for g in grads)
    assert arch_of(model).get_embeddings(model).word_embeddings.weight.grad.any()
    # in eval mode nothing is skipped
    assert torch.equal(logits(model, batch), clean)
    drop.detach()
    model.train()
    out = model(**batch, output_hidden_states=True)
    assert not torch.equal(out.hidden_states[-1], out.hidden_states[0])


def test_layerdrop_rate_0_changes_nothing(tokenizer):
    model = build("bert", tokenizer)
    batch = inputs(tokenizer, model)
    model.train()
    torch.manual_seed(1)
    plain = model(**batch).logits
    drop = LayerDrop(0.0).attach(model)
    assert drop.draw() == [False] * 4
    torch.manual_seed(1)
    assert torch.equal(model(**batch).logits, plain)


def test_layerdrop_draws_each_layer_anew_each_step_from_its_seed(tokenizer):
    model = build("bert", tokenizer, layers=6)
    first = LayerDrop(0.5).attach(model, seed=3)
    draws = [list(first.draw()) for _ in range(20)]
    second = LayerDrop(0.5).attach(copy.deepcopy(model), seed=3)
    assert draws == [list(second.draw()) for _ in range(20)]   # the same on every rank
    flat = [d for step in draws for d in step]
    assert 0.3 < sum(flat) / len(flat) < 0.7
    assert len({tuple(d) for d in draws}) > 5
    # a model in train mode skips exactly the layers drawn
    model.train()
    batch = inputs(tokenizer, model)
    first.skip = [False, True, False, False, True, False]
    hidden = model(**batch, output_hidden_states=True).hidden_states
    same = [torch.equal(hidden[i + 1], hidden[i]) for i in range(6)]
    assert same == first.skip


def test_layerdrop_in_training_skips_layers_then_removes_its_hooks(tokenizer, reviews):
    from compressor.engine.train import TrainConfig, fit

    model = build("bert", tokenizer)
    before = layer_weights(model)
    embeddings = arch_of(model).get_embeddings(model).word_embeddings.weight.clone()
    steps = []

    class Recording(LayerDrop):
        def on_step_begin(self, state):
            super().on_step_begin(state)
            steps.append(list(self.skip))

    train, dev = reviews
    result = fit(model, tokenizer, train, dev,
                 TrainConfig(epochs=1, batch_size=16, max_length=16, lr=1e-2, weight_decay=0.0,
                             warmup=0.0, device="cpu"), callbacks=[Recording(1.0)])
    assert steps == [[True] * 4] * result["steps"] and result["steps"] == 3
    # every layer skipped at every step: layer weights untouched (zero gradients), the rest trained
    assert all(same_weights(a, b) for a, b in zip(layer_weights(model), before))
    assert not torch.equal(arch_of(model).get_embeddings(model).word_embeddings.weight, embeddings)
    assert not model._forward_pre_hooks
    assert all(not layer._forward_hooks for layer in arch_of(model).get_layers(model))


def test_recovery_trains_with_layerdrop_from_the_config(tokenizer, reviews):
    model = build("bert", tokenizer)
    recover = {"mode": "finetune", "layerdrop": 0.5,
               "train": {"max_steps": 2, "epochs": 1, "batch_size": 16, "max_length": 16, "device": "cpu"}}
    job = make_job(model, tokenizer, reviews, recover=recover, rule="top", drop=1)
    assert any(isinstance(cb, LayerDrop) for cb in job.job_callbacks())
    record = prune_layers(job, job.config)
    assert record["recovery"]["steps"] == 2 and record["kept"] == [0, 1, 2]
    assert all(not layer._forward_hooks for layer in arch_of(job.model).get_layers(job.model))
    assert not job.model._forward_pre_hooks


def test_layerdrop_tells_the_positions_of_a_shared_layer_apart(tokenizer):
    """One module in positions 0 and 2 (cross-layer sharing) is skipped at position 2 only."""
    from torch import nn

    model = build("bert", tokenizer)
    spec = arch_of(model)
    layers = spec.get_layers(model)
    spec.set_layers(model, nn.ModuleList([layers[0], layers[1], layers[0], layers[3]]))
    drop = LayerDrop(0.5).attach(model)
    drop.skip = [False, False, True, False]
    batch = inputs(tokenizer, model)
    model.train()
    for _ in range(2):   # the count of calls starts again with each forward
        hidden = model(**batch, output_hidden_states=True).hidden_states
        assert [torch.equal(hidden[i + 1], hidden[i]) for i in range(4)] == drop.skip
