"""Reading GLUE task files and users' own files into one ``Dataset`` shape.

GLUE's TSVs are not uniform (BOMs, header-less CoLA, metadata columns, stray
quotes), so columns are found by header name and every bad row is reported
as ``file:line`` -- the user should never have to debug a KeyError.
"""

from __future__ import annotations

import csv
import json
import math
import os
import random
from collections import OrderedDict
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterator

from compressor.core.errors import CompressorError, where
from compressor.core.io import file_version
from compressor.core.data.tasks import TaskSpec, custom_task, get_task

EMBEDDED = "embedded"

# Header names of the text columns in GLUE's files (alternatives in order),
# and of the label column. Tasks not listed use their own field names + "label".
_GLUE_TEXT_COLUMNS = {
    "sst2": [("sentence",)],
    "cola": [("sentence",)],
    "mrpc": [("#1 String", "#2 String")],
    "rte": [("sentence1", "sentence2"), ("question", "sentence")],
    "wnli": [("sentence1", "sentence2"), ("question", "sentence")],
    "qnli": [("question", "sentence"), ("sentence1", "sentence2")],
    "stsb": [("sentence1", "sentence2")],
    "qqp": [("question1", "question2")],
    "mnli": [("sentence1", "sentence2")],
    "mnli_mm": [("sentence1", "sentence2")],
}
_GLUE_LABEL_COLUMN = {"mrpc": "Quality", "stsb": "score", "qqp": "is_duplicate", "mnli": "gold_label", "mnli_mm": "gold_label"}
_ID_COLUMNS = ("index", "id", "idx", "guid")


@dataclass(frozen=True)   # read files' rows are shared between reads (read_glue_file's cache)
class Example:
    texts: tuple
    label: int | float | None
    guid: str


@dataclass
class Dataset:
    task: TaskSpec
    split: str
    examples: list
    source: str

    def __len__(self) -> int:
        return len(self.examples)

    def __iter__(self) -> Iterator[Example]:
        return iter(self.examples)

    @property
    def labelled(self) -> bool:
        return all(e.label is not None for e in self.examples)

    def partition(self, rows: int, seed: int, split: str | None = None) -> tuple["Dataset", "Dataset"]:
        """``(the others, drawn)``: ``rows`` examples drawn at random (seeded; all of them when
        there are no more), in file order, as a dataset named ``split``, and the rest."""
        n = len(self.examples)
        picked = set(range(n)) if rows >= n else set(random.Random(seed).sample(range(n), rows))
        drawn = [e for i, e in enumerate(self.examples) if i in picked]
        rest = [e for i, e in enumerate(self.examples) if i not in picked]
        return replace(self, examples=rest), replace(self, examples=drawn, split=split or self.split)

    def sample(self, rows: int, seed: int, split: str | None = None) -> "Dataset":
        """``rows`` examples drawn as :meth:`partition` draws them."""
        return self.partition(rows, seed, split)[1]


def hash_rows(h, examples) -> None:
    """Feed every example's texts and label to the hash ``h`` (a slice's identity, for a cache
    key or a record that must find the same rows again)."""
    for e in examples:
        h.update(json.dumps([list(e.texts), e.label], default=str).encode())


def embedded_dir() -> str:
    return str(Path(__file__).resolve().parent / "embedded")


def resolve_data_dir(data_dir: str | None) -> str | None:
    """Explicit argument beats ``GLUE_DIR`` so one run can override the environment."""
    for value in (data_dir, os.environ.get("GLUE_DIR")):
        if value is not None and str(value).strip():
            value = str(value).strip()
            return value if value == EMBEDDED else os.path.expanduser(value)
    return None


def _short(value, n: int = 40) -> str:
    """Quote data for an error message, keeping it on one line and short."""
    s = repr(value)
    return s if len(s) <= n else s[: n - 3] + "..."


