"""Training rows held out from fine-tuning, so later choices have rows no model learned from.

``compressor finetune --holdout N`` draws N rows of the training split (seeded), trains on the
rest, and records the draw in the checkpoint's ``compressor.json`` (``holdout``: how many rows,
the seed, the size of the split drawn from and a digest of the rows drawn). Whatever is made
from that teacher later can take the same rows back (:func:`split`): a mixed-precision search
(``search_on: holdout``) ranks its units on them, and a recipe leaves them out of every stage's
training rows, so a choice made on them is made on data the teacher and its students never saw,
as dev stays the data nothing was chosen on. The draw is recomputed from the record, and the
digest refuses training rows other than those it was drawn from.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import replace
from typing import Optional, Tuple

from compressor.core.errors import CompressorError
from compressor.core.data.readers import hash_rows

SPLIT = "holdout (training rows the teacher did not train on)"


def _digest(dataset) -> str:
    h = hashlib.sha256()
    hash_rows(h, dataset.examples)
    return h.hexdigest()[:20]


def draw(train_set, rows: int, seed: int):
    """``(rest, held, record)``: ``rows`` training rows drawn with ``seed``, the others, and what
    ``compressor.json`` keeps of the draw."""
    n = len(train_set)
    if not 0 < rows < n:
        raise CompressorError(f"holdout {rows}: the training split ({train_set.source}) has {n} rows; "
                              f"hold out between 1 and {n - 1}")
    rest, held = train_set.partition(rows, seed, SPLIT)
    record = {"rows": rows, "seed": seed, "examples": n, "digest": _digest(held),
              "source": os.path.basename(train_set.source)}
    return rest, held, record


def split(train_set, record: dict, where: str) -> Tuple[object, object]:
    """``(rest, held)`` of ``train_set`` as the draw ``record`` (of the checkpoint ``where``)
    made them; ``train_set`` may run past the rows drawn from (they were its first rows)."""
    n = record["examples"]
    if len(train_set) < n:
        raise CompressorError(f"{where} held out {record['rows']} of {n} training rows; "
                              f"{train_set.source} has only {len(train_set)}: load the whole split")
    first = replace(train_set, examples=train_set.examples[:n])   # the rows drawn from
    rest, held = first.partition(record["rows"], record["seed"], SPLIT)
    if _digest(held) != record["digest"]:
        raise CompressorError(f"{where} held out rows of another training file than {train_set.source} "
                              f"(its rows' digest differs): give the data it was fine-tuned on")
    return replace(rest, examples=rest.examples + list(train_set.examples[n:])), held


def record_of(path: Optional[str], hops: int = 8) -> Tuple[Optional[dict], Optional[str]]:
    """The holdout record of checkpoint ``path`` or of the checkpoint it was made from (its
    ``compressor.json`` ``source``, followed a few steps back), and which folder had it."""
    from compressor.core.loaders import read_meta

    while path and hops and os.path.isdir(path):
        meta = read_meta(path)
        if meta.get("holdout"):
            return meta["holdout"], path
        path, hops = meta.get("source"), hops - 1
    return None, None


def carried(parent: Optional[str]) -> dict:
    """What a checkpoint made from ``parent`` (a teacher, or a model made from one) records of
    the rows held out: ``{"holdout": record}`` when ``parent`` or its sources held rows out
    (its training left them out too, so a later choice on them is still made on unseen rows),
    else ``{}``. Written into the new checkpoint's ``compressor.json``, it lets work that starts
    from that checkpoint find the rows without the chain of folders it came from."""
    record, _ = record_of(parent)
    return {"holdout": record} if record else {}


def training_and_held(task_spec, data_dir: Optional[str], limit: Optional[int], user_data,
                      teacher: Optional[str]):
    """``(training rows, held rows)`` for work that starts from ``teacher`` (or from a model made
    from it): the split without the rows it was fine-tuned without, then the first ``limit`` of
    the others; and those rows (None when it held none out)."""
    from compressor.core.data.userfiles import load_data

    record, where = record_of(teacher)
    if record is None:
        return load_data(task_spec, "train", data_dir, limit, user_data), None
    # the rows drawn from are the split's first ones: with a limit, that many more are all it reads
    rows = record["examples"] + limit if limit else None
    rest, held = split(load_data(task_spec, "train", data_dir, rows, user_data), record, where)
    return (replace(rest, examples=rest.examples[:limit]) if limit else rest), held


def training_rows(task_spec, data_dir: Optional[str], limit: Optional[int], user_data, teacher: Optional[str]):
    """The training split for work that starts from ``teacher``, its held rows left out."""
    return training_and_held(task_spec, data_dir, limit, user_data, teacher)[0]


def held_rows(model: str, task_spec, data_dir: Optional[str], user_data=None, needs: str = "this"):
    """The training rows ``model`` (or the checkpoint it was made from) was fine-tuned without;
    ``needs`` names what asked for them in the error when there are none."""
    from compressor.core.data.userfiles import load_data

    record, where = record_of(model)
    if record is None:
        raise CompressorError(f"{needs} needs a model fine-tuned with --holdout N (or made from one): "
                              f"{model} and the checkpoints it was made from record none")
    # the held rows are drawn from the split's first rows: the rest of the split is not read
    return split(load_data(task_spec, "train", data_dir, record["examples"], user_data), record, where)[1]
