"""The one results format of the toolkit.

Every benchmark and experiment writes a JSON file
``{"format": "compressor-results/1", "command": ..., "fingerprint": {...}, "rows": [...]}``
and every row is one variant measured one way. ``compressor report`` reads
these files and recipe stage records alike. Keys a row always has:

- ``name``: the variant ("teacher", "distill-3L", "ort-o2-int8", ...)
- ``task``, ``metric`` (the task score's name), ``value`` (the score, x100),
  ``teacher_value`` and ``retention`` (value / teacher_value), or None
- ``parameters``, ``size_bytes``

and, where speed was measured: ``engine``, ``device``, ``threads``,
``batch_size``, ``latency_ms`` ({"p50", "p90", "p99"}) or ``throughput``
(sentences per second). Anything else a producer knows goes in ``extra``.
"""
from __future__ import annotations

import os
import platform
import shlex
import sys
from typing import Iterable, List, Optional

from compressor.core.io import read_json, versions, write_json

FORMAT = "compressor-results/1"
REQUIRED = ("name", "task", "metric", "value", "teacher_value", "retention", "parameters", "size_bytes")


def row(name: str, task: str, metric: str, value: Optional[float], teacher_value: Optional[float] = None,
        parameters: Optional[int] = None, size_bytes: Optional[int] = None, **measured) -> dict:
    """One variant's row; ``measured`` holds engine, threads, batch_size, latency_ms, ... and extra."""
    retention = round(value / teacher_value, 4) if value is not None and teacher_value else None
    return {"name": name, "task": task, "metric": metric, "value": value, "teacher_value": teacher_value,
            "retention": retention, "parameters": parameters, "size_bytes": size_bytes, **measured}


def training_row(name: str, task: str, record: dict, **measured) -> dict:
    """The row of a fine-tuning or distillation record (``metrics.json``): its dev score,
    size and the whole record under ``extra``."""
    metrics = record.get("metrics") or {}
    return row(name, task, "+".join(metrics) or "score", record.get("score"), None,
               parameters=record.get("parameters"), size_bytes=record.get("size_bytes"),
               extra={"metrics": metrics, "record": record}, **measured)


def fingerprint() -> dict:
    """What machine and software produced a result (the benchmark code may add more)."""
    info = {"python": platform.python_version(), "platform": platform.platform(),
            "machine": platform.machine(), "processor": _cpu_model(), "versions": versions()}
    try:
        import os
        info["cores"] = os.cpu_count()
    except Exception:  # pragma: no cover
        pass
    return info


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def shown_path(path: str) -> str:
    """A path as a user in the current folder would type it: relative when it lies below it.

    Committed results made from a checkout's root so name repository-relative paths.
    """
    full = os.path.abspath(path)
    here = os.getcwd()
    if full == here:
        return "."
    return os.path.relpath(full, here) if full.startswith(here + os.sep) else str(path)


def command_line(argv: Optional[List[str]] = None) -> str:
    """The command that is running, as a user would type it (paths below the current folder
    relative, an installed script by its name, a module run with ``-m`` as such)."""
    argv = list(sys.argv if argv is None else argv)
    if argv and argv[0].endswith(".py") and os.path.isabs(argv[0]):
        shown = shown_path(argv[0])
        argv[0] = ("python -m " + shown[:-3].replace(os.sep, ".")) if not os.path.isabs(shown) \
            else "python " + shown
        return " ".join([argv[0]] + [shlex.quote(_shown_arg(a)) for a in argv[1:]])
    if argv and os.path.isabs(argv[0]):
        argv[0] = os.path.basename(argv[0])
    return " ".join(shlex.quote(_shown_arg(a)) for a in argv)


def run_command(recipe: Optional[str], out: str) -> str:
    """The ``compressor run`` command that made a run folder, as a user would type it."""
    shown = shown_path(recipe) if recipe and os.path.isabs(recipe) else recipe
    return f"compressor run {shlex.quote(str(shown))} --out {shlex.quote(shown_path(out))}"


def _shown_arg(arg: str) -> str:
    key, eq, value = arg.partition("=")
    if eq and key.startswith("-") and os.path.isabs(value):
        return f"{key}={shown_path(value)}"
    return shown_path(arg) if os.path.isabs(arg) else arg


def write_results(path: str, rows: Iterable[dict], command: Optional[str] = None,
                  fingerprint_info: Optional[dict] = None, **extra) -> str:
    """Write a results file atomically; every row must have the required keys."""
    rows = list(rows)
    for r in rows:
        missing = [k for k in REQUIRED if k not in r]
        if missing:
            raise ValueError(f"result row {r.get('name')!r} lacks {', '.join(missing)}")
    doc = {"format": FORMAT, "command": command or command_line(),
           "fingerprint": fingerprint_info or fingerprint(), "rows": rows, **extra}
    write_json(path, doc)
    return path


def read_results(path: str) -> dict:
    doc = read_json(path)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError(f"{path}: not a {FORMAT} file")
    return doc
