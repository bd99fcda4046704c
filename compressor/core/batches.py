"""Tokenise once, pad per batch.

Padding each batch only to its longest sentence (rather than to ``max_length``)
is what makes CPU training on short GLUE sentences affordable.
"""
from __future__ import annotations

from typing import Dict, Iterator, List, Optional, Sequence

import torch

from compressor.core.arch import uses_token_type_ids
# the one grouping rule, shared with the torch-free runtime (compressor.export.runtime)
from compressor.core.grouping import BATCHINGS, BUCKET_WINDOW  # noqa: F401
from compressor.core.grouping import batch_groups as length_groups


def encode(tokenizer, examples: Sequence, max_length: int, config) -> List[Dict]:
    """Token ids (unpadded) and the label of each example, in order."""
    keep_types = uses_token_type_ids(config)
    columns = list(zip(*[ex.texts for ex in examples])) if examples else []
    enc = tokenizer(*[list(c) for c in columns], truncation=True, max_length=max_length,
                    padding=False, return_token_type_ids=keep_types)
    items = []
    for i, ex in enumerate(examples):
        item = {"input_ids": enc["input_ids"][i], "label": ex.label}
        if keep_types:
            item["token_type_ids"] = enc["token_type_ids"][i]
        items.append(item)
    return items


def collate(items: Sequence[Dict], pad_id: int, regression: bool,
            width: Optional[int] = None) -> Dict[str, torch.Tensor]:
    """Pad ``items`` to their longest row, or to ``width`` (a global batch's, for one rank's share)."""
    width = width or max(len(it["input_ids"]) for it in items)
    ids = torch.full((len(items), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(items), width), dtype=torch.long)
    types = torch.zeros((len(items), width), dtype=torch.long) if "token_type_ids" in items[0] else None
    for row, it in enumerate(items):
        n = len(it["input_ids"])
        ids[row, :n] = torch.tensor(it["input_ids"])
        mask[row, :n] = 1
        if types is not None:
            types[row, :n] = torch.tensor(it["token_type_ids"])
    batch = {"input_ids": ids, "attention_mask": mask}
    if types is not None:
        batch["token_type_ids"] = types
    if any(it["label"] is not None for it in items):
        # a row without a label (an augmented row: the teacher's logits are its only target)
        # is marked, and the task loss leaves it out
        batch["labels"] = torch.tensor([NO_LABEL[regression] if it["label"] is None else it["label"]
                                        for it in items], dtype=torch.float if regression else torch.long)
    return batch


NO_LABEL = {False: -100, True: float("nan")}   # (classification, regression): a row with no label


def has_label(labels: torch.Tensor) -> torch.Tensor:
    """Which rows of a batch's ``labels`` have one (see :data:`NO_LABEL`)."""
    return ~torch.isnan(labels) if labels.is_floating_point() else labels != NO_LABEL[False]


GROUP_WINDOW = 50   # group_by_length: rows are sorted within mega-batches of this many batches


def shuffled_groups(lengths: Sequence[int], batch_size: int, generator: torch.Generator,
                    by_length: bool = False, window: int = GROUP_WINDOW) -> List[List[int]]:
    """Row indices of each training batch, for rows of token counts ``lengths``, drawn from
    ``generator`` (one epoch; every row once).

    By default the rows in a random order, cut into batches (the order torch.randperm gives).
    ``by_length`` (``group_by_length``, as HF Trainer calls it): the same random order is cut
    into mega-batches of ``window`` batches (fewer on small sets, so there are at least four),
    each sorted by length (:func:`length_groups`' ``bucketed`` rule) and cut into batches, and
    the batches come in a random order, the widest first as HF's sampler does (a run that does
    not fit in memory fails at its first step). A batch then holds rows of nearly one length:
    far less padding, whose cost grows with the square of the width in attention.
    """
    order = torch.randperm(len(lengths), generator=generator).tolist()
    if not by_length or batch_size <= 1 or len(order) <= batch_size:
        return [order[start:start + batch_size] for start in range(0, len(order), batch_size)]
    window = max(1, min(window, len(order) // (4 * batch_size)))
    groups = [[order[i] for i in group] for group in
              length_groups([lengths[i] for i in order], batch_size, "bucketed", window)]
    groups = [groups[i] for i in torch.randperm(len(groups), generator=generator).tolist()]
    widest = max(range(len(groups)), key=lambda g: max(lengths[i] for i in groups[g]))
    groups.insert(0, groups.pop(widest))
    return groups


def iter_batches(items: Sequence[Dict], batch_size: int, pad_id: int, regression: bool,
                 generator: Optional[torch.Generator] = None,
                 rows: Optional[slice] = None, batching: str = "sorted",
                 group_by_length: bool = False) -> Iterator[Dict[str, torch.Tensor]]:
    """Shuffled batches when a generator is given (:func:`shuffled_groups`; length-grouped
    with ``group_by_length``); otherwise grouped as ``batching`` says
    (:func:`length_groups`; ``sorted``, the default: length-sorted).

    Length-sorted batches waste no compute on padding; ``order`` in each batch
    says where its rows belong so predictions can be put back in input order.
    ``rows`` (a function of the batch's row count giving a ``range``) keeps only those
    rows of each batch, padded to the whole batch's width: one rank's share of a global
    batch, collated without the other ranks' rows.
    """
    lengths = [len(it["input_ids"]) for it in items]
    if generator is not None:
        groups = shuffled_groups(lengths, batch_size, generator, group_by_length)
    else:
        groups = length_groups(lengths, batch_size, batching)
    for idx in groups:
        width = max(lengths[i] for i in idx)
        mine = idx if rows is None else [idx[r] for r in rows(len(idx))]
        batch = collate([items[i] for i in mine], pad_id, regression, width)
        batch["order"] = torch.tensor(mine)
        if rows is not None:
            batch["global_rows"] = len(idx)
        yield batch


def to_device(batch: Dict[str, torch.Tensor], device) -> Dict[str, torch.Tensor]:
    if torch.device(device).type == "cuda":
        # from pinned memory the copy is queued behind the GPU's work instead of waiting for it
        return {k: v.pin_memory().to(device, non_blocking=True)
                for k, v in batch.items() if k not in ("order", "global_rows")}
    return {k: v.to(device) for k, v in batch.items() if k not in ("order", "global_rows")}
