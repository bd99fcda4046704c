"""What a recipe file may say, checked with the line of every problem."""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from typing import List, Optional

from compressor.core.data import UserData, get_task
from compressor.core.errors import CompressorError
from compressor.engine.train import TrainConfig
from compressor.core.settings import SettingsError, config_from_dict, device_problem
from compressor.core.registry import TRAINABLE, get_stage
from compressor.recipe.yamlfile import LineDict, LineList, load_yaml, parse_yaml

TOP_KEYS = ("name", "description", "task", "data", "teacher", "device", "seed", "stages")
DATA_KEYS = ("dir", "train_limit", "dev_limit", "train_file", "dev_file", "text_columns",
             "label_column")
TEACHER_KEYS = ("model", "finetune")


@dataclass
class StageSpec:
    position: int                 # 1-based place in the stage list
    name: str
    config: object
    line: int

    @property
    def dirname(self) -> str:
        return f"{self.position:02d}-{self.name}"


@dataclass
class Recipe:
    source: str
    name: str
    task: object
    teacher_model: str
    teacher_finetune: Optional[TrainConfig]
    data_dir: Optional[str] = None
    user_data: Optional[UserData] = None
    train_limit: Optional[int] = None
    dev_limit: Optional[int] = None
    device: str = "auto"
    seed: int = 42
    description: str = ""
    stages: List[StageSpec] = field(default_factory=list)
    digest: str = ""


class RecipeError(CompressorError):
    """Every problem of a recipe, one ``file:line: message`` per line."""

    def __init__(self, problems: List[str]):
        self.problems = problems
        super().__init__("\n".join(problems))


def load_recipe(path: str, device: Optional[str] = None, task: Optional[str] = None,
                teacher: Optional[str] = None) -> Recipe:
    """Parse and check a recipe file; raise :class:`RecipeError` listing every problem.

    ``task`` and ``teacher`` override the recipe's own (one recipe, run on each GLUE task or
    on a teacher already trained: ``teacher`` is a task checkpoint, so no fine-tuning)."""
    with_lines = load_yaml(path)
    with open(path, "rb") as f:
        return _build(with_lines, path, _digest(f.read(), task, teacher), device, task, teacher)


def recipe_from_text(text: str, name: str = "<recipe>", device: Optional[str] = None,
                     task: Optional[str] = None, teacher: Optional[str] = None) -> Recipe:
    return _build(parse_yaml(text, name), name, _digest(text.encode(), task, teacher), device, task, teacher)


def _digest(data: bytes, task: Optional[str], teacher: Optional[str]) -> str:
    """The recipe's identity for resuming: its text, and any override of task or teacher."""
    h = hashlib.sha256(data)
    if task is not None or teacher is not None:
        h.update(f"\0task={task}\0teacher={teacher}".encode())
    return h.hexdigest()[:16]


def validate_recipe(path: str) -> List[str]:
    """Every problem in the recipe at ``path`` (empty when it is fine)."""
    try:
        load_recipe(path)
    except RecipeError as exc:
        return exc.problems
    except CompressorError as exc:
        return [str(exc)]
    return []


