"""Unstructured magnitude pruning: which weights, global and per-matrix thresholds, masks held
through recovery, the gradual cubic schedule and its checkpoint rule, and a pruned model that
saves and loads like any other."""
import dataclasses

import pytest
import torch
import transformers

from compressor.core.arch import arch_of
from compressor.core.errors import CompressorError
from compressor.prune.configs import MagnitudePruneConfig, RecoverSettings, pruner_for
from compressor.engine.job import RecoveryJob
from compressor.engine.teacher import frozen_copy
from compressor.prune.magnitude import (MaskKeeper, chosen_weights, cubic_sparsity, magnitude_masks,
                                        prune_magnitude)
from compressor.engine.train import Callback, TrainState
from conftest import tiny_config

pytestmark = pytest.mark.unit

RECOVER = dict(epochs=1, batch_size=16, max_length=32, lr=2e-3, warmup=0.0, device="cpu", seed=0)


@pytest.fixture(scope="module")
def tokenizer(minilm_dir):
    return transformers.AutoTokenizer.from_pretrained(minilm_dir)


@pytest.fixture(scope="module")
def sst2(glue_dir):
    from compressor.core.data import load_split

    return (load_split("sst2", "train", data_dir=glue_dir, limit=320),
            load_split("sst2", "dev", data_dir=glue_dir, limit=32))


def classifier(tokenizer, arch="bert"):
    config = tiny_config(arch)
    config.vocab_size, config.num_labels = tokenizer.vocab_size, 2
    torch.manual_seed(0)
    return transformers.AutoModelForSequenceClassification.from_config(config).eval()


def job_for(model, tokenizer, sst2, rows=None, **settings):
    recover = settings.pop("recover", {"mode": "none"})
    train = {**RECOVER, **{k: v for k, v in recover.items() if k != "mode"}}
    config = MagnitudePruneConfig(**settings, recover=RecoverSettings(mode=recover.get("mode", "distill"), train=train))
    config.check()
    train, dev = sst2
    if rows:
        train = dataclasses.replace(train, examples=train.examples[:rows])
    teacher = frozen_copy(model) if config.recover.mode == "distill" else None
    return RecoveryJob(model, tokenizer, train, dev, config, torch.device("cpu"), teacher=teacher)


def zeros(w):
    return int((w == 0).sum())


# -- which weights --------------------------------------------------------------

@pytest.mark.parametrize("arch, per_layer", [("bert", 6), ("distilbert", 6), ("mpnet", 6), ("modernbert", 4)])
def test_only_encoder_linear_weights_are_chosen(tokenizer, arch, per_layer):
    model = classifier(tokenizer, arch)
    chosen = chosen_weights(model)
    spec = arch_of(model)
    assert len(chosen) == 2 * per_layer          # two layers; ModernBERT's qkv is one fused matrix
    assert all(p.dim() == 2 and name.endswith("weight") for name, p in chosen.items())
    if spec.fused_qkv:
        assert spec.attention(spec.get_layers(model)[0])["qkv"].weight in chosen.values()
    assert not any("norm" in n.lower() or "classifier" in n or "embed" in n for n in chosen)
    with_emb = chosen_weights(model, embeddings=True)
    assert len(with_emb) == len(chosen) + 1
    assert any(p is model.get_input_embeddings().weight for p in with_emb.values())


def test_the_method_is_registered_for_its_config():
    assert pruner_for(MagnitudePruneConfig()) is prune_magnitude


# -- how many, and which -----------------------------------------------------------

