"""Scoring a model on a task split, and labelling a user's file."""
from __future__ import annotations

import csv
import io
import os
import sys
import time
from typing import Optional, Sequence

import numpy as np
import torch

from compressor.core.batches import encode, iter_batches, to_device
from compressor.core.data import (TASKS, get_task, load_for_model, read_glue_file, read_user_file,
                                  recorded_data, task_from_dict)
from compressor.core.device import autocast, resolve_device
from compressor.core.errors import CompressorError
from compressor.core.io import read_json, versions, write_json, write_text
from compressor.core.loaders import kind_of
from compressor.core.metrics import chance_warning, compute_metrics, majority_baseline, task_score
from compressor.core.models import load_for_task, read_meta, resolve_model
from compressor.core.progress import progress

DEFAULT_MAX_LENGTH = 128


@torch.no_grad()
def predict_logits(model, tokenizer, examples: Sequence, max_length: int, batch_size: int = 64,
                   device: Optional[torch.device] = None, precision: str = "fp32",
                   desc: Optional[str] = None, batching: str = "sorted") -> np.ndarray:
    """Logits for ``examples`` in input order (regression: shape ``[n]``). ``batching``
    (``compressor.core.batches.length_groups``): ``sorted``, the default, batches rows of like
    length so almost no padding is computed; ``padded`` keeps input order, each batch padded
    to its longest row. The logits are the same either way, within float rounding."""
    device = device or next(model.parameters(), torch.empty(0)).device  # no parameters: an ONNX graph
    items = encode(tokenizer, examples, max_length, model.config)
    regression = model.config.num_labels == 1
    out = np.zeros((len(items), model.config.num_labels), dtype=np.float32)
    was_training = model.training
    model.eval()
    batches = iter_batches(items, batch_size, tokenizer.pad_token_id or 0, regression, batching=batching)
    total = (len(items) + batch_size - 1) // batch_size
    for batch in progress(batches, total=total, desc=desc, unit="batch"):
        order = batch["order"].numpy()
        inputs = to_device(batch, device)
        inputs.pop("labels", None)
        with autocast(device, precision):
            logits = model(**inputs).logits
        out[order] = logits.float().cpu().numpy()
    model.train(was_training)
    return out[:, 0] if regression else out


def predictions_from_logits(logits: np.ndarray, regression: bool) -> np.ndarray:
    return logits if regression else logits.argmax(-1)


def score(model, tokenizer, dataset, max_length: int, batch_size: int = 64,
          device: Optional[torch.device] = None, desc: Optional[str] = None) -> dict:
    """The task's GLUE metrics on a labelled dataset."""
    _require_labels(dataset)
    logits = predict_logits(model, tokenizer, dataset.examples, max_length, batch_size, device,
                            desc=desc)
    preds = predictions_from_logits(logits, dataset.task.is_regression)
    return compute_metrics(dataset.task, preds, [ex.label for ex in dataset.examples])


def chance_check(record: dict, dev_set, say=None, score: Optional[float] = None,
                 prefix: str = "") -> Optional[str]:
    """Warn when ``record``'s dev score (or ``score``: a teacher's, say, with a ``prefix`` saying
    so) is at or below the majority-class baseline of ``dev_set``
    (:func:`compressor.core.metrics.chance_warning`): the line is printed (``say``, else stderr)
    and added to ``record["warnings"]``, which the record's JSON and the recipe report keep."""
    score = record.get("score") if score is None else score
    if score is None or dev_set is None or not dev_set.labelled:
        return None
    line = chance_warning(dev_set.task, score, [ex.label for ex in dev_set.examples])
    if line:
        if not prefix:   # the model itself: later stages say they start from it
            record["at_chance"] = round(majority_baseline(dev_set.task, [ex.label for ex in dev_set.examples])[0], 2)
        line = prefix + line
        warnings = record.setdefault("warnings", [])
        if line not in warnings:
            warnings.append(line)
        (say or (lambda msg: print(msg, file=sys.stderr, flush=True)))(f"warning: {line}")
    return line


