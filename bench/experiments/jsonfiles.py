"""Reading the JSON files a run leaves, where a missing or half-written one means "not there yet"."""
import json


def read_or_none(path: str):
    """The JSON value in ``path``, or None when the file is missing, unreadable or not JSON
    (a stage still running, a run never started, a file cut short)."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None
