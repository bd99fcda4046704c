"""The user's own labelled files standing in for a GLUE task.

The task (its labels, or regression) is read off the training file, saved
with every checkpoint trained on it, and applied unchanged to the dev file,
so a label that appears only in dev is reported with its file and line.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, replace
from typing import Optional

from compressor.core.data.readers import Dataset, read_user_file
from compressor.core.data.tasks import TASKS, TaskSpec, custom_task
from compressor.core.errors import CompressorError
from compressor.core.guard import file_sha256


@dataclass(frozen=True)
class UserData:
    train: Optional[str]
    dev: Optional[str]
    text_columns: tuple
    label_column: str
    name: Optional[str] = None
    # the digests a checkpoint's compressor.json records for these files, and that folder
    train_sha256: Optional[str] = None
    dev_sha256: Optional[str] = None
    recorded_in: Optional[str] = None

    def task(self) -> TaskSpec:
        source = self.train or self.dev
        if not source:
            raise CompressorError("give a training file (--train-file) or a dev file (--dev-file)")
        inferred = read_user_file(source, list(self.text_columns), self.label_column).task
        return custom_task(self.name or default_task_name(self.label_column),
                           inferred.text_fields, inferred.labels)

    def load(self, task: TaskSpec, split: str, limit: Optional[int] = None) -> Dataset:
        path = {"train": self.train, "dev": self.dev}.get(split)
        if not path:
            flag = {"train": "--train-file", "dev": "--dev-file"}.get(split)
            raise CompressorError(f"no {split} file was given" + (f" ({flag})" if flag else ""))
        self._check_recorded(split, path)
        return read_user_file(path, list(self.text_columns), self.label_column, task=task,
                              split=split, limit=limit)

    def _check_recorded(self, split: str, path: str) -> None:
        """A file the checkpoint records: gone is one line, changed is one warning line."""
        digest = {"train": self.train_sha256, "dev": self.dev_sha256}.get(split)
        if not digest:
            return
        where = f"{self.recorded_in}/{META_NAME}" if self.recorded_in else "the checkpoint"
        if not os.path.isfile(path):
            raise CompressorError(f"the {split} file {path} that {where} records is gone (moved or "
                                  f"deleted); give its new path with --{split}-file"
                                  + (" (eval: --input)" if split == "dev" else ""))
        if file_sha256(path) != digest and path not in _WARNED:
            _WARNED.add(path)
            print(f"warning: {path} has changed since {where} recorded it (sha256 differs); "
                  "using it as it is now", file=sys.stderr)


META_NAME = "compressor.json"   # compressor.core.loaders.META_FILE
DATA_FILES = "data_files"       # its entry for the user's files
_WARNED: set = set()
# label columns too generic to name a task after
_GENERIC_LABELS = ("label", "labels", "target", "class", "y")


def default_task_name(label_column: Optional[str]) -> str:
    """The name of an own-file task nobody named: its label column, unless that says nothing."""
    name = str(label_column or "").strip()
    return name if name and name.lower() not in _GENERIC_LABELS and name not in TASKS else "custom"


def data_meta(user_data: Optional[UserData]) -> dict:
    """What ``compressor.json`` records of the user's files (absolute path and sha256 of each,
    the columns), so later commands need not be told them; nothing for GLUE data."""
    if user_data is None:
        return {}
    files = {}
    for split, path in (("train", user_data.train), ("dev", user_data.dev)):
        if path and os.path.isfile(path):
            files[split] = {"path": os.path.abspath(path), "sha256": file_sha256(path)}
    if not files:
        return {}
    return {DATA_FILES: {**files, "text_columns": list(user_data.text_columns),
                         "label_column": user_data.label_column}}


def recorded_data(model_path: Optional[str], task: Optional[TaskSpec] = None) -> Optional[UserData]:
    """The user's files the checkpoint ``model_path`` was trained on (its ``compressor.json``),
    when it records them and ``task`` (if given) is the task it was trained on."""
    from compressor.core.loaders import read_meta

    if not model_path or not os.path.isdir(model_path):
        return None
    meta = read_meta(model_path)
    record = meta.get(DATA_FILES)
    if not isinstance(record, dict) or (task is not None and meta.get("task") != task.name):
        return None
    file = os.path.join(model_path, META_NAME)
    try:
        entries = {s: record.get(s) or {} for s in ("train", "dev")}
        columns = tuple(str(c) for c in record["text_columns"])
        label = str(record["label_column"])
        paths = {s: (str(e["path"]) if e.get("path") else None) for s, e in entries.items()}
    except (KeyError, TypeError, AttributeError):
        raise CompressorError(f"{file}: its {DATA_FILES} entry is damaged; pass --train-file, "
                              "--dev-file and --text-column") from None
    return UserData(paths["train"], paths["dev"], columns, label, meta.get("task"),
                    entries["train"].get("sha256"), entries["dev"].get("sha256"), model_path)


def data_for(model_path: Optional[str], task: Optional[TaskSpec], given: Optional[UserData] = None
             ) -> Optional[UserData]:
    """The user's files for work on ``model_path``: those given (``--train-file``...), what they
    leave out filled in from what the checkpoint records, or the recorded ones alone."""
    recorded = recorded_data(model_path, task)
    if given is None:
        return recorded
    if recorded is None:
        if not (given.train or given.dev):
            return None
        if not given.text_columns:
            raise CompressorError("your own files need --text-column (twice for sentence pairs)")
        return given if given.label_column else replace(given, label_column="label")

    def pick(split):
        path = getattr(given, split)
        if not path:
            return getattr(recorded, split), getattr(recorded, f"{split}_sha256")
        same = getattr(recorded, split) and os.path.abspath(path) == getattr(recorded, split)
        return path, (getattr(recorded, f"{split}_sha256") if same else None)

    (train, train_sha), (dev, dev_sha) = pick("train"), pick("dev")
    return UserData(train, dev, tuple(given.text_columns) or recorded.text_columns,
                    given.label_column or recorded.label_column, recorded.name,
                    train_sha, dev_sha, recorded.recorded_in)


def load_for_model(model_path: Optional[str], task: TaskSpec, split: str, data_dir: Optional[str] = None,
                   limit: Optional[int] = None, user_data: Optional[UserData] = None) -> Dataset:
    """A split for work on ``model_path``: of the files given or that its ``compressor.json``
    records (:func:`data_for`), else of the GLUE task."""
    return load_data(task, split, data_dir, limit, data_for(model_path, task, user_data))


def task_to_dict(task: TaskSpec) -> dict:
    return {"name": task.name, "text_fields": list(task.text_fields),
            "labels": list(task.labels) if task.labels is not None else None,
            "metrics": list(task.metrics)}


def task_from_dict(spec: dict) -> TaskSpec:
    """A GLUE task by name, or the custom task a checkpoint was trained on."""
    if spec["name"] in TASKS:
        return TASKS[spec["name"]]
    return custom_task(spec["name"], spec["text_fields"], spec["labels"], spec["metrics"])


def load_data(task: TaskSpec, split: str, data_dir: Optional[str] = None,
              limit: Optional[int] = None, user_data: Optional[UserData] = None) -> Dataset:
    """A split of the user's files when given, else of the GLUE task."""
    from compressor.core.data.readers import load_split

    if user_data is not None:
        return user_data.load(task, split, limit)
    return load_split(task, split, data_dir=data_dir, limit=limit)