def _parse_label(task: TaskSpec, raw, loc: str, allow_ids: bool = False):
    """Map a label cell to a class id (or a float for regression); ``loc`` is file:line."""
    if isinstance(raw, bool):
        raw = int(raw)
    if isinstance(raw, float) and raw.is_integer() and not task.is_regression:
        raw = int(raw)
    text = str(raw).strip() if raw is not None else ""
    if text == "":
        raise CompressorError(f"{loc}: empty label")
    if task.is_regression:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise CompressorError(f"{loc}: score {_short(text)} is not a number")
        return value
    if text in task.labels:
        return task.labels.index(text)
    if allow_ids and text.lstrip("-").isdigit() and 0 <= int(text) < len(task.labels):
        return int(text)
    raise CompressorError(f"{loc}: label {_short(text)} is not one of {', '.join(task.labels)} (task {task.name})")


def _check_text(value, column: str, loc: str, allow_empty: bool = False) -> str:
    text = "" if value is None else str(value).rstrip()
    if not text and not allow_empty:
        raise CompressorError(f"{loc}: empty text in column '{column}'")
    return text


def _open(path):
    # utf-8-sig drops MRPC's byte-order mark; newline="" is what csv expects.
    try:
        return open(path, encoding="utf-8-sig", newline="")
    except OSError as e:
        raise CompressorError(f"cannot read {path}: {e.strerror or e}") from None


def _rows(path, delimiter: str, quoting: int, keep_blank: bool = False) -> Iterator[tuple[int, list]]:
    """Yield (first line number, cells) for every non-blank row, as one-line errors.

    ``keep_blank``: blank rows between others are rows too (empty texts to label); blank
    lines at the end of the file are not.
    """
    with _open(path) as f:
        reader = csv.reader(f, delimiter=delimiter, quoting=quoting)
        last, blanks = 0, []
        try:
            for row in reader:
                start, last = last + 1, reader.line_num
                if any(c.strip() for c in row):
                    yield from blanks
                    blanks = []
                    yield start, row
                elif keep_blank:
                    blanks.append((start, row))
        except csv.Error as e:
            raise CompressorError(f"{where(path, reader.line_num)}: {e}") from None
        except UnicodeDecodeError:
            raise CompressorError(f"{where(path, _bad_utf8_line(path, last + 1))}: not UTF-8 text") from None


def _bad_utf8_line(path, fallback: int) -> int:
    """The line holding the first byte that is not UTF-8 (text files are decoded in blocks, so
    where decoding stopped says little). A character never spans lines: each decodes alone."""
    try:
        with open(path, "rb") as f:
            for number, line in enumerate(f, 1):
                try:
                    line.decode("utf-8")
                except UnicodeDecodeError:
                    return number
    except OSError:
        pass
    return fallback


# Files read in this process, by (path, its stat, how read): a recipe, a search or a test reads the
# same training file many times (every other task's, for general distillation's text). The rows are
# shared (Example is frozen); each read gets its own list. Files of more rows are read again.
_READ: "OrderedDict[tuple, tuple]" = OrderedDict()
_READ_FILES, _READ_MAX_ROWS = 32, 200_000


def read_glue_file(task: TaskSpec | str, path, split: str, limit: int | None = None,
                   to_label: bool = False) -> Dataset:
    """Read one GLUE TSV. Quoting is off because sentences contain bare ``"``.

    ``guid`` is the file's index/id column, or the row's line number in the file.
    ``to_label``: rows to predict; an empty text or a blank line between rows is a row too.
    A file read before in this process, unchanged since (``file_version``), is not parsed again.
    """
    task = get_task(task)
    _check_limit(limit, split)
    path = str(path)
    try:
        key = (*file_version(path), task, split, limit, to_label)
        hash(key)
    except (OSError, TypeError):
        key = None   # reading it says what is wrong (or a task that cannot be a key is read each time)
    if key is not None and key in _READ:
        _READ.move_to_end(key)
        return Dataset(task, split, list(_READ[key]), path)
    dataset = _read_glue_file(task, path, split, limit, to_label)
    if key is not None and len(dataset.examples) <= _READ_MAX_ROWS:
        _READ[key] = tuple(dataset.examples)
        while len(_READ) > _READ_FILES:
            _READ.popitem(last=False)
    return dataset