def _require_labels(dataset) -> None:
    if not dataset.labelled:
        raise CompressorError(f"{dataset.source} has no labels ({dataset.split} split): "
                              "it can be predicted, not scored")


def _task_for(model_path: str, task: Optional[str]):
    """The task named, else the one the checkpoint says it was trained on (custom ones too)."""
    meta = read_meta(model_path) if os.path.isdir(model_path) else {}
    if not meta.get("task") and kind_of(model_path) == "onnx":  # an export written before its compressor.json
        manifest = read_json(os.path.join(model_path, "manifest.json"))
        if not isinstance(manifest, dict):
            raise CompressorError(f"{model_path}/manifest.json is not a JSON object; export the model again")
        meta = {k: manifest[k] for k in ("task", "task_spec", "max_length") if manifest.get(k)}
    if task:
        return get_task(task), meta
    if meta.get("task_spec"):
        return task_from_dict(meta["task_spec"]), meta
    if meta.get("task"):
        return get_task(meta["task"]), meta
    raise CompressorError(f"{model_path} does not say which task it was trained on; pass --task")


def evaluate(model: str, task: Optional[str] = None, split: str = "dev",
             data_dir: Optional[str] = None, limit: Optional[int] = None, batch_size: int = 64,
             max_length: Optional[int] = None, device: str = "auto",
             out: Optional[str] = None, input: Optional[str] = None,
             text_columns: Optional[Sequence[str]] = None, label_column: Optional[str] = None) -> dict:
    """Score a checkpoint on a task split, or on a labelled file of the user's (``input``).

    Every kind of folder the toolkit writes is scored on this one path; an ONNX
    export runs in onnxruntime, one sentence at a time, as ``quantize`` and
    ``bench`` score graphs. The record is returned, and written to ``out`` (JSON) when given.
    """
    path = resolve_model(model)
    task_spec, meta = _task_for(path, task)
    max_length = max_length or meta.get("max_length", DEFAULT_MAX_LENGTH)
    if input:
        recorded = recorded_data(path, task_spec)   # a model trained on the user's files
        label_column = label_column or (recorded.label_column if recorded else "label")
        dataset = read_user_file(input, list(text_columns or task_spec.text_fields), label_column,
                                 task=task_spec, split="user", limit=limit)
        split = "user"
    else:   # a model trained on the user's files: the file its compressor.json records
        dataset = load_for_model(path, task_spec, split, data_dir, limit)
    dev = resolve_device(device)
    net, tokenizer = load_for_task(path, task_spec, pytorch=False)
    net.to(dev)
    start = time.perf_counter()
    metrics = score(net, tokenizer, dataset, max_length, batch_size, dev,
                    desc=f"eval {task_spec.name}/{split}")
    record = {
        "model": os.path.abspath(path) if os.path.isdir(path) else path,
        "task": task_spec.name, "split": split, "metrics": metrics,
        "score": task_score(task_spec, metrics), "examples": len(dataset),
        "data": dataset.source, "max_length": max_length,
        "engine": getattr(net, "engine", "pytorch"),
        "wall_time_s": round(time.perf_counter() - start, 3), "versions": versions(),
    }
    if out:
        write_json(out, record)
        record["written_to"] = os.path.abspath(out)
    return record


