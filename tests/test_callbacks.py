"""Hooks into the training loop: callbacks change training, and a rule says which weights may be kept."""
import pytest
import torch

from compressor.engine.train import Callback, TrainConfig, fit, set_seed

pytestmark = pytest.mark.unit

QUICK = dict(epochs=2, batch_size=16, max_length=16, lr=2e-3, device="cpu")


@pytest.fixture()
def reviews(tmp_path):
    from compressor.core.data import read_user_file
    from conftest import write_reviews

    return read_user_file(write_reviews(tmp_path / "train.csv", 96), ["review"], "sentiment")


def _model(tiny_models, data):
    from compressor.core.models import load_for_task

    set_seed(0)
    return load_for_task(tiny_models["bert"], data.task)


class HalfMask(Callback):
    """A pruning mask: half the first FFN's rows held at zero after every optimiser step."""

    def __init__(self):
        self.calls = {"train_begin": 0, "epoch_begin": 0, "step_begin": 0, "optimizer_step": 0,
                      "epoch_end": 0, "evaluate": 0, "train_end": 0}

    def rows(self, model):
        return model.bert.encoder.layer[0].intermediate.dense.weight[::2]

    def on_train_begin(self, state):
        self.calls["train_begin"] += 1
        with torch.no_grad():
            self.rows(state.model).zero_()

    def on_epoch_begin(self, state):
        self.calls["epoch_begin"] += 1

    def on_step_begin(self, state):
        self.calls["step_begin"] += 1

    def on_optimizer_step(self, state):
        self.calls["optimizer_step"] += 1
        with torch.no_grad():
            self.rows(state.model).zero_()

    def on_epoch_end(self, state):
        self.calls["epoch_end"] += 1

    def on_evaluate(self, state, entry):
        self.calls["evaluate"] += 1

    def on_train_end(self, state):
        self.calls["train_end"] += 1


def test_a_mask_callback_holds_weights_at_zero(tiny_models, reviews):
    model, tok = _model(tiny_models, reviews)
    mask = HalfMask()
    result = fit(model, tok, reviews, reviews, TrainConfig(**QUICK), callbacks=[mask])
    # 96 rows in batches of 16: 6 steps an epoch, 2 epochs, one evaluation each
    assert result["steps"] == 12
    assert mask.calls == {"train_begin": 1, "epoch_begin": 2, "step_begin": 12,
                          "optimizer_step": 12, "epoch_end": 2, "evaluate": 2, "train_end": 1}
    ffn = model.bert.encoder.layer[0].intermediate.dense.weight
    assert torch.count_nonzero(ffn[::2]) == 0 and torch.count_nonzero(ffn[1::2]) == ffn[1::2].numel()
    # without the callback the same rows train like the others
    plain, tok = _model(tiny_models, reviews)
    fit(plain, tok, reviews, reviews, TrainConfig(**QUICK))
    assert torch.count_nonzero(plain.bert.encoder.layer[0].intermediate.dense.weight[::2]) > 0


class KeepFrom(Callback):
    """The checkpoint rule of a pruning schedule: nothing before its target step is kept."""

    def __init__(self, step):
        self.step = step

    def may_keep(self, state, entry):
        return entry["step"] >= self.step


def test_checkpoint_rule_decides_which_weights_are_kept(tiny_models, reviews):
    config = TrainConfig(**{**QUICK, "eval_every": 2})
    model, tok = _model(tiny_models, reviews)
    result = fit(model, tok, reviews, reviews, config, callbacks=[KeepFrom(8)])
    assert [h["step"] for h in result["history"]] == [2, 4, 6, 8, 10, 12]
    assert [h["kept"] for h in result["history"]] == [False] * 3 + [True] * 3
    assert result["best"]["step"] >= 8
    assert result["best"]["score"] == max(h["score"] for h in result["history"][3:])
    # no evaluation allowed: the last weights stay, and the last entry is reported
    model, tok = _model(tiny_models, reviews)
    result = fit(model, tok, reviews, reviews, config, callbacks=[KeepFrom(99)])
    assert result["best"]["step"] == 12 and not any(h["kept"] for h in result["history"])


class StopAt(Callback):
    def __init__(self, step):
        self.step = step

    def on_optimizer_step(self, state):
        state.stop = state.step >= self.step


def test_a_callback_can_end_training(tiny_models, reviews):
    model, tok = _model(tiny_models, reviews)
    result = fit(model, tok, reviews, reviews, TrainConfig(**QUICK), callbacks=[StopAt(3)])
    assert result["steps"] == 3 and [h["step"] for h in result["history"]] == [3]
