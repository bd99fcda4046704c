"""Reading the JSON files a run leaves, where a missing or half-written one means "not there yet"."""
import json
import os
from typing import Optional


def read_or_none(path: str):
    """The JSON value in ``path``, or None when the file is missing, unreadable or not JSON
    (a stage still running, a run never started, a file cut short)."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def last_stage(run: str, kind: str) -> Optional[str]:
    """The name of the run folder's last stage folder of ``kind`` (``05-quantize`` for quantize in a
    chain), or None when the run has none (or is not there)."""
    if not os.path.isdir(run):
        return None
    found = sorted(n for n in os.listdir(run) if n.split("-", 1)[-1] == kind)
    return found[-1] if found else None