def predict(model: str, input: str, output: str, task: Optional[str] = None,
            text_columns: Optional[Sequence[str]] = None, batch_size: int = 64,
            max_length: Optional[int] = None, device: str = "auto", probabilities: bool = False) -> dict:
    """Label every row of ``input`` and write ``index<TAB>prediction`` rows to ``output``.

    A GLUE file (a test split included) is read with the task's own layout;
    any other TSV/CSV/JSONL file needs ``text_columns`` (for a model trained on the user's
    own files, the columns it was trained on are the default). Predictions are the task's
    label names (SST-2: negative/positive; the user's own labels); ``probabilities`` adds one
    column per class. A row with no text gets an empty prediction; ``empty_rows`` lists them.
    """
    path = resolve_model(model)
    task_spec, meta = _task_for(path, task)
    check_probabilities(task_spec, probabilities)
    max_length = max_length or meta.get("max_length", DEFAULT_MAX_LENGTH)
    dataset = read_rows_to_label(input, task_spec, text_columns, output=output)
    rows, empty = split_empty(dataset.examples)
    dev = resolve_device(device)
    net, tokenizer = load_for_task(path, task_spec, pytorch=False)
    net.to(dev)
    logits = predict_logits(net, tokenizer, [dataset.examples[i] for i in rows], max_length,
                            batch_size, dev, desc="predict") if rows else None
    labels, probs = label_rows(task_spec, logits, rows, len(dataset.examples), probabilities)
    write_predictions(output, dataset.examples, labels, input=input, probabilities=probs,
                      names=task_spec.label_names)
    return {"input": input, "output": os.path.abspath(output), "rows": len(labels),
            "task": task_spec.name, "empty_rows": [dataset.examples[i].guid for i in empty]}


def check_probabilities(task_spec, probabilities: bool) -> None:
    if probabilities and task_spec.is_regression:
        raise CompressorError(f"task {task_spec.name} predicts a score (regression): it has no class "
                              "probabilities; leave out --probabilities")


def split_empty(examples: Sequence) -> tuple:
    """``(rows to label, empty rows)``: indices; a row whose every text is blank is not labelled."""
    empty = [i for i, ex in enumerate(examples) if not any(str(t).strip() for t in ex.texts)]
    skip = set(empty)
    return [i for i in range(len(examples)) if i not in skip], empty


def label_rows(task_spec, logits: Optional[np.ndarray], rows: Sequence[int], n: int,
               probabilities: bool = False) -> tuple:
    """``(labels, probabilities)`` for ``n`` rows from the ``logits`` of ``rows`` (the others: None):
    a label name per row (a float for regression), and with ``probabilities`` each class's
    softmax probability (else None)."""
    labels, probs = [None] * n, ([None] * n if probabilities else None)
    if logits is None or not len(rows):
        return labels, probs
    logits = np.asarray(logits, dtype=np.float64)
    if task_spec.is_regression:
        values = logits.reshape(len(rows), -1)[:, 0]
        for i, v in zip(rows, values):
            labels[i] = float(v)
        return labels, probs
    names = task_spec.label_names
    e = np.exp(logits - logits.max(-1, keepdims=True))
    p = e / e.sum(-1, keepdims=True)
    for i, row in zip(rows, p):
        labels[i] = names[int(row.argmax())]
        if probs is not None:
            probs[i] = [float(x) for x in row]
    return labels, probs


def read_rows_to_label(input: str, task_spec, text_columns: Optional[Sequence[str]] = None,
                       output: Optional[str] = None):
    """The rows of a file to label: a GLUE file in its task's layout, or a user's file by columns.

    Every row is kept, an empty text too, so the predictions line up with the input row
    for row. ``output``, when given, is checked first (:func:`check_output`).
    """
    if not os.path.isfile(input):
        raise CompressorError(f"input file not found: {input}")
    if output is not None:
        check_output(input, output)
    if text_columns or task_spec.name not in TASKS or not input.lower().endswith(".tsv"):
        # the user's own file (CSV, JSONL, or a TSV with --text-column): columns by name
        dataset = read_user_file(input, list(text_columns or task_spec.text_fields), task=task_spec)
    else:
        split = "test" if os.path.basename(input).startswith("test") else "dev"
        dataset = read_glue_file(task_spec, input, split, to_label=True)
    if len(dataset.examples) == 0:
        raise CompressorError(f"{input} holds no rows to predict")
    if len(dataset.examples[0].texts) != len(task_spec.text_fields):
        raise CompressorError(f"{input}: task {task_spec.name} takes {len(task_spec.text_fields)} "
                              f"text column(s), got {len(dataset.examples[0].texts)}")
    return dataset


