"""Mixed precision by sensitivity, in the spirit of Q-BERT (Shen et al., 2020).

Each unit (one weight matrix, or one encoder layer's matrices) is quantised
*alone* with ONNX Runtime's dynamic INT8 and the dev score measured; the
units whose quantisation costs most are the ones to keep in FP32. ``mixed``
then quantises everything, and returns units to FP32 from the most
sensitive down until the drop against FP32 is within ``max_drop``.
``accuracy_aware`` tries configurations from the fastest down (static and
dynamic INT8 of everything, then mixed ones) and keeps the fastest that
meets the tolerance, recording every try. Every score and timing runs the
graph through ``compressor.export.runtime.Predictor`` with the source folder's tokenizer,
as the quantize stage, ``eval`` and the benchmark do.
"""
from __future__ import annotations

import os
import time
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from compressor.core.io import save_figure, write_text
from compressor.core.progress import progress
from compressor.export.int8 import onnx_file, quantizable_units, quantize_dynamic_onnx

def measure_sensitivity(folder: str, rows_set, preset, work_dir: str, granularity: str = "matrix",
                        threads: Optional[int] = None, op_types: Optional[Sequence[str]] = None) -> dict:
    """Score the export ``folder``'s FP32 graph, all-INT8 and each unit quantised alone on
    ``rows_set`` (the search's rows: dev, drawn training rows or the teacher's held-out rows);
    units sorted by drop, largest first."""
    onnx_path = onnx_file(folder)
    units = quantizable_units(onnx_path, granularity)
    baseline = dev_score(folder, rows_set, threads=threads)
    rows = []
    for position, (name, nodes) in enumerate(progress(units.items(), total=len(units), desc="sensitivity",
                                                      unit="unit")):
        path = os.path.join(work_dir, "one.onnx")
        quantize_dynamic_onnx(onnx_path, path, preset, nodes_to_quantize=nodes, op_types=op_types)
        value = dev_score(folder, rows_set, path, threads)
        rows.append({"unit": name, "nodes": nodes, "score": value, "drop": baseline - value,
                     "position": position})
    path = os.path.join(work_dir, "all.onnx")
    quantize_dynamic_onnx(onnx_path, path, preset, op_types=op_types)
    everything = dev_score(folder, rows_set, path, threads)
    order = sorted(rows, key=lambda r: (-r["drop"], r["unit"]))
    return {"granularity": granularity, "fp32_score": baseline, "all_int8_score": everything,
            "units": order, "examples": len(rows_set), "split": rows_set.split}


def dev_score(folder: str, rows_set, model_file: Optional[str] = None, threads: Optional[int] = None) -> float:
    """The task score on ``rows_set`` (whichever rows the search uses; the name is historical) of
    the export ``folder``'s graph, or of ``model_file`` with its tokenizer."""
    from compressor.export.onnx import score_onnx

    from compressor.core.metrics import task_score

    return task_score(rows_set.task, score_onnx(folder, rows_set, threads, model_file))


def table(report: dict, metric: str) -> str:
    """The sensitivity report as a Markdown table (most sensitive first)."""
    lines = [f"FP32 {metric}: {report['fp32_score']:.2f}; every unit INT8: {report['all_int8_score']:.2f} "
             f"({report['examples']} {report.get('split', 'dev')} rows, one unit quantised at a time)", "",
             f"| unit | {metric} with only it INT8 | drop |", "|---|---:|---:|"]
    for r in report["units"]:
        lines.append(f"| {r['unit']} | {r['score']:.2f} | {r['drop']:+.2f} |")
    return "\n".join(lines) + "\n"