def test_global_and_layer_scope_reach_the_asked_sparsity(tokenizer, sst2):
    results = {}
    for scope in ("global", "layer"):
        model = classifier(tokenizer)
        big = model.bert.encoder.layer[1].output.dense.weight
        with torch.no_grad():
            big.mul_(100)                         # one matrix of much larger weights
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        job = job_for(model, tokenizer, sst2, sparsity=0.7, scope=scope)
        record = prune_magnitude(job, job.config)
        chosen = chosen_weights(model)
        pools = [list(chosen)] if scope == "global" else [[n] for n in chosen]
        for pool in pools:      # exactly round(0.7 n) of the pool: all weights, or each matrix
            assert sum(zeros(chosen[n]) for n in pool) == round(0.7 * sum(chosen[n].numel() for n in pool))
        assert record["sparsity"] == pytest.approx(0.7, abs=1e-3)
        assert set(record["matrices"]) == set(chosen)
        # nothing else moved: biases, norms, embeddings, classifier
        for n, p in model.named_parameters():
            if n not in chosen:
                assert torch.equal(p, before[n]), n
        # the weights that went are the smallest: of the pool (global) or of their matrix (layer)
        for pool in pools:
            old = torch.cat([before[n].abs().flatten() for n in pool])
            gone = torch.cat([(chosen[n] == 0).flatten() for n in pool])
            assert old[gone].max() <= old[~gone].min()
        share = sum(zeros(p) for p in model.parameters()) / sum(p.numel() for p in model.parameters())
        assert record["model_zero_share"] == pytest.approx(share, abs=1e-6)
        results[scope] = record["matrices"]
    big_name = [n for n in results["layer"] if n.startswith("bert.encoder.layer.1.output.dense")][0]
    # per matrix: every one at the sparsity (to rounding); globally the large one keeps its weights
    for name, value in results["layer"].items():
        assert value == pytest.approx(0.7, abs=1e-3), name
    assert results["global"][big_name] < 0.05
    assert min(v for n, v in results["global"].items() if n != big_name) > 0.7


def test_embeddings_are_pruned_only_when_asked(tokenizer, sst2):
    for embeddings in (False, True):
        model = classifier(tokenizer)
        words = model.get_input_embeddings().weight
        padding_row = zeros(words)              # BERT's padding embedding starts at zero
        job = job_for(model, tokenizer, sst2, sparsity=0.5, scope="layer", embeddings=embeddings)
        record = prune_magnitude(job, job.config)
        if embeddings:
            assert zeros(words) == round(0.5 * words.numel())
        else:
            assert zeros(words) == padding_row
        assert len(record["matrices"]) == 12 + embeddings


def test_exact_count_with_ties():
    weights = {"a": torch.zeros(4, 5), "b": torch.ones(2, 5)}
    masks = magnitude_masks(weights, 0.5, "global")
    assert int(masks["a"].sum()) == 15 and not masks["b"].any()
    masks = magnitude_masks(weights, 0.8, "global")
    assert bool(masks["a"].all()) and int(masks["b"].sum()) == 4
    masks = magnitude_masks(weights, 0.3, "layer")
    assert int(masks["a"].sum()) == 6 and int(masks["b"].sum()) == 3


# -- recovery --------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["finetune", "distill"])
def test_masks_survive_recovery_training(tokenizer, sst2, mode):
    model = classifier(tokenizer)
    expected = magnitude_masks(chosen_weights(model), 0.6, "global")
    before = {n: w.detach().clone() for n, w in chosen_weights(model).items()}
    job = job_for(model, tokenizer, sst2, rows=64, sparsity=0.6, recover={"mode": mode})
    probe = SparsityProbe(model, expected)
    job.callbacks.append(probe)
    record = prune_magnitude(job, job.config)
    # between steps, while training: the pruned weights are zero, and only they
    assert probe.seen == {step: 0.6 for step in range(4)} and probe.same_zeros == [True] * 4
    assert record["recovery"]["steps"] == 4 and record["sparsity_before_recovery"] == pytest.approx(0.6, abs=1e-4)
    for name, w in chosen_weights(job.model).items():
        assert torch.equal(w == 0, expected[name].view_as(w)), name     # the same weights, still zero
        assert not torch.equal(w[~expected[name]], before[name][~expected[name]])   # the rest trained
    assert record["sparsity"] == pytest.approx(0.6, abs=1e-4)


class SparsityProbe(Callback):
    """The chosen weights' sparsity after each step (read before the next step runs, the
    masks' callback having run), and whether the zeros are where ``masks`` say."""

    def __init__(self, model, masks=None):
        self.weights, self.masks, self.seen, self.same_zeros = chosen_weights(model), masks, {}, []

    def now(self):
        total = sum(w.numel() for w in self.weights.values())
        return round(sum(zeros(w) for w in self.weights.values()) / total, 4)

    def on_step_begin(self, state):
        self.seen[state.step] = self.now()
        if self.masks is not None:
            self.same_zeros.append(all(torch.equal(w == 0, self.masks[n]) for n, w in self.weights.items()))