PREDICTIONS_HEADER = "index\tprediction"


def check_output(input: str, output: str) -> None:
    """Refuse to write predictions over the input file (by any path to it), or over any
    existing file that is not a predictions file (a user's own file is never overwritten)."""
    if not os.path.lexists(output):
        return
    if os.path.exists(input) and os.path.exists(output) and os.path.samefile(input, output):
        raise CompressorError(f"--output {output} is the input file; write the predictions to another file")
    try:
        with open(output, encoding="utf-8", errors="replace") as f:
            first = f.readline().rstrip("\r\n")
    except OSError:
        first = None
    if first != PREDICTIONS_HEADER and not (first or "").startswith(PREDICTIONS_HEADER + "\t"):
        raise CompressorError(f"--output {output} already exists and is not a predictions file "
                              "(index<TAB>prediction); choose another name or delete it")


def write_predictions(output: str, examples: Sequence, labels: Sequence, input: Optional[str] = None,
                      probabilities: Optional[Sequence] = None, names: Optional[Sequence[str]] = None) -> None:
    """``index<TAB>prediction`` rows, written whole or not at all (scores with 3 decimals); a
    label None (an empty row) is an empty cell. ``probabilities`` (a list per row, or None) add
    one ``p_NAME`` column per class of ``names`` (4 decimals).

    With ``input``, :func:`check_output` guards the file first."""
    if input is not None:
        check_output(input, output)
    buf = io.StringIO()
    writer = csv.writer(buf, delimiter="\t", lineterminator="\n")
    header = PREDICTIONS_HEADER.split("\t")
    if probabilities is not None:
        header += [f"p_{name}" for name in names]
    writer.writerow(header)
    for i, (ex, label) in enumerate(zip(examples, labels)):
        row = [ex.guid, "" if label is None else f"{label:.3f}" if isinstance(label, float) else label]
        if probabilities is not None:
            row += [f"{p:.4f}" for p in probabilities[i]] if probabilities[i] is not None else [""] * len(names)
        writer.writerow(row)
    write_text(output, buf.getvalue())


SCORE_CACHE_ENV = "COMPRESSOR_SCORE_CACHE"


def scored_before(model_dir: str, dataset, max_length: int, device, compute):
    """``compute()`` (a metrics dict), or the metrics an earlier call kept for the same model
    files, rows, length and device kind, when ``$COMPRESSOR_SCORE_CACHE`` names a folder (opt
    in: a machine running many recipes on one teacher scores it once). The key hashes every
    file of ``model_dir`` and every row, so a changed model or slice is scored afresh."""
    import hashlib
    import json

    from compressor.core.data.readers import hash_rows
    from compressor.core.guard import digest_files

    folder = os.environ.get(SCORE_CACHE_ENV)
    if not folder or not os.path.isdir(model_dir):
        return compute()
    h = hashlib.sha256(f"{max_length}|{torch.device(device).type}|{dataset.task.name}".encode())
    h.update(json.dumps(digest_files(model_dir, skip=()), sort_keys=True).encode())
    hash_rows(h, dataset.examples)
    path = os.path.join(folder, h.hexdigest()[:32] + ".json")
    if os.path.isfile(path):
        try:
            with open(path) as f:
                return json.load(f)["metrics"]
        except (OSError, ValueError, KeyError):
            pass                                  # unreadable: score again and rewrite it
    metrics = compute()
    try:
        os.makedirs(folder, exist_ok=True)
        write_json(path, {"model": os.path.abspath(model_dir), "rows": len(dataset), "metrics": metrics})
    except OSError:
        pass                                      # a cache that cannot be written costs a rescore only
    return metrics
