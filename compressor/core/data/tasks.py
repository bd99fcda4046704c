"""Task registry: what each GLUE task looks like to the rest of the toolkit.

One ``TaskSpec`` per task keeps the facts that models (number of outputs),
readers (which split lives in which file) and metrics (what GLUE reports)
must agree on in one place. Label names are listed in the order the Hugging
Face ``glue`` datasets number them, so hub label ids and our ids coincide.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from compressor.core.errors import CompressorError

METRIC_NAMES = ("accuracy", "f1", "mcc", "pearson", "spearman")
_REGRESSION_METRICS = {"pearson", "spearman"}
_STD_SPLITS = {"train": "train.tsv", "dev": "dev.tsv", "test": "test.tsv"}


@dataclass(frozen=True)
class TaskSpec:
    name: str
    folder: str
    text_fields: tuple
    labels: tuple | None
    metrics: tuple
    # hash=False: a dict field would make the frozen dataclass unhashable.
    splits: dict = field(default_factory=dict, hash=False)

    @property
    def is_regression(self) -> bool:
        return self.labels is None

    @property
    def num_labels(self) -> int:
        """Model outputs: one score for regression, one logit per class otherwise."""
        return 1 if self.labels is None else len(self.labels)

    @property
    def main_metric(self) -> str:
        return self.metrics[0]

    @property
    def label_names(self) -> tuple | None:
        """The classes as people read them (``predict`` writes these): a GLUE task's names as the
        Hugging Face ``glue`` datasets give them (SST-2: negative, positive), else ``labels``."""
        if self.labels and TASKS.get(self.name) == self:
            return LABEL_NAMES.get(self.name, self.labels)
        return self.labels


def _spec(name, folder, text_fields, labels, metrics, splits=_STD_SPLITS) -> TaskSpec:
    return TaskSpec(name, folder, tuple(text_fields), labels, tuple(metrics), dict(splits))


_BIN = ("0", "1")
_ENT = ("entailment", "not_entailment")
TASKS: dict[str, TaskSpec] = {
    t.name: t
    for t in (
        _spec("sst2", "SST-2", ("sentence",), _BIN, ("accuracy",)),
        _spec("mrpc", "MRPC", ("sentence1", "sentence2"), _BIN, ("f1", "accuracy")),
        _spec("rte", "RTE", ("sentence1", "sentence2"), _ENT, ("accuracy",)),
        _spec("cola", "CoLA", ("sentence",), _BIN, ("mcc",)),
        _spec("stsb", "STS-B", ("sentence1", "sentence2"), None, ("pearson", "spearman")),
        _spec("wnli", "WNLI", ("sentence1", "sentence2"), _BIN, ("accuracy",)),
        _spec("qnli", "QNLI", ("question", "sentence"), _ENT, ("accuracy",)),
        _spec("qqp", "QQP", ("question1", "question2"), _BIN, ("f1", "accuracy")),
        _spec("mnli", "MNLI", ("premise", "hypothesis"), ("entailment", "neutral", "contradiction"),
              ("accuracy",), {"train": "train.tsv", "dev": "dev_matched.tsv", "test": "test_matched.tsv"}),
        _spec("mnli_mm", "MNLI", ("premise", "hypothesis"), ("entailment", "neutral", "contradiction"),
              ("accuracy",), {"train": "train.tsv", "dev": "dev_mismatched.tsv", "test": "test_mismatched.tsv"}),
    )
}

# the names behind GLUE's 0/1 label ids, in id order (the Hugging Face glue datasets' ClassLabel names)
LABEL_NAMES = {
    "sst2": ("negative", "positive"),
    "mrpc": ("not_equivalent", "equivalent"),
    "cola": ("unacceptable", "acceptable"),
    "wnli": ("not_entailment", "entailment"),
    "qqp": ("not_duplicate", "duplicate"),
}

_ALIASES = {
    "sst-2": "sst2", "sts-b": "stsb", "mnli-m": "mnli", "mnli_m": "mnli", "mnli-mm": "mnli_mm",
    "mnli_matched": "mnli", "mnli_mismatched": "mnli_mm",
}


def get_task(name: str | TaskSpec) -> TaskSpec:
    """Look a task up by the names people actually type (``SST-2``, ``mnli-mm``)."""
    if isinstance(name, TaskSpec):
        return name
    key = str(name).strip().lower()
    key = _ALIASES.get(key, key)
    if key not in TASKS:
        raise CompressorError(f"unknown task '{name}'; known tasks: {', '.join(TASKS)}")
    return TASKS[key]


def custom_task(name: str, text_fields, labels, metrics=None) -> TaskSpec:
    """A task for the user's own files; validated here so mistakes surface before training.

    ``labels=None`` means regression; ``labels=()`` means unlabelled (prediction only).
    ``metrics=None`` picks accuracy for classification, pearson/spearman for regression.
    """
    text_fields = tuple(text_fields)
    if not name or not str(name).strip():
        raise CompressorError("custom task needs a name")
    if len(text_fields) not in (1, 2) or not all(isinstance(f, str) and f for f in text_fields):
        raise CompressorError(f"task '{name}': needs 1 or 2 text field names, got {list(text_fields)}")
    if labels is not None:
        labels = tuple(str(x) for x in labels)
        if len(set(labels)) != len(labels):
            raise CompressorError(f"task '{name}': duplicate label names in {list(labels)}")
    if metrics is None:
        metrics = ("pearson", "spearman") if labels is None else ("accuracy",) if labels else ()
    metrics = tuple(metrics)
    bad = [m for m in metrics if m not in METRIC_NAMES]
    if bad:
        raise CompressorError(f"task '{name}': unknown metric(s) {', '.join(bad)}; known: {', '.join(METRIC_NAMES)}")
    if labels is None and set(metrics) - _REGRESSION_METRICS:
        raise CompressorError(f"task '{name}': regression tasks take only pearson/spearman, got {', '.join(metrics)}")
    if labels is not None and set(metrics) & _REGRESSION_METRICS:
        raise CompressorError(f"task '{name}': pearson/spearman need a regression task (labels=None)")
    if labels is not None and "f1" in metrics and len(labels) != 2:
        raise CompressorError(f"task '{name}': f1 is binary (positive class = label id 1) but there are {len(labels)} labels")
    return TaskSpec(str(name), str(name), text_fields, labels, metrics, {})