def _build(doc, path: str, digest: str, device_override: Optional[str],
           task_override: Optional[str] = None, teacher_override: Optional[str] = None) -> Recipe:
    problems: List[str] = []

    def problem(line, message):
        problems.append(f"{path}:{line}: {message}")

    if not isinstance(doc, LineDict):
        raise RecipeError([f"{path}:1: a recipe is a mapping with task, teacher and stages"])
    _unknown_keys(doc, TOP_KEYS, "key", problem)

    data = doc.get("data", LineDict())
    user_files = isinstance(data, LineDict) and ("train_file" in data or "dev_file" in data)
    task, user_data = None, None
    if user_files:
        if task_override is not None:
            problem(data.line_of("train_file"), "--task cannot override a recipe that trains on "
                                                "its own files (data.train_file)")
        user_data, task = _user_data(data, doc.get("task"), problem)
    elif task_override is not None:
        try:
            task = get_task(str(task_override))
        except CompressorError as exc:
            problems.append(f"--task: {exc}")
    elif "task" not in doc:
        problem(1, "missing 'task' (e.g. task: sst2), or data.train_file for your own files")
    else:
        try:
            task = get_task(str(doc["task"]))
        except CompressorError as exc:
            problem(doc.line_of("task"), str(exc))

    seed = doc.get("seed", 42)
    if not isinstance(seed, int) or isinstance(seed, bool):
        problem(doc.line_of("seed"), f"seed must be an integer, got {seed!r}")
        seed = 42
    device = device_override or doc.get("device", "auto")
    if device_problem(device):
        problem(doc.line_of("device"), ("--device: " if device_override else "") + device_problem(device))
        device = "auto"

    data_dir, train_limit, dev_limit = None, None, None
    if not isinstance(data, LineDict):
        problem(doc.line_of("data"), f"data must be a mapping ({', '.join(DATA_KEYS)})")
    else:
        _unknown_keys(data, DATA_KEYS, "data key", problem)
        data_dir = data.get("dir")
        if data_dir is not None and not isinstance(data_dir, str):
            problem(data.line_of("dir"), f"data.dir must be a path, got {data_dir!r}")
        for key in ("train_limit", "dev_limit"):
            value = data.get(key)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
                problem(data.line_of(key), f"data.{key} must be a positive integer, got {value!r}")
        train_limit, dev_limit = data.get("train_limit"), data.get("dev_limit")

    teacher_model, teacher_finetune = None, None
    teacher = doc.get("teacher") if teacher_override is None else teacher_override
    defaults = {"device": device, "seed": seed}
    if teacher is None:
        problem(1, "missing 'teacher' (teacher: {model: PATH} or a base model plus finetune settings)")
    elif isinstance(teacher, str):
        teacher_model = teacher
    elif not isinstance(teacher, LineDict):
        problem(doc.line_of("teacher"), "teacher must be a checkpoint path or a mapping with model and finetune")
    else:
        _unknown_keys(teacher, TEACHER_KEYS, "teacher key", problem)
        teacher_model = teacher.get("model")
        if not isinstance(teacher_model, str):
            problem(teacher.line_of("model"), "teacher.model must name a checkpoint folder, alias or hub id")
        if "finetune" in teacher:
            settings = teacher["finetune"] if teacher["finetune"] is not None else LineDict()
            teacher_finetune = _config(TrainConfig, settings, defaults, teacher.line_of("finetune"),
                                       "teacher.finetune", problem)

    stages: List[StageSpec] = []
    raw_stages = doc.get("stages", LineList())
    if not isinstance(raw_stages, LineList):
        problem(doc.line_of("stages"), "stages must be a list, one '- name: {settings}' per stage")
        raw_stages = LineList()
    kind, previous = TRAINABLE, "the teacher"
    for i, item in enumerate(raw_stages):
        line = raw_stages.line_of(i)
        if isinstance(item, str):
            name, settings = item, LineDict()
        elif isinstance(item, LineDict) and len(item) == 1:
            name = next(iter(item))
            settings = item[name] if item[name] is not None else LineDict()
        else:
            problem(line, "each stage is one '- name: {settings}' entry")
            continue
        try:
            stage_type = get_stage(str(name))
        except CompressorError as exc:
            problem(line, _with_suggestion(str(exc), str(name)))
            continue
        config = _config(stage_type.config_cls, settings, defaults, line, f"stage '{name}'", problem)
        # a config may say which tasks it cannot serve (check_task(task) -> a problem or None)
        if config is not None and task is not None and hasattr(config, "check_task"):
            wrong = config.check_task(task)
            if wrong:
                problem(_line_of(settings, wrong[0], line), f"stage '{name}': {wrong[1]}")
        if kind not in stage_type.accepts:
            problem(line, f"stage '{name}' cannot follow {previous}: it needs a "
                          f"{' or '.join(stage_type.accepts)} model but gets a {kind} one")
        if stage_type.produces is not None:
            kind = stage_type.produces
        previous = f"stage '{name}'"
        stages.append(StageSpec(len(stages) + 1, str(name), config, line))

    if problems:
        raise RecipeError(problems)
    name = doc.get("name") or os.path.splitext(os.path.basename(path))[0]
    return Recipe(source=path, name=str(name), task=task, teacher_model=teacher_model,
                  teacher_finetune=teacher_finetune, data_dir=data_dir, user_data=user_data,
                  train_limit=train_limit,
                  dev_limit=dev_limit, device=device, seed=seed,
                  description=str(doc.get("description", "")), stages=stages, digest=digest)


def _unknown_keys(mapping: LineDict, allowed, what: str, problem) -> None:
    for key in mapping:
        if key not in allowed:
            problem(mapping.line_of(key), f"unknown {what} '{key}'; use {', '.join(allowed)}")


def _user_data(data: LineDict, task_name, problem):
    """The user's own files as the task; their labels come from the training file."""
    columns = data.get("text_columns")
    if isinstance(columns, str):
        columns = [columns]
    if not (isinstance(columns, list) and 1 <= len(columns) <= 2
            and all(isinstance(c, str) for c in columns)):
        problem(data.line_of("text_columns"), "data.text_columns must name 1 or 2 columns of your files")
        return None, None
    files = {}
    for key in ("train_file", "dev_file"):
        value = data.get(key)
        if value is not None and not (isinstance(value, str) and os.path.isfile(value)):
            problem(data.line_of(key), f"data.{key}: no such file {value!r}")
            return None, None
        files[key] = value
    label = data.get("label_column", "label")
    user_data = UserData(files["train_file"], files["dev_file"], tuple(columns), str(label),
                         str(task_name) if task_name else None)
    try:
        return user_data, user_data.task()
    except CompressorError as exc:
        problem(data.line_of("train_file"), str(exc))
        return None, None


def _config(cls, settings, defaults, line, what, problem):
    if not isinstance(settings, LineDict):
        problem(line, f"{what} settings must be a mapping, got {settings!r}")
        return None
    try:
        return config_from_dict(cls, settings, defaults, what)
    except SettingsError as exc:
        found = sorted(((_line_of(settings, keys, line), message) for keys, message in exc.problems),
                       key=lambda p: p[0])
        for at, message in found:
            problem(at, message)
    return None


def _with_suggestion(message: str, name: str) -> str:
    """An unknown stage's line with the closest stage names first, as the CLI does for commands."""
    import difflib

    from compressor.core.registry import all_stages

    close = difflib.get_close_matches(name, list(all_stages()), n=2)
    if not close:
        return message
    known = message.partition("; ")[2]   # the registry's "known: ..." part
    return f"unknown stage '{name}'; did you mean {' or '.join(repr(c) for c in close)}?" + (f" {known}" if known else "")


def _line_of(settings, keys, line: int) -> int:
    """The line of the deepest of ``keys`` (a path into nested settings) that the file has."""
    node = settings
    for key in keys:
        if isinstance(node, LineDict) and key in node:
            line, node = node.line_of(key), node[key]
        elif isinstance(node, LineList) and isinstance(key, int) and key < len(node):
            line, node = node.line_of(key), node[key]
        else:
            break
    return line
