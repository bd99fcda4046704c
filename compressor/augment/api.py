"""TinyBERT's task data augmentation (Jiao et al. 2020, Algorithm 1), and the rows it writes.

For every training row, ``copies`` copies; in each, every word is replaced with probability
``replace_rate`` by one of its ``candidates`` words, drawn at random. Each sentence of a pair
is augmented on its own (its own candidates, its own draws); stop-words and non-words
(punctuation, numbers, one-letter words) are kept. A copy's draws depend only on the seed, the
copy's number and the sentence, so the rows are the same on every run. The teacher's logits
label the copies (no labels); rows that share a sentence with a dev or held-out row are not
augmented, and a copy that turns into one is dropped.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import time
from dataclasses import replace
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from compressor.augment.candidates import EmbeddingNeighbours, MaskedLMCandidates, Span, masked_lm
from compressor.augment.config import AugmentConfig
from compressor.augment.stopwords import STOP_WORDS
from compressor.core.data import Dataset, Example, holdout, load_data
from compressor.core.data.augmented import (RECORD, ROWS, SPLIT, model_digest, read_record, rows_digest,
                                            write_augmented)
from compressor.core.errors import CompressorError
from compressor.core.progress import progress

_RUN = re.compile(r"\w+")
ALGORITHM = 1   # part of the digest: a change to how rows are made invalidates the sets kept


def word_spans(text: str) -> List[Span]:
    """The words of ``text`` that augmentation may replace: runs of letters (a run holding a
    digit or an underscore is no word), stop-words and one-letter words left out."""
    return [(m.start(), m.end()) for m in _RUN.finditer(text)
            if len(m.group()) > 1 and m.group().isalpha() and m.group().lower() not in STOP_WORDS]


def _cased(original: str, new: str) -> str:
    """``new`` in the case of ``original`` (ALL CAPS, Capitalised or as it is)."""
    if len(original) > 1 and original.isupper():
        return new.upper()
    if original[:1].isupper():
        return new[:1].upper() + new[1:]
    return new


def augment_text(text: str, spans: Sequence[Span], candidates: Sequence[Sequence[str]],
                 replace_rate: float, rng: random.Random) -> Tuple[str, int]:
    """One copy of ``text``: each word of ``spans`` replaced, with probability ``replace_rate``,
    by one of its ``candidates`` drawn at random (a word with none is kept). Returns the copy
    and how many words it replaced."""
    pieces, last, replaced = [], 0, 0
    for (start, end), words in zip(spans, candidates):
        if rng.random() >= replace_rate or not words:
            continue
        pieces += [text[last:start], _cased(text[start:end], rng.choice(list(words)))]
        last, replaced = end, replaced + 1
    pieces.append(text[last:])
    return "".join(pieces), replaced


def _rng(seed: int, copy: int, text: str) -> random.Random:
    return random.Random(f"{seed}|{copy}|{text}")


def augment_rows(dataset: Dataset, candidates, config: AugmentConfig, exclude: Sequence = ()
                 ) -> Tuple[List[Example], List[int], dict]:
    """``(copies, the row each copies, counts)`` for the rows of ``dataset``; ``candidates(sentences,
    spans)`` gives each word's candidates; rows that share a sentence with a row of ``exclude``
    (dev, held-out rows) are not augmented."""
    banned = {t for rows in exclude if rows is not None for ex in rows.examples for t in ex.texts}
    sources = [i for i, ex in enumerate(dataset.examples) if not any(t in banned for t in ex.texts)]
    sentences = list(dict.fromkeys(t for i in sources for t in dataset.examples[i].texts))
    spans = {t: word_spans(t) for t in sentences}
    found = {}
    chunk = 2048
    for start in progress(range(0, len(sentences), chunk), total=(len(sentences) + chunk - 1) // chunk,
                          desc="augment: candidates", unit="chunk"):
        part = sentences[start:start + chunk]
        found.update(zip(part, candidates(part, [spans[t] for t in part])))
    bare = {t: sum(1 for words in found[t] if not words) for t in sentences}
    short = {t: sum(1 for words in found[t] if 0 < len(words) < config.candidates) for t in sentences}
    rows, made_from = [], []
    words = replaced = dropped = without = fewer = 0
    for i in sources:
        ex = dataset.examples[i]
        for copy in range(config.copies):
            texts = []
            for text in ex.texts:
                new, n = augment_text(text, spans[text], found[text], config.replace_rate,
                                      _rng(config.seed, copy, text))
                texts.append(new)
                words, replaced, without = words + len(spans[text]), replaced + n, without + bare[text]
                fewer += short[text]
            if any(t in banned for t in texts):
                dropped += 1
                continue
            rows.append(Example(texts=tuple(texts), label=None, guid=f"{ex.guid}-aug{copy}"))
            made_from.append(i)
    return rows, made_from, {
        "source_rows": len(dataset), "augmented_from": len(sources),
        "skipped_rows": len(dataset) - len(sources), "dropped_copies": dropped, "rows": len(rows),
        "words": words, "replaced": replaced, "replaced_share": round(replaced / words, 4) if words else 0.0,
        "words_without_candidates": without, "words_with_fewer_candidates": fewer}


def digest(teacher_path: str, train_set: Dataset, config: AugmentConfig, exclude: Sequence = ()) -> str:
    """What an augmented set depends on: the teacher's files, the training rows, the rows kept
    out, the settings (and the masked LM's files)."""
    key = {"algorithm": ALGORITHM, "teacher": model_digest(teacher_path), "rows": rows_digest(train_set),
           "exclude": [rows_digest(rows) for rows in exclude if rows is not None],
           "settings": config.digest_settings(),
           "mlm_model": model_digest(config.mlm_model) if config.mlm_model else ""}
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]


