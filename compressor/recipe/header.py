"""The recipe header: what a recipe says besides its stages, as a typed config.

:class:`RecipeHeader` is built by :func:`compressor.core.settings.build` like a stage's
settings, so an unknown key or a value of the wrong type gets the same message, at its line,
and the settings reference (docs/hooks.py) lists the header's keys from these dataclasses.
What depends on more than one key (the task, your own files, a missing teacher) is checked by
``compressor.recipe.schema`` once the header is built.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Tuple, Union

from compressor.core.settings import Problem, build, setting
from compressor.core.settings import device as device_setting
from compressor.engine.train_config import TrainConfig


def _positive_count(value, name, config=None) -> Optional[str]:
    if value is not None and value <= 0:
        return f"{name} must be a positive integer, got {value!r}"
    return None


def _model(value, name, config=None) -> Optional[str]:
    if not value:
        return f"{name} must name a checkpoint folder, alias or hub id"
    return None


def _stages(value, name, config=None) -> Optional[str]:
    if not isinstance(value, list):
        return "stages must be a list, one '- name: {settings}' per stage"
    return None


@dataclass
class DataSettings:
    """Where the rows come from: a GLUE task's folder, or your own files (``train_file`` with
    ``text_columns``; their task is then yours, named by ``task``)."""

    dir: Optional[str] = None        # a GLUE folder, or embedded (the SST-2 slice in the package); default --data-dir / GLUE_DIR
    train_limit: Optional[int] = setting(None, check=_positive_count)   # the first N training rows only
    dev_limit: Optional[int] = setting(None, check=_positive_count)     # the first N dev rows only
    train_file: Optional[str] = None   # your own training rows (CSV, TSV or JSON lines)
    dev_file: Optional[str] = None     # your own dev rows
    text_columns: Optional[Union[str, List[str]]] = None   # the 1 or 2 text columns of your files
    label_column: str = "label"        # the label column of your files

    def __post_init__(self):
        if isinstance(self.text_columns, str):
            self.text_columns = [self.text_columns]


@dataclass
class TeacherSettings:
    """The model to compress: a task checkpoint (``model`` alone, or ``teacher: PATH``), or a base
    model fine-tuned on the task first with ``finetune``'s training settings."""

    model: str = setting("", check=_model)   # checkpoint folder, alias or hub id
    finetune: Optional[TrainConfig] = None   # fine-tune model first with these training settings (the finetune stage's; device and seed default to the recipe's); empty: all defaults


@dataclass
class RecipeHeader:
    """What a recipe says besides its stages: the task, the data, the teacher and the defaults
    of every stage (``device``, ``seed``)."""

    name: Optional[str] = None       # the run's name; default: the file's name
    description: str = ""            # what the recipe does, for the report
    task: Optional[str] = None       # sst2 mrpc rte cola stsb wnli qnli qqp mnli mnli_mm, or the name of your files' task
    data: DataSettings = field(default_factory=DataSettings)
    teacher: TeacherSettings = field(default_factory=TeacherSettings)
    device: str = setting("auto", check=device_setting)   # every stage's device unless it sets its own
    seed: int = 42                   # every stage's seed unless it sets its own
    stages: list = setting(default_factory=list, check=_stages)   # run in order, one '- name: {settings}' each (the stages below)


def build_header(doc: dict, device_override: Optional[str] = None,
                 teacher_override: Optional[str] = None) -> Tuple[RecipeHeader, List[Problem]]:
    """``(header, problems)`` of a recipe mapping, each problem with its path of keys.

    A teacher given as a plain path is ``{model: PATH}``; an empty ``finetune:`` fine-tunes with
    the defaults. ``device_override`` and ``teacher_override`` (the command line's) replace the
    file's own, which are then not read. The header holds every legal value even where others
    are wrong (defaults in their place), so the checks that follow can still run."""
    values = dict(doc)
    if device_override is not None:
        values.pop("device", None)
    if teacher_override is not None:
        values["teacher"] = {"model": teacher_override}
    problems: List[Problem] = []
    teacher = values.get("teacher")
    if teacher is None:
        values.pop("teacher", None)   # said by the recipe check: missing 'teacher'
    elif isinstance(teacher, str):
        values["teacher"] = {"model": teacher}
    elif isinstance(teacher, dict):
        if "finetune" in teacher and teacher["finetune"] is None:
            values["teacher"] = {**teacher, "finetune": {}}
    else:
        problems.append((("teacher",), "recipe: teacher must be a checkpoint path or a mapping with "
                                       "model and finetune"))
        values.pop("teacher")
    header, found = build(RecipeHeader, values, (), "recipe", "")
    if header is None:
        header = RecipeHeader()
    if not isinstance(header.stages, list):
        header.stages = []
    finetune = header.teacher.finetune
    given = (values.get("teacher") or {}).get("finetune") or {}
    if finetune is not None:   # the recipe's device and seed, unless fine-tuning sets its own
        recipe_wide = {"device": device_override or header.device, "seed": header.seed}
        for key, value in recipe_wide.items():
            if key not in given:
                setattr(finetune, key, value)
    return header, problems + found
