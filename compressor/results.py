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

import platform
import shlex
import sys
from typing import Iterable, List, Optional

from .io import read_json, versions, write_json

FORMAT = "compressor-results/1"
REQUIRED = ("name", "task", "metric", "value", "teacher_value", "retention", "parameters", "size_bytes")


def row(name: str, task: str, metric: str, value: Optional[float], teacher_value: Optional[float] = None,
        parameters: Optional[int] = None, size_bytes: Optional[int] = None, **measured) -> dict:
    """One variant's row; ``measured`` holds engine, threads, batch_size, latency_ms, ... and extra."""
    retention = round(value / teacher_value, 4) if value is not None and teacher_value else None
    return {"name": name, "task": task, "metric": metric, "value": value, "teacher_value": teacher_value,
            "retention": retention, "parameters": parameters, "size_bytes": size_bytes, **measured}


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


def command_line(argv: Optional[List[str]] = None) -> str:
    """The command that is running, as a user would type it."""
    argv = sys.argv if argv is None else argv
    return " ".join(shlex.quote(a) for a in argv)


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