def _read_glue_file(task: TaskSpec, path: str, split: str, limit: int | None, to_label: bool) -> Dataset:
    examples: list[Example] = []
    layout = None
    for lineno, row in _rows(path, "\t", csv.QUOTE_NONE, keep_blank=to_label):
        if limit is not None and len(examples) >= limit:
            break
        loc = where(path, lineno)
        blank = not any(c.strip() for c in row)
        if layout is None and blank:
            continue
        if layout is None:
            layout = _glue_layout(task, row, loc)
            if layout[0]:
                continue
        _, names, text_idx, label_idx, guid_idx, ncols = layout
        if to_label:
            label_idx = None  # rows to predict: a label column, if any, is not read
            if blank:
                row, guid_idx = [""] * max(ncols, len(row)), None
        if len(row) < ncols:
            raise CompressorError(f"{loc}: expected {ncols} tab-separated columns, found {len(row)}")
        texts = tuple(_check_text(row[i], n, loc, allow_empty=to_label) for i, n in zip(text_idx, names))
        label = _parse_label(task, row[label_idx], loc) if label_idx is not None else None
        guid = row[guid_idx].strip() if guid_idx is not None else str(lineno)
        examples.append(Example(texts, label, guid))
    if layout is None:
        raise CompressorError(f"{path}: empty file")
    if not examples:
        raise CompressorError(f"{path}: no data rows, only a header")
    return Dataset(task, split, examples, path)


def _glue_layout(task: TaskSpec, first: list, loc: str):
    """Decide from the first row: (has_header, names, text idx, label idx, guid idx, min columns)."""
    cells = [c.strip() for c in first]
    candidates = _GLUE_TEXT_COLUMNS.get(task.name, [task.text_fields])
    names = next((c for c in candidates if all(n in cells for n in c)), None)
    if names is None and task.name == "cola":
        # CoLA train/dev carry no header: source, label, original mark, sentence.
        return (False, ("sentence",), (3,), 1, None, 4)
    if names is None:
        want = " / ".join(", ".join(c) for c in candidates)
        raise CompressorError(
            f"{loc}: expected a header row with column(s) {want} for task {task.name}; "
            f"found {_short(cells[:6], 120)}")
    label_name = _GLUE_LABEL_COLUMN.get(task.name, "label")
    label_idx = cells.index(label_name) if label_name in cells else None
    guid_idx = next((cells.index(c) for c in _ID_COLUMNS if c in cells), None)
    idx = tuple(cells.index(n) for n in names)
    ncols = max(i for i in (*idx, label_idx, guid_idx) if i is not None) + 1
    return (True, names, idx, label_idx, guid_idx, ncols)


def _check_limit(limit: int | None, split: str) -> None:
    """A row limit keeps at least one row: 0 would leave nothing to train on or score."""
    if limit is not None and limit < 1:
        raise CompressorError(f"the {split} row limit must be at least 1, got {limit}")


def _files_hint(task: TaskSpec) -> str:
    files = list(dict.fromkeys(task.splits.values()))
    return f"DIR/{task.folder}/{files[0]}" + "".join(f", {f}" for f in files[1:])


def load_split(task: TaskSpec | str, split: str = "dev", data_dir: str | None = None,
               limit: int | None = None) -> Dataset:
    """Load a GLUE split from a folder, the packaged SST-2 slice, or (last resort) the hub."""
    task = get_task(task)
    if split not in task.splits:
        raise CompressorError(f"unknown split '{split}' for task {task.name}; splits: {', '.join(task.splits) or '(none)'}")
    _check_limit(limit, split)
    data_dir = resolve_data_dir(data_dir)
    if data_dir == EMBEDDED:
        if task.name != "sst2" or split not in ("train", "dev"):
            raise CompressorError(
                f"the embedded data holds only sst2 train and dev, not {task.name} {split}: "
                f"pass --data-dir DIR or set GLUE_DIR to GLUE's files")
        ds = read_glue_file(task, os.path.join(embedded_dir(), "sst2", task.splits[split]), split, limit)
        ds.source = EMBEDDED
        return ds
    if data_dir is None:
        return _load_hub(task, split, limit)
    if not os.path.isdir(data_dir):
        raise CompressorError(f"data dir {data_dir} does not exist (from --data-dir or GLUE_DIR)")
    path = os.path.join(data_dir, task.folder, task.splits[split])
    if not os.path.isfile(path):
        raise CompressorError(
            f"no {task.folder}/{task.splits[split]} under {data_dir}: expected GLUE's layout "
            f"({_files_hint(task).replace('DIR', data_dir, 1)})")
    return read_glue_file(task, path, split, limit)


