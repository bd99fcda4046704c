"""Unlabelled text for general distillation (TinyBERT's first stage, MiniLM's task-agnostic
distillation): the sentences of the task's own training rows and of every other GLUE task's
training file under the data folder, labels dropped, each sentence of a pair on its own,
each distinct sentence once. Only training files are read, and a sentence of the task's dev set
is left out wherever it appears (STS-B's dev set shares 249 sentences with its own training
file), so no dev text enters training. A shared text (a general student several tasks reuse)
leaves out every task's dev sentences and does not depend on the task.
"""
from __future__ import annotations

import os
import random
from typing import Optional

from compressor.core.data.readers import EMBEDDED, Dataset, Example, read_glue_file, resolve_data_dir
from compressor.core.data.tasks import TASKS, TaskSpec
from compressor.core.errors import CompressorError


def unlabelled_text(task: TaskSpec, data_dir: Optional[str], own: Optional[Dataset] = None,
                    dev: Optional[Dataset] = None, rows: int = 0, seed: int = 42,
                    shared: bool = False) -> Dataset:
    """A ``Dataset`` of ``task`` (so the training loop takes it) whose examples are single
    sentences with a placeholder label that no layer loss reads. ``own``: the task's training
    rows (a user's files included), always in the pool; ``dev``: the rows scored later, whose
    sentences are kept out. ``rows``: at most that many sentences,
    a seeded sample (0: all).

    ``shared``: the same text whatever the task, for a general student several tasks reuse:
    the dev sentences of every GLUE task under the data folder are kept out too, and the
    training files are read in one order (the task's own rows first only when they are a
    user's file, not one of the folder's)."""
    seen = {text.strip() for example in (dev.examples if dev is not None else []) for text in example.texts}
    folder = resolve_data_dir(data_dir)
    on_disk = folder and folder != EMBEDDED and os.path.isdir(folder)
    if shared and on_disk:
        for spec in TASKS.values():
            for split, name in spec.splits.items():
                path = os.path.join(folder, spec.folder, name)
                if split.startswith("dev") and os.path.isfile(path):
                    seen.update(text.strip() for example in read_glue_file(spec, path, split).examples
                                for text in example.texts)
        if own is not None and any(os.path.abspath(own.source) == os.path.abspath(
                os.path.join(folder, spec.folder, spec.splits["train"])) for spec in TASKS.values()):
            own = None                        # read in its place among the folder's files
    sentences, sources = [], []

    def add(dataset: Dataset, name: str) -> None:
        before = len(sentences)
        for example in dataset.examples:
            for text in example.texts:
                text = text.strip()
                if text and text not in seen:
                    seen.add(text)
                    sentences.append(text)
        if len(sentences) > before:
            sources.append(name)

    if own is not None:
        add(own, f"{task.name} train")
    if on_disk:
        read = set()
        for spec in TASKS.values():
            path = os.path.join(folder, spec.folder, spec.splits["train"])
            if spec.folder in read or not os.path.isfile(path):
                continue                      # MNLI's two dev sets share one training file
            read.add(spec.folder)
            if own is not None and os.path.abspath(own.source) == os.path.abspath(path):
                continue
            add(read_glue_file(spec, path, "train"), f"{spec.name} train")
    if not sentences:
        raise CompressorError("general distillation needs unlabelled text: no training rows of "
                              f"{task.name} and no GLUE training file under {folder or '(no data dir)'}")
    if rows and rows < len(sentences):
        sentences = random.Random(seed).sample(sentences, rows)
    label = 0.0 if task.is_regression else 0
    examples = [Example((text,), label, f"general-{i}") for i, text in enumerate(sentences)]
    return Dataset(task, "general", examples, "unlabelled text of " + ", ".join(sources))
