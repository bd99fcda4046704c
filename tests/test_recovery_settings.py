"""Recovery training (``recover:`` of prune, share, low-rank) runs on the stage's device, seed and
max_length unless ``recover.train`` sets them itself; a recipe's device and seed reach it
through the stage."""
import copy

import pytest
import torch
import transformers

from conftest import tiny_config, write_reviews
from compressor.core.settings import config_from_dict
from compressor.engine import job as job_module
from compressor.engine.job import RecoveryJob
from compressor.prune.configs import LayersPruneConfig, PruneConfig

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def tokenizer(minilm_dir):
    return transformers.AutoTokenizer.from_pretrained(minilm_dir)


@pytest.fixture(scope="module")
def reviews(tmp_path_factory):
    from compressor.core.data import read_user_file

    root = tmp_path_factory.mktemp("reviews")
    train = read_user_file(write_reviews(root / "train.csv", 48), ["review"], "sentiment")
    dev = read_user_file(write_reviews(root / "dev.csv", 8, start=48), ["review"], "sentiment",
                         task=train.task)
    return train, dev


@pytest.fixture(scope="module")
def model(tokenizer):
    torch.manual_seed(0)
    config = tiny_config("bert")
    config.vocab_size, config.num_labels = tokenizer.vocab_size, 2
    return transformers.AutoModelForSequenceClassification.from_config(config).eval()


def recovered(model, tokenizer, reviews, mode="finetune", train=None, **stage):
    """The job after one recovery run of ``mode`` (one step of 8 rows) from a copy of ``model``,
    and the sequence lengths the model saw while it trained."""
    config = LayersPruneConfig(recover={"mode": mode, "train": {"max_steps": 1, "batch_size": 8,
                                                                 "epochs": 1, **(train or {})}},
                               **{"device": "cpu", **stage})
    config.check()
    job = RecoveryJob(copy.deepcopy(model), tokenizer, *reviews, config, torch.device("cpu"),
                      teacher=copy.deepcopy(model) if mode == "distill" else None)
    lengths = []

    def seen(module, args, kwargs):
        if module.training:
            lengths.append(kwargs["input_ids"].shape[1])

    handle = job.model.register_forward_pre_hook(seen, with_kwargs=True)
    try:
        job.recover()
    finally:
        handle.remove()
    return job, lengths


def weights(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


@pytest.mark.parametrize("mode", ["finetune", "distill"])
def test_recovery_trains_on_the_stages_device_unless_its_train_section_names_one(
        monkeypatch, model, tokenizer, reviews, mode):
    import compressor.engine.distiller as distiller

    devices = []
    real_fit, real_distill = job_module.fit, distiller.distill_model

    def fit(model, tokenizer, train_set, dev_set, train, *args, **kwargs):
        devices.append(train.device)
        return real_fit(model, tokenizer, train_set, dev_set, train, *args, **kwargs)

    def distill_model(teacher, teacher_tokenizer, train_set, dev_set, config, *args, **kwargs):
        devices.append(config.train.device)
        return real_distill(teacher, teacher_tokenizer, train_set, dev_set, config, *args, **kwargs)

    monkeypatch.setattr(job_module, "fit", fit)
    monkeypatch.setattr(distiller, "distill_model", distill_model)
    recovered(model, tokenizer, reviews, mode, device="cpu")
    assert devices == ["cpu"]   # the stage's, not recover.train's default (auto)
    recovered(model, tokenizer, reviews, mode, train={"device": "cpu"}, device="auto")
    assert devices == ["cpu", "cpu"]   # its own, where it names one


def test_recovery_follows_the_stages_seed_unless_its_train_section_sets_one(model, tokenizer, reviews):
    one, _ = recovered(model, tokenizer, reviews, seed=1)
    again, _ = recovered(model, tokenizer, reviews, seed=1)
    other, _ = recovered(model, tokenizer, reviews, seed=2)
    torch.testing.assert_close(weights(one.model), weights(again.model), rtol=0, atol=0)
    assert not torch.equal(weights(one.model), weights(other.model))   # another shuffle of the rows
    # a seed of its own (the default's value, even) wins over the stage's
    own_1, _ = recovered(model, tokenizer, reviews, train={"seed": 42}, seed=1)
    own_2, _ = recovered(model, tokenizer, reviews, train={"seed": 42}, seed=2)
    torch.testing.assert_close(weights(own_1.model), weights(own_2.model), rtol=0, atol=0)
    assert not torch.equal(weights(own_1.model), weights(one.model))


@pytest.mark.parametrize("mode", ["finetune", "distill"])
def test_recovery_batches_are_cut_at_the_stages_max_length_unless_its_train_section_sets_one(
        model, tokenizer, reviews, mode):
    assert len(tokenizer("the film was good, and long 3")["input_ids"]) > 9   # longer than either cut
    _, lengths = recovered(model, tokenizer, reviews, mode, max_length=6)
    assert lengths and max(lengths) == 6
    _, lengths = recovered(model, tokenizer, reviews, mode, train={"max_length": 9}, max_length=6)
    assert lengths and max(lengths) == 9


def test_a_recipes_device_and_seed_reach_the_recovery_through_the_stage():
    config = config_from_dict(PruneConfig, {"method": "layers", "max_length": 64,
                                            "recover": {"mode": "finetune", "train": {"epochs": 2}}},
                              defaults={"device": "cpu", "seed": 3})
    train = config.recovery_train()
    assert (train.device, train.seed, train.max_length, train.epochs) == ("cpu", 3, 64, 2.0)
    config = config_from_dict(PruneConfig, {"method": "layers", "recover": {"train": {"device": "auto",
                                                                                      "seed": 42}}},
                              defaults={"device": "cpu", "seed": 3})
    train = config.recovery_train()
    assert (train.device, train.seed, train.max_length) == ("auto", 42, 128)