def _load_hub(task: TaskSpec, split: str, limit: int | None) -> Dataset:
    hint = (f"no GLUE data for {task.name}: pass --data-dir DIR or set GLUE_DIR to a folder laid out "
            f"as GLUE's download script writes it ({_files_hint(task)})")
    if task.name == "sst2" and split != "test":
        hint += "; or --data-dir embedded for the packaged SST-2 slice"
    try:
        import datasets  # optional: not a dependency of the toolkit
    except Exception:
        raise CompressorError(hint) from None
    config = "mnli" if task.name.startswith("mnli") else task.name
    hub_split = {"train": "train", "dev": "validation", "test": "test"}[split]
    if config == "mnli" and split != "train":
        hub_split += "_mismatched" if task.name == "mnli_mm" else "_matched"
    try:
        hub = datasets.load_dataset("glue", config, split=hub_split)
        if limit is not None:
            hub = hub.select(range(min(limit, len(hub))))
        examples = []
        for i, r in enumerate(hub):
            texts = tuple(str(r[f]).rstrip() for f in task.text_fields)
            raw = r.get("label")
            label = None if raw is None or raw < 0 else float(raw) if task.is_regression else int(raw)
            examples.append(Example(texts, label, str(r.get("idx", i))))
    except Exception as e:
        msg = " ".join(str(e).split())[:200]
        raise CompressorError(f"{hint}; the hub (glue/{config}) failed: {type(e).__name__}: {msg}") from None
    return Dataset(task, split, examples, f"hub:glue/{config}")


def _user_rows(path: str, ext: str, required: list, keep_blank: bool = False) -> Iterator[tuple[int, dict]]:
    """Yield (line, record) for .tsv/.csv/.jsonl files, checking ``required`` columns/keys."""
    def missing(loc: str, have: list, kind: str) -> None:
        for col in required:
            if col not in have:
                raise CompressorError(f"{loc}: no {kind} '{col}'; the file has: {', '.join(map(str, have))}")

    if ext in (".tsv", ".csv"):
        # TSV is read like GLUE's (no quoting: bare quotes in text); CSV uses normal quoting.
        quoting = csv.QUOTE_NONE if ext == ".tsv" else csv.QUOTE_MINIMAL
        header = None
        for lineno, row in _rows(path, "\t" if ext == ".tsv" else ",", quoting, keep_blank):
            blank = not any(c.strip() for c in row)
            if header is None and blank:
                continue
            if header is None:
                header = [c.strip() for c in row]
                missing(where(path, lineno), header, "column")
                continue
            if blank and len(row) != len(header):
                row = [""] * len(header)  # a blank line is a row of empty texts
            if len(row) != len(header):
                raise CompressorError(f"{where(path, lineno)}: found {len(row)} fields, the header has {len(header)}")
            yield lineno, dict(zip(header, row))
        if header is None:
            raise CompressorError(f"{path}: empty file")
        return
    with _open(path) as f:
        lineno = 0
        try:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                if lineno == 1 and line.lstrip().startswith("["):
                    raise CompressorError(f"{where(path, 1)}: expected JSON Lines (one object per line), found a JSON array")
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as e:
                    raise CompressorError(f"{where(path, lineno)}: not valid JSON ({e.msg})") from None
                if not isinstance(rec, dict):
                    raise CompressorError(f"{where(path, lineno)}: expected a JSON object, found {type(rec).__name__}")
                missing(where(path, lineno), list(rec), "key")
                yield lineno, rec
        except UnicodeDecodeError:
            raise CompressorError(f"{where(path, _bad_utf8_line(path, lineno + 1))}: not UTF-8 text") from None


