"""Training batches: shuffled (the default, unchanged) or length-grouped (``group_by_length``)."""
import random

import pytest
import torch

from compressor.core import distributed
from compressor.core.batches import iter_batches, shuffled_groups
from compressor.engine.train import TrainConfig, finetune

pytestmark = pytest.mark.unit


def _lengths(n=5000, seed=0):
    """Token counts shaped like a short-text GLUE task: mostly short, a long tail (CoLA's 3..47)."""
    rng = random.Random(seed)
    return [min(47, 3 + int(rng.expovariate(1 / 9))) for _ in range(n)]


def _items(lengths):
    return [{"input_ids": [7] * n, "label": i % 2} for i, n in enumerate(lengths)]


def _epoch(lengths, batch_size, seed, by_length, epochs=1):
    generator = torch.Generator().manual_seed(seed)
    return [shuffled_groups(lengths, batch_size, generator, by_length) for _ in range(epochs)]


def _padded(lengths, groups):
    return sum(len(g) * max(lengths[i] for i in g) for g in groups)


@pytest.mark.parametrize("rows, batch_size", [(5000, 64), (1000, 64), (130, 64), (50, 64), (97, 1), (33, 8)])
def test_every_row_once_per_epoch(rows, batch_size):
    lengths = _lengths(rows)
    for groups in _epoch(lengths, batch_size, 3, True, epochs=3):
        assert sorted(i for g in groups for i in g) == list(range(rows))
        # as many batches as random batching, all full but (at most) one
        assert len(groups) == -(-rows // batch_size)
        assert sum(len(g) < batch_size for g in groups) <= 1


def test_same_seed_same_batches_and_each_epoch_its_own():
    lengths = _lengths(2000)
    first, second = _epoch(lengths, 64, 11, True, epochs=2), _epoch(lengths, 64, 11, True, epochs=2)
    assert first == second
    assert first[0] != first[1]                        # the next epoch draws a new order
    assert _epoch(lengths, 64, 12, True) != _epoch(lengths, 64, 11, True)


def test_grouped_batches_hold_rows_of_nearly_one_length():
    lengths = _lengths(5000)
    random_groups, = _epoch(lengths, 64, 5, False)
    grouped, = _epoch(lengths, 64, 5, True)
    tokens = sum(lengths)
    # random batches compute far more padding than tokens; grouped ones almost none
    assert _padded(lengths, random_groups) > 3 * tokens     # 3.6x here
    assert _padded(lengths, grouped) < 1.2 * tokens         # 1.12x here
    spreads = sorted(max(lengths[i] for i in g) - min(lengths[i] for i in g) for g in grouped)
    assert spreads[len(spreads) // 2] <= 1             # the median batch: one or two lengths
    # the widest batch comes first (out of memory at the first step, not minutes in) ...
    assert max(lengths[i] for i in grouped[0]) == max(lengths)
    # ... and the rest in a random order, not by length
    widths = [max(lengths[i] for i in g) for g in grouped[1:]]
    assert widths != sorted(widths) and widths != sorted(widths, reverse=True)


def test_default_keeps_the_batches_of_before():
    """Without group_by_length the batches are the ones training drew before it existed: a
    randperm of the rows from the run's generator, cut in order, one draw per epoch."""
    lengths = _lengths(300)
    items = _items(lengths)
    generator = torch.Generator().manual_seed(42)
    got = [[b["order"].tolist() for b in iter_batches(items, 32, 0, False, generator)] for _ in range(2)]
    before = torch.Generator().manual_seed(42)
    for epoch in got:
        order = torch.randperm(len(items), generator=before).tolist()
        assert epoch == [order[s:s + 32] for s in range(0, len(order), 32)]


@pytest.mark.parametrize("world", [2, 3])
def test_ranks_shares_are_disjoint_and_cover_the_global_batch(world):
    lengths = _lengths(1000)
    items = _items(lengths)
    whole = list(iter_batches(items, 64, 0, False, torch.Generator().manual_seed(1), group_by_length=True))
    ranks = [list(iter_batches(items, 64, 0, False, torch.Generator().manual_seed(1), group_by_length=True,
                               rows=lambda n, r=r: distributed.shard(range(n), r, world)))
             for r in range(world)]
    assert all(len(shares) == len(whole) for shares in ranks)
    for batch, shares in zip(whole, zip(*ranks)):
        rows = [i for share in shares for i in share["order"].tolist()]
        assert rows == batch["order"].tolist()          # disjoint, in order, all of them
        assert {s["input_ids"].shape[1] for s in shares} == {batch["input_ids"].shape[1]}
        assert {s["global_rows"] for s in shares} == {len(batch["order"])}
        for share in shares:                            # each share's rows are its own rows
            assert share["attention_mask"].sum(1).tolist() == [lengths[i] for i in share["order"].tolist()]


def test_training_with_grouped_batches_and_gradient_accumulation(tiny_models, glue_dir, tmp_path):
    """The setting reaches the loop: the same steps and rows as random batches (64 rows in
    batches of 8, two per step), reproducible, and a different run from random batches."""
    quick = dict(epochs=2, batch_size=8, grad_accum=2, max_length=32, lr=1e-3, device="cpu")
    runs = {}
    for name, grouped in (("grouped", True), ("again", True), ("random", False)):
        runs[name] = finetune(tiny_models["bert"], "sst2", str(tmp_path / name), data_dir=glue_dir,
                              train_limit=64, dev_limit=16,
                              config=TrainConfig(**quick, group_by_length=grouped))
    for record in runs.values():
        assert record["steps"] == 8 and [h["step"] for h in record["history"]] == [4, 8]
    assert runs["grouped"]["loss_curve"] == runs["again"]["loss_curve"]
    assert runs["grouped"]["loss_curve"] != runs["random"]["loss_curve"]
