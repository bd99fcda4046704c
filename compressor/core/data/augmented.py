"""Augmented training rows on disk: what ``compressor augment`` writes and distillation reads.

A folder holds ``augmented.jsonl`` (one row a line: its texts, the teacher's logits, and which
training row it was made from) and ``augment.json`` (how it was made: the digest of the
teacher's files, of the training rows it was made from, and of the settings, combined into one
``digest`` that says whether a folder can be reused). The rows carry no labels: the teacher's
logits are their only targets.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, replace
from typing import Optional

import numpy as np

from compressor.core.data.readers import Dataset, Example, hash_rows
from compressor.core.errors import CompressorError

ROWS = "augmented.jsonl"
RECORD = "augment.json"
SPLIT = "augmented (copies of training rows, the teacher's logits as targets)"

# the files that make a model what it is (weights, shape, vocabulary), not its records
_MODEL_FILES = (".safetensors", ".bin", ".pt", "config.json", "tokenizer.json", "vocab.txt",
                "tokenizer_config.json", "special_tokens_map.json", ".model")


def rows_digest(dataset) -> str:
    """The identity of a set of rows: texts and labels, in order."""
    h = hashlib.sha256()
    hash_rows(h, dataset.examples)
    return h.hexdigest()[:20]


def model_digest(path: str) -> str:
    """The identity of a model folder's weights, config and vocabulary (a hub id: its name)."""
    h = hashlib.sha256()
    if not os.path.isdir(path):
        h.update(path.encode())
        return h.hexdigest()[:20]
    for name in sorted(os.listdir(path)):
        full = os.path.join(path, name)
        if os.path.isfile(full) and name.endswith(_MODEL_FILES):
            h.update(name.encode())
            with open(full, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
    return h.hexdigest()[:20]


@dataclass
class AugmentedRows:
    """Rows without labels and the teacher's logits for each (``[rows, outputs]``)."""

    dataset: Dataset
    logits: np.ndarray
    record: dict

    def __len__(self) -> int:
        return len(self.dataset)

    @property
    def max_length(self) -> int:
        return int(self.record["max_length"])


def write_augmented(folder: str, dataset: Dataset, logits: np.ndarray, sources, record: dict) -> None:
    """Write the rows (with ``sources``, the training row each copies) and the record, the
    record last: a folder with a record is complete."""
    from compressor.core.io import write_json

    os.makedirs(folder, exist_ok=True)
    logits = np.asarray(logits, dtype=np.float32).reshape(len(dataset), -1)
    tmp = os.path.join(folder, f".{ROWS}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for ex, row, source in zip(dataset.examples, logits, sources):
            f.write(json.dumps({"texts": list(ex.texts), "logits": [round(float(v), 6) for v in row],
                                "row": source}, ensure_ascii=False) + "\n")
    os.replace(tmp, os.path.join(folder, ROWS))
    write_json(os.path.join(folder, RECORD), record)


def read_record(folder: str) -> Optional[dict]:
    """``augment.json`` of ``folder``, or None when there is no complete set there."""
    from compressor.core.io import read_json

    path = os.path.join(folder, RECORD)
    if not (os.path.isfile(path) and os.path.isfile(os.path.join(folder, ROWS))):
        return None
    try:
        record = read_json(path)
    except (CompressorError, OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("digest") else None


def read_augmented(folder: str, task) -> AugmentedRows:
    """The augmented rows of ``folder`` (written by ``compressor augment``) for ``task``."""
    record = read_record(folder)
    if record is None:
        raise CompressorError(f"{folder} holds no augmented rows ({RECORD} and {ROWS}): make them "
                              "with compressor augment MODEL --out FOLDER (or an augment stage)")
    if record.get("task") != task.name:
        raise CompressorError(f"{folder} holds augmented {record.get('task')} rows, not {task.name}")
    examples, logits = [], []
    path = os.path.join(folder, ROWS)
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f):
            row = json.loads(line)
            examples.append(Example(texts=tuple(row["texts"]), label=None, guid=f"aug-{i}"))
            logits.append(row["logits"])
    logits = np.asarray(logits, dtype=np.float32).reshape(len(examples), task.num_labels)
    return AugmentedRows(Dataset(task, SPLIT, examples, path), logits, record)


def joined(train_set: Dataset, augmented: AugmentedRows) -> Dataset:
    """The training rows followed by the augmented ones (which have no labels)."""
    return replace(train_set, examples=list(train_set.examples) + list(augmented.dataset.examples),
                   source=f"{train_set.source} + {augmented.dataset.source}")
