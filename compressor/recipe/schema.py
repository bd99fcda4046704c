"""What a recipe file may say, checked with the line of every problem."""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from typing import List, Optional

from compressor.core.data import UserData, get_task
from compressor.core.errors import CompressorError
from compressor.engine.train import TrainConfig
from compressor.core.settings import SettingsError, config_from_dict, device_problem, moved_message
from compressor.core.registry import TRAINABLE, get_stage
from compressor.recipe.header import build_header
from compressor.recipe.yamlfile import LineDict, LineList, load_yaml, parse_yaml



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
    warnings: List[str] = field(default_factory=list)   # deprecated forms it still takes, one line each


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


def validate_recipe(path: str, notes: Optional[list] = None) -> List[str]:
    """Every problem in the recipe at ``path`` (empty when it is fine); the deprecated forms it
    still takes (flat training keys) are added to ``notes``, one line each."""
    try:
        recipe = load_recipe(path)
    except RecipeError as exc:
        return exc.problems
    except CompressorError as exc:
        return [str(exc)]
    if notes is not None:
        notes.extend(recipe.warnings)
    return []


def _build(doc, path: str, digest: str, device_override: Optional[str],
           task_override: Optional[str] = None, teacher_override: Optional[str] = None) -> Recipe:
    problems: List[str] = []

    def problem(line, message):
        problems.append(f"{path}:{line}: {message}")

    if not isinstance(doc, LineDict):
        raise RecipeError([f"{path}:1: a recipe is a mapping with task, teacher and stages"])
    # the header (every key but the stages' settings) is a typed config, checked as a stage's is
    header, found = build_header(doc, device_override, teacher_override)
    for keys, message in sorted(found, key=lambda p: _line_of(doc, p[0], 1)):
        problem(_line_of(doc, keys, 1), message)
    wrong = {keys[0] for keys, _ in found if keys}

    data = doc.get("data", LineDict())
    user_files = isinstance(data, LineDict) and ("train_file" in data or "dev_file" in data)
    task, user_data = None, None
    if user_files:
        if task_override is not None:
            problem(data.line_of("train_file"), "--task cannot override a recipe that trains on "
                                                "its own files (data.train_file)")
        user_data, task = _user_data(data, doc.get("task"), problem, path)
    elif task_override is not None:
        try:
            task = get_task(str(task_override))
        except CompressorError as exc:
            problems.append(f"--task: {exc}")
    elif "task" not in doc:
        problem(1, "missing 'task' (e.g. task: sst2), or data.train_file for your own files")
    elif "task" not in wrong:
        try:
            task = get_task(str(header.task))
        except CompressorError as exc:
            problem(doc.line_of("task"), str(exc))

    seed = header.seed
    device = header.device if "device" not in wrong else "auto"
    if device_override:
        device = device_override
        if device_problem(device):
            problem(doc.line_of("device"), "--device: " + device_problem(device))
            device = "auto"
    data_dir, train_limit, dev_limit = header.data.dir, header.data.train_limit, header.data.dev_limit

    teacher_model, teacher_finetune = None, None
    teacher = doc.get("teacher") if teacher_override is None else teacher_override
    defaults = {"device": device, "seed": seed}
    if teacher is None:
        problem(1, "missing 'teacher' (teacher: {model: PATH} or a base model plus finetune settings)")
    elif "teacher" not in wrong:
        teacher_model, teacher_finetune = header.teacher.model, header.teacher.finetune
        hint = beside_recipe(path, teacher_model) if isinstance(teacher_model, str) else None
        if hint and teacher_override is None:
            problem(doc.line_of("teacher"), f"teacher {teacher_model!r}: {hint}")

    stages: List[StageSpec] = []
    notes: List[str] = []
    raw_stages = doc.get("stages", LineList())
    if not isinstance(raw_stages, LineList):   # the header said so
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
        moved: list = []
        config = _config(stage_type.config_cls, settings, defaults, line, f"stage '{name}'", problem, moved)
        if moved:   # training keys written flat in the stage, the older form: one line per stage
            notes.append(moved_message(f"{path}, stage {i + 1} ({name})", moved))
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
    name = header.name or os.path.splitext(os.path.basename(path))[0]
    return Recipe(source=path, name=str(name), task=task, teacher_model=teacher_model,
                  teacher_finetune=teacher_finetune, data_dir=data_dir, user_data=user_data,
                  train_limit=train_limit,
                  dev_limit=dev_limit, device=device, seed=seed,
                  description=header.description, stages=stages, digest=digest, warnings=notes)


def _user_data(data: LineDict, task_name, problem, path: str = ""):
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
            hint = beside_recipe(path, value) if isinstance(value, str) else None
            problem(data.line_of(key), f"data.{key}: no such file {value!r}" + (f"; {hint}" if hint else ""))
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


def _config(cls, settings, defaults, line, what, problem, moved=None):
    if not isinstance(settings, LineDict):
        problem(line, f"{what} settings must be a mapping, got {settings!r}")
        return None
    try:
        return config_from_dict(cls, settings, defaults, what, moved=moved)
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
    for i, key in enumerate(keys):
        if isinstance(node, LineDict) and key not in node and keys[i + 1:i + 2] and keys[i + 1] in node:
            continue   # a key written flat beside its section (lr for train.lr): found where it is
        if isinstance(node, LineDict) and key in node:
            line, node = node.line_of(key), node[key]
        elif isinstance(node, LineList) and isinstance(key, int) and key < len(node):
            line, node = node.line_of(key), node[key]
        else:
            break
    return line


def beside_recipe(recipe_path: str, value: str) -> Optional[str]:
    """What to say when a relative path in a recipe is missing from the working directory but
    exists beside the recipe: relative paths in a recipe are read from where compressor runs, as
    on the command line (the committed recipes are written from the checkout's root)."""
    if os.path.isabs(value) or os.path.exists(value):
        return None
    beside = os.path.join(os.path.dirname(os.path.abspath(recipe_path)), value)
    if not os.path.exists(beside):
        return None
    return (f"no such path from the working directory {os.getcwd()} (relative paths in a recipe "
            f"are read from where compressor runs), but {beside} exists beside the recipe: run from "
            f"{os.path.dirname(os.path.abspath(recipe_path))} or write the path from here")
