"""The user's own labelled files standing in for a GLUE task.

The task (its labels, or regression) is read off the training file, saved
with every checkpoint trained on it, and applied unchanged to the dev file,
so a label that appears only in dev is reported with its file and line.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

from compressor.core.data.readers import Dataset, read_user_file
from compressor.core.data.tasks import TASKS, TaskSpec, custom_task
from compressor.core.errors import CompressorError


@dataclass(frozen=True)
class UserData:
    train: Optional[str]
    dev: Optional[str]
    text_columns: tuple
    label_column: str
    name: Optional[str] = None

    def task(self) -> TaskSpec:
        source = self.train or self.dev
        if not source:
            raise CompressorError("give a training file (--train-file) or a dev file (--dev-file)")
        inferred = read_user_file(source, list(self.text_columns), self.label_column).task
        name = self.name or os.path.splitext(os.path.basename(source))[0]
        return custom_task(name, inferred.text_fields, inferred.labels)

    def load(self, task: TaskSpec, split: str, limit: Optional[int] = None) -> Dataset:
        path = {"train": self.train, "dev": self.dev}.get(split)
        if not path:
            flag = {"train": "--train-file", "dev": "--dev-file"}.get(split)
            raise CompressorError(f"no {split} file was given" + (f" ({flag})" if flag else ""))
        return read_user_file(path, list(self.text_columns), self.label_column, task=task,
                              split=split, limit=limit)


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