def test_cubic_schedule_values():
    assert cubic_sparsity(0, 20, 0.8) == 0.0
    assert cubic_sparsity(10, 20, 0.8) == pytest.approx(0.8 * (1 - 0.5 ** 3))
    assert cubic_sparsity(20, 20, 0.8) == 0.8 and cubic_sparsity(25, 20, 0.8) == 0.8
    values = [cubic_sparsity(t, 20, 0.8) for t in range(21)]
    assert values == sorted(values)


def test_gradual_schedule_during_recovery_and_its_checkpoint_rule(tokenizer, sst2):
    model = classifier(tokenizer)
    job = job_for(model, tokenizer, sst2, sparsity=0.8, schedule="gradual",
                  recover={"mode": "finetune", "eval_every": 5})
    probe = SparsityProbe(model)
    job.callbacks.append(probe)
    record = prune_magnitude(job, job.config)
    T = record["recovery"]["steps"]
    assert T == 20                                          # 320 rows, batch 16: masks every step
    assert probe.seen[0] == 0.0 and probe.seen[1] == pytest.approx(cubic_sparsity(1, T, 0.8), abs=1e-4)
    assert probe.seen[T // 2] == pytest.approx(cubic_sparsity(T // 2, T, 0.8), abs=1e-4)
    assert list(probe.seen.values()) == sorted(probe.seen.values())
    assert [u["step"] for u in record["mask_updates"]] == list(range(1, T + 1))
    assert record["sparsity"] == pytest.approx(0.8, abs=1e-4)
    history = record["recovery"]["history"]
    assert [h["step"] for h in history] == [5, 10, 15, 20]
    assert [h["kept"] for h in history] == [False, False, False, True]
    assert record["recovery"]["best_step"] == 20


def test_may_keep_refuses_checkpoints_before_the_final_sparsity():
    w = torch.nn.Parameter(torch.randn(8, 8))
    keeper = MaskKeeper({"w": w}, 0.5, gradual=True)
    state = TrainState(model=None, optimizer=None, config=None, total_steps=40, steps_per_epoch=40)
    keeper.on_train_begin(state)
    assert keeper.every == 2
    for step in range(1, 41):
        state.step = step
        keeper.on_optimizer_step(state)
        assert keeper.may_keep(state, {"step": step}) == (step == 40)
        assert keeper.current == pytest.approx(cubic_sparsity(step - step % 2, 40, 0.5))
    assert zeros(w) == 32
    # a run stopped early still ends at the final sparsity
    early = MaskKeeper({"w": torch.nn.Parameter(torch.randn(8, 8))}, 0.5, gradual=True)
    early.on_train_begin(state)
    state.step = 3
    early.on_train_end(state)
    assert early.reached and zeros(early.weights["w"]) == 32


def test_gradual_needs_recovery(tokenizer, sst2):
    model = classifier(tokenizer)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    job = job_for(model, tokenizer, sst2, sparsity=0.5, schedule="gradual")
    with pytest.raises(CompressorError, match="gradual") as err:
        prune_magnitude(job, job.config)
    assert "\n" not in str(err.value) and "recover.mode" in str(err.value)
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())


# -- the result is an ordinary checkpoint ------------------------------------------------

def test_pruned_model_saves_and_loads_with_its_zeros(tokenizer, sst2, tmp_path):
    from compressor.core.data import get_task
    from compressor.core.models import checkpoint_meta, load_for_task, save_checkpoint

    model = classifier(tokenizer)
    keys = set(model.state_dict())
    job = job_for(model, tokenizer, sst2, sparsity=0.9, scope="layer")
    prune_magnitude(job, job.config)
    assert set(model.state_dict()) == keys                  # no mask buffers
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())
    assert not any(p._backward_hooks for p in model.parameters() if p._backward_hooks is not None)
    save_checkpoint(model, tokenizer, str(tmp_path / "pruned"), checkpoint_meta(get_task("sst2"), 32, "test"))
    loaded, tok = load_for_task(str(tmp_path / "pruned"))
    loaded.eval()
    for (name, a), b in zip(chosen_weights(model).items(), chosen_weights(loaded).values()):
        assert torch.equal(a, b) and zeros(b) == round(0.9 * b.numel()), name
    batch = tok(["a gripping , funny film .", "dull and far too long"], padding=True, return_tensors="pt")
    with torch.no_grad():
        assert torch.equal(model(**batch).logits, loaded(**batch).logits)