def plot(report: dict, path: str, metric: str) -> str:
    """A bar chart of each unit's drop (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    units = sorted(report["units"], key=lambda r: r.get("position", 0))  # graph order
    fig, ax = plt.subplots(figsize=(max(6, 0.3 * len(units) + 2), 4))
    ax.bar(range(len(units)), [r["drop"] for r in units], color="#4472c4")
    ax.set_xticks(range(len(units)))
    ax.set_xticklabels([r["unit"] for r in units], rotation=75, ha="right", fontsize=7)
    ax.axhline(0, color="black", linewidth=0.6)
    ax.set_ylabel(f"{metric} drop (points)")
    ax.set_title(f"Drop when only this unit is INT8 (FP32 {report['fp32_score']:.2f}, "
                 f"all INT8 {report['all_int8_score']:.2f})")
    fig.tight_layout()
    return save_figure(fig, path, dpi=120)


def mixed_precision(folder: str, out_path: str, report: dict, rows_set, preset, max_drop: float,
                    threads: Optional[int] = None, op_types: Optional[Sequence[str]] = None) -> dict:
    """Quantise all, then keep the most sensitive units FP32 one by one until the drop <= ``max_drop``.

    Returns the FP32 units, the final score and every step tried; when even
    all-but-everything misses the target, the last try is kept and
    ``met`` is False.
    """
    onnx_path = onnx_file(folder)
    baseline = report["fp32_score"]
    ranked = [r for r in report["units"]]
    tried = []
    kept: List[str] = []
    excluded: List[str] = []
    for k in range(len(ranked) + 1):
        quantize_dynamic_onnx(onnx_path, out_path, preset, nodes_to_exclude=excluded, op_types=op_types)
        value = dev_score(folder, rows_set, out_path, threads)
        tried.append({"fp32_units": list(kept), "score": value, "drop": baseline - value})
        if baseline - value <= max_drop or k == len(ranked):
            break
        kept.append(ranked[k]["unit"])
        excluded += ranked[k]["nodes"]
    return {"fp32_units": kept, "excluded_nodes": excluded, "score": tried[-1]["score"],
            "drop": tried[-1]["drop"], "met": tried[-1]["drop"] <= max_drop, "tried": tried}


def latency_ms(folder: str, path: str, feeds: Sequence[dict], threads: int = 1, repeats: int = 1) -> float:
    """Median batch-1 latency of one ONNX file over ``feeds`` (a quick ranking, not the benchmark)."""
    from compressor.export.runtime import Predictor

    predictor = Predictor(folder, threads=threads, model_file=path)
    for feed in feeds[:5]:
        predictor.run(feed)
    times = []
    for _ in range(repeats):
        for feed in feeds:
            start = time.perf_counter()
            predictor.run(feed)
            times.append(time.perf_counter() - start)
    return float(np.median(times) * 1000)


def accuracy_aware(candidates: Sequence[tuple], baseline: float, max_drop: float,
                   score_fn: Callable[[str], float], latency_fn: Callable[[str], float]) -> dict:
    """Try ``(name, build)`` candidates; keep the fastest whose drop is within ``max_drop``.

    ``build()`` writes a model and returns its path (or None when it cannot
    be built). Every candidate is scored and timed, so the record shows what
    the choice was made against.
    """
    tried = []
    for name, build in candidates:
        path = build()
        if path is None:
            continue
        value = score_fn(path)
        tried.append({"name": name, "path": path, "score": value, "drop": baseline - value,
                      "latency_ms": round(latency_fn(path), 3),
                      "meets": baseline - value <= max_drop})
    fit = [t for t in tried if t["meets"]]
    chosen = min(fit, key=lambda t: t["latency_ms"]) if fit else None
    return {"chosen": chosen["name"] if chosen else None, "path": chosen["path"] if chosen else None,
            "tried": tried}


def write_report(report: dict, folder: str, metric: str) -> Dict[str, str]:
    """``sensitivity.md`` and ``sensitivity.png`` in ``folder``."""
    md = os.path.join(folder, "sensitivity.md")
    write_text(md, table(report, metric))
    return {"table": md, "plot": plot(report, os.path.join(folder, "sensitivity.png"), metric)}