def read_user_file(path, text_columns, label_column: str | None = None, task: TaskSpec | str | None = None,
                   split: str = "user", limit: int | None = None) -> Dataset:
    """Read the user's own TSV/CSV/JSONL file.

    Without ``task``, a label column defines a custom task: float labels that
    are not all whole numbers mean regression; otherwise the distinct labels,
    sorted (numerically when they are numbers, so ids 0..K-1 keep their value),
    are the classes. ``guid`` is an id/index/idx/guid column or the line number.
    ``limit`` keeps the first N rows (the labels are still inferred from all of them).
    """
    path = str(path)
    _check_limit(limit, split)
    text_columns = [text_columns] if isinstance(text_columns, str) else list(text_columns)
    if len(text_columns) not in (1, 2):
        raise CompressorError(f"need 1 or 2 text columns, got {len(text_columns)}: {', '.join(text_columns)}")
    task = get_task(task) if task is not None else None
    if task is not None and len(text_columns) != len(task.text_fields):
        raise CompressorError(
            f"task {task.name} takes {len(task.text_fields)} text column(s) "
            f"({', '.join(task.text_fields)}), got {len(text_columns)}: {', '.join(text_columns)}")
    ext = Path(path).suffix.lower()
    if ext not in (".tsv", ".csv", ".jsonl", ".json"):
        raise CompressorError(f"{path}: unsupported file type '{ext or '(none)'}'; use .tsv, .csv or .jsonl")
    if not os.path.isfile(path):
        raise CompressorError(f"no such file: {path}")

    # rows to label (no label column): an empty text is still a row, so the predictions
    # match the input row for row; a training or dev row needs its text
    to_label = label_column is None
    rows = []
    for lineno, rec in _user_rows(path, ext, text_columns + ([label_column] if label_column else []),
                                  keep_blank=to_label):
        loc = where(path, lineno)
        texts = tuple(_check_text(rec[c], c, loc, allow_empty=to_label) for c in text_columns)
        guid = next((str(rec[c]) for c in _ID_COLUMNS if c in rec and c not in text_columns), str(lineno))
        rows.append((loc, texts, rec[label_column] if label_column else None, guid))
    if not rows:
        raise CompressorError(f"{path}: no data rows")

    if task is None:
        labels = () if label_column is None else _infer_labels([r[2] for r in rows], path)
        task = custom_task(Path(path).stem, text_columns, labels)
    if label_column is None:
        examples = [Example(t, None, g) for _, t, _, g in rows]
    else:
        examples = [Example(t, _parse_label(task, raw, loc, allow_ids=True), g) for loc, t, raw, g in rows]
    return Dataset(task, split, examples if limit is None else examples[:limit], path)


def _infer_labels(raws: list, path: str = "") -> tuple | None:
    """None (regression) if labels are non-integral numbers, else the sorted class names.

    Numbers mixed with names (``0/1`` with ``neg/pos``) are refused: they would make one
    class per spelling, a model that cannot learn the task.
    """
    def as_str(v) -> str:
        if isinstance(v, bool):
            v = int(v)
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        return "" if v is None else str(v).strip()

    def as_num(s: str) -> float | None:
        try:
            x = float(s)
        except ValueError:
            return None
        return x if math.isfinite(x) else None

    names = {as_str(v) for v in raws}
    names.discard("")  # empty labels are reported row by row later
    nums = {s: as_num(s) for s in names}
    numbers = sorted((s for s in names if nums[s] is not None), key=lambda s: nums[s])
    words = sorted(s for s in names if nums[s] is None)
    if numbers and words:
        def few(values):
            return ", ".join(values[:6]) + (", ..." if len(values) > 6 else "")
        raise CompressorError(f"{path}: the labels mix numbers ({few(numbers)}) and names ({few(words)}); "
                              "use one set of labels for each class")
    if names and all(x is not None for x in nums.values()):
        if not all(x.is_integer() for x in nums.values()):
            return None
        return tuple(sorted(names, key=lambda s: nums[s]))
    return tuple(sorted(names))
