"""The report a recipe run ends with: every stage's score, and, after a ``bench`` stage,
latency against score for the run's models and the peers (``report.md``, ``report.html``).

The rendering lives in ``compressor.bench.report`` (which ``compressor report`` also uses),
so a run's report and one made later from its folder are the same.
"""
from __future__ import annotations

import os


def write_report(out: str, manifest: dict) -> str:
    """Write ``OUT/report.md`` and ``OUT/report.html`` (with its plot) from the run; return the .md path."""
    from compressor.bench.report import collect, write_report_files

    rows = collect([out])
    title = f"{manifest['recipe']}: {manifest['task']}"
    write_report_files([out], out, title=title, rows=rows)
    return os.path.join(out, "report.md")