def _copy_set(src: str, dst: str) -> None:
    """The rows and record of ``src`` into ``dst`` (hard links where the disk allows)."""
    os.makedirs(dst, exist_ok=True)
    for name in (ROWS, RECORD):   # the record last: a folder with a record is complete
        target = os.path.join(dst, name)
        if os.path.lexists(target):
            os.remove(target)
        try:
            os.link(os.path.join(src, name), target)
        except OSError:
            shutil.copyfile(os.path.join(src, name), target)


def _candidates(config: AugmentConfig, teacher, tokenizer, teacher_path: str, where: str, device):
    """The candidate source the settings ask for, its name, and its neighbour table's file."""
    found = None
    if config.source != "embedding":
        folder = config.mlm_model or teacher_path
        found = masked_lm(folder)
        if found is None and config.source == "mlm":
            raise CompressorError(f"source mlm: {folder} has no masked-LM head (its checkpoint holds no "
                                  "LM-head weights); give mlm_model a folder that has one, or use source "
                                  "embedding")
    if found is None:
        neighbours = EmbeddingNeighbours(teacher, tokenizer, config.candidates, cache_dir=where,
                                         keep_form=config.keep_form)
        return neighbours, "embedding", os.path.basename(neighbours.path or "") or neighbours.digest
    model, mlm_tokenizer = found
    return (MaskedLMCandidates(model, mlm_tokenizer, config.candidates, device,
                               max(1, config.batch_size // 8), config.max_length, keep_form=config.keep_form),
            "mlm", "")


def label_shares(train_set: Dataset, logits) -> dict:
    """For a classification task, each label's share of the training rows (their gold labels) and of
    the copies (the teacher's most likely label): a replacement that breaks a sentence can move
    the copies towards one class (CoLA: to "unacceptable"), which the student then learns."""
    task = train_set.task
    if task.is_regression or len(logits) == 0:
        return {}
    names = [str(label) for label in task.labels]

    def share(indices) -> Dict[str, float]:
        counts = np.bincount(np.asarray(indices, dtype=np.int64), minlength=len(names))
        return {name: round(float(c) / max(int(counts.sum()), 1), 4) for name, c in zip(names, counts)}

    gold = [ex.label for ex in train_set.examples if ex.label is not None]
    return {"label_share_training": share(gold),
            "label_share_copies": share(np.asarray(logits).argmax(axis=-1))}


def make_augmented(teacher_path: str, train_set: Dataset, config: AugmentConfig, out: str,
                   exclude: Sequence = (), log=None) -> dict:
    """Augment ``train_set`` into folder ``out`` (``augmented.jsonl`` and ``augment.json``),
    labelled by the teacher in ``teacher_path``; returns the record. A set already in ``out``
    (or in ``config.cache``) with the same digest is reused, not made again."""
    from compressor.core.device import resolve_device
    from compressor.core.io import versions
    from compressor.core.models import load_for_task
    from compressor.engine.scoring import predict_logits

    config.check()
    key = digest(teacher_path, train_set, config, exclude)
    kept = os.path.join(config.cache, key) if config.cache else None
    for where in (out, kept):
        found = read_record(where) if where else None
        if found is not None and found.get("digest") == key:
            if where != out:
                _copy_set(where, out)
            if log:
                log(f"augment: reusing the {found['rows']} augmented rows in {where} (same digest {key})")
            return {**found, "reused": os.path.abspath(where)}
    if os.path.isfile(os.path.join(out, RECORD)):
        os.remove(os.path.join(out, RECORD))   # its rows are about to be replaced
    start = time.perf_counter()
    device = resolve_device(config.device)
    teacher, tokenizer = load_for_task(teacher_path, train_set.task)
    teacher.eval().to(device)
    candidates, source, neighbours = _candidates(config, teacher, tokenizer, teacher_path,
                                                 config.cache or out, device)
    rows, made_from, counts = augment_rows(train_set, candidates, config, exclude)
    augmented = Dataset(train_set.task, SPLIT, rows, os.path.join(out, ROWS))
    logits = predict_logits(teacher, tokenizer, rows, config.max_length, config.batch_size, device,
                            precision=config.precision, desc="augment: teacher logits") if rows else []
    teacher.to("cpu")
    shares = label_shares(train_set, logits)
    record = {"digest": key, "task": train_set.task.name, "teacher": os.path.abspath(teacher_path)
              if os.path.isdir(teacher_path) else teacher_path,
              "teacher_digest": model_digest(teacher_path), "rows_digest": rows_digest(train_set),
              "data": train_set.source, **counts, "candidates_from": source,
              "mlm_model": config.mlm_model, "neighbours": neighbours, **shares,
              **config.digest_settings(), "time_s": round(time.perf_counter() - start, 2),
              "versions": versions()}
    write_augmented(out, augmented, logits, made_from, record)
    if kept:
        _copy_set(out, kept)
    if log:
        log(f"augment: {counts['rows']} rows from {counts['augmented_from']} training rows "
            f"({100 * counts['replaced_share']:.1f}% of words replaced; candidates: {source})")
    return record


def augment(model: str, out: str, config=None, task: Optional[str] = None, data_dir: Optional[str] = None,
            train_limit: Optional[int] = None, overwrite: bool = False, user_data=None, log=None,
            **settings) -> dict:
    """Augment the training rows of the task checkpoint ``model`` (the teacher, unless
    ``config.teacher`` names another folder to label the rows) into folder ``out``, which
    ``DistillConfig(augment=out)`` then trains on.

    ``config`` is an :class:`AugmentConfig` or a mapping (``{"copies": 20, "replace_rate": 0.4,
    "candidates": 15}``), keyword ``settings`` merged in. The training rows are those a
    distillation of ``model`` trains on (a teacher fine-tuned with ``--holdout`` keeps its held
    rows out); rows sharing a sentence with a dev or held-out row are not augmented. Running
    again into the same ``out`` reuses the rows when teacher, rows and settings are unchanged.
    Returns the record written to ``out/augment.json``.
    """
    from compressor.core.models import resolve_model
    from compressor.core.settings import config_from_dict
    from compressor.engine.scoring import _task_for
    from compressor.engine.teacher import resolve_teacher

    if config is None or isinstance(config, dict):
        config = config_from_dict(AugmentConfig, {**(config or {}), **settings}, what="augment")
    elif settings:
        config = replace(config, **settings)
    config.check()
    path = resolve_model(model)
    teacher_path = resolve_teacher(config.teacher, path, None)   # the model that labels the rows
    task_spec, _ = _task_for(path, task)
    if os.path.isdir(out) and os.listdir(out) and read_record(out) is None and not overwrite:
        raise CompressorError(f"output folder {out} holds other files and no {RECORD}; choose an empty "
                              "or new folder (or --overwrite)")
    train_set, held = holdout.training_and_held(task_spec, data_dir, train_limit, user_data, path)
    return make_augmented(teacher_path, train_set, config, out,
                          exclude=(dev_rows(task_spec, data_dir, user_data), held), log=log)


def dev_rows(task_spec, data_dir: Optional[str], user_data=None) -> Optional[Dataset]:
    """Every dev row (none where the data has no dev split): kept out of augmentation whatever
    part of them a run scores on."""
    try:
        return load_data(task_spec, "dev", data_dir, None, user_data)
    except CompressorError:
        return None
