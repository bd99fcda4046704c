"""GLUE metrics, computed the way the leaderboard does so numbers are comparable.

Values are fractions (accuracy 0.91, not 91); only the summary scores
(``task_score``, ``glue_score``) are x100, as papers and the leaderboard print them.
"""

from __future__ import annotations

import math
import warnings
from typing import Optional

import numpy as np
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from compressor.core.data.tasks import TaskSpec, get_task
from compressor.core.errors import CompressorError


def _vector(values, name: str, regression: bool) -> np.ndarray:
    a = np.asarray(values)
    if a.dtype == object and any(v is None for v in a.ravel()):
        raise CompressorError(f"cannot score: {name} contain missing labels (an unlabelled test split?)")
    try:
        a = a.astype(float)
    except (TypeError, ValueError):
        raise CompressorError(f"cannot score: {name} are not numbers") from None
    if a.ndim == 2 and a.shape[1] == 1:
        a = a[:, 0]
    if a.ndim != 1:
        raise CompressorError(f"cannot score: {name} have shape {a.shape}; expected one "
                              f"{'score' if regression else 'class id'} per example")
    if regression:
        return a
    if not np.all(np.isfinite(a) & (a == np.round(a))):
        raise CompressorError(f"cannot score: {name} must be class ids (whole numbers), not scores or probabilities")
    return a.astype(np.int64)


def _corr(fn, x: np.ndarray, y: np.ndarray) -> float:
    # A constant side (e.g. a collapsed student) has no correlation: report 0, not nan.
    if len(x) < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = float(fn(x, y)[0])
    return 0.0 if math.isnan(r) else r


def compute_metrics(task: TaskSpec | str, predictions, references) -> dict[str, float]:
    """Score predictions against references with the task's GLUE metrics only."""
    task = get_task(task)
    p = _vector(predictions, "predictions", task.is_regression)
    r = _vector(references, "references", task.is_regression)
    if len(p) == 0:
        raise CompressorError(f"cannot score {task.name}: no examples")
    if len(p) != len(r):
        raise CompressorError(f"cannot score {task.name}: {len(p)} predictions for {len(r)} references")
    out: dict[str, float] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # sklearn warns on degenerate (constant) inputs; values stay defined
        for m in task.metrics:
            if m == "accuracy":
                out[m] = float(accuracy_score(r, p))
            elif m == "f1":
                out[m] = float(f1_score(r, p, average="binary", pos_label=1, zero_division=0))
            elif m == "mcc":
                out[m] = float(matthews_corrcoef(r, p))
            elif m == "pearson":
                out[m] = _corr(pearsonr, p, r)
            elif m == "spearman":
                out[m] = _corr(spearmanr, p, r)
            else:
                raise CompressorError(f"task {task.name}: unknown metric '{m}'")
    return out


def task_score(task: TaskSpec | str, metrics: dict) -> float:
    """One number per task, x100: GLUE averages a task's metrics (MRPC: F1 and accuracy)."""
    task = get_task(task)
    missing = [m for m in task.metrics if m not in metrics]
    if missing:
        raise CompressorError(f"task {task.name}: metrics lack {', '.join(missing)} (have: {', '.join(metrics) or 'none'})")
    return 100.0 * sum(float(metrics[m]) for m in task.metrics) / len(task.metrics)


def glue_score(per_task: dict[str, dict]) -> float:
    """Unweighted mean of ``task_score`` over the tasks given, x100.

    MNLI matched and mismatched are first averaged into a single MNLI entry, so
    MNLI counts once as on the leaderboard's single MNLI column; if only one of
    them is given it stands for MNLI alone. Tasks left out simply don't count:
    a score over a subset of GLUE is not comparable to the full benchmark.
    """
    if not per_task:
        raise CompressorError("cannot compute a GLUE score: no task results")
    scores: dict[str, list[float]] = {}
    for name, metrics in per_task.items():
        task = get_task(name)
        key = "mnli" if task.name in ("mnli", "mnli_mm") else task.name
        scores.setdefault(key, []).append(task_score(task, metrics))
    return sum(sum(v) / len(v) for v in scores.values()) / len(scores)


# A regression model whose Pearson/Spearman mean is at or below this (x100) predicts nothing usable.
REGRESSION_CHANCE = 5.0


def majority_baseline(task: TaskSpec | str, references) -> tuple[float, str]:
    """The task score (x100) that needs no model, and what gives it: always predicting the
    references' most frequent label (classification: its share, for accuracy), or, for
    regression, a correlation of :data:`REGRESSION_CHANCE` / 100."""
    task = get_task(task)
    if task.is_regression:
        return REGRESSION_CHANCE, f"a correlation of {REGRESSION_CHANCE / 100:g}"
    r = _vector(references, "references", False)
    if len(r) == 0:
        raise CompressorError(f"cannot score {task.name}: no examples")
    values, counts = np.unique(r, return_counts=True)
    majority = int(values[np.argmax(counts)])
    baseline = task_score(task, compute_metrics(task, np.full(len(r), majority), r))
    name = task.labels[majority] if task.labels and 0 <= majority < len(task.labels) else majority
    return baseline, f"always predicting {name!r}, the dev set's most frequent label"


def chance_warning(task: TaskSpec | str, score: Optional[float], references) -> Optional[str]:
    """One line when ``score`` (x100, :func:`task_score`) is at or below the majority-class
    baseline of ``references`` (a model that learned nothing usable), else None."""
    if score is None or references is None or not len(references):
        return None
    task = get_task(task)
    baseline, how = majority_baseline(task, references)
    if score > baseline + 1e-9:
        return None
    return (f"{task.name} dev score {score:.2f} is at or below the majority-class baseline "
            f"{baseline:.2f} ({how}): the model is at chance; check the learning rate, the data "
            "and the checkpoint before compressing it")
