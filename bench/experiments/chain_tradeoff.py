"""Issue 32's chain target as a picture: each accuracy-first chain variant's GLUE-5 retention (its
INT8 graph on dev, against its run's held-out teacher) against its batch-1 p50 over today's chain
(the geometric mean over the five tasks, from ``chain_latency_same_shape``'s summary), with the
target's corner (≥98% at ≤1.10x) shaded. Everything is read from committed results.

    python -m bench.experiments.chain_tradeoff \\
        --point "halved, one step" bench/results/accuracy-ablation-h200x1 task2-b256q0 \\
            bench/results/chain-latency-h200x1/task2-b256q0 \\
        --out bench/results/chain-latency-h200x1/tradeoff

writes OUT.json (the figures and the command) and OUT.png. ``--task-from TASK ABLATION_DIR VARIANT``
after a ``--point`` takes that task's INT8 graph from another run of the same pipeline (a choice
that run measured and this one did not); it is refused unless the other run's teacher scored the
same on dev and on the held-out rows' split, and the point records where each task came from.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import sys
from typing import Dict, List

from compressor.core.io import write_json

TASKS = ("cola", "mrpc", "rte", "sst2", "stsb")
TARGET_RETENTION, TARGET_RATIO = 98.0, 1.10


def _load(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _entry(ablation_dir: str, variant: str, task: str) -> dict:
    """The task's teacher score and the variant's INT8 (last) stage in an ablation's summary."""
    entry = _load(os.path.join(ablation_dir, "summary.json"))["tasks"].get(task, {})
    if variant not in entry.get("variants", {}):
        raise SystemExit(f"{ablation_dir}: {variant} has no result on {task}")
    return {"teacher": entry["teacher"], "last": entry["variants"][variant]["stages"]["quantize"]}


def glue5(ablation_dir: str, variant: str, task_from: Dict[str, tuple] = None) -> Dict[str, float]:
    """The variant's INT8 graph on dev and on the held-out rows, its teachers', over GLUE-5; a task in
    ``task_from`` (task -> (ablation_dir, variant)) from that run, whose teacher must score the same."""
    task_from = task_from or {}
    dev, teacher, held_share, source = [], [], [], {}
    for t in TASKS:
        entry = _entry(ablation_dir, variant, t)
        source[t] = f"{ablation_dir} {variant}"
        if t in task_from:
            other = _entry(*task_from[t], t)
            if other["teacher"] != entry["teacher"]:
                raise SystemExit(f"--task-from {t} {' '.join(task_from[t])}: its teacher scored {other['teacher']}, "
                                 f"this run's {entry['teacher']}: not the same pipeline")
            entry, source[t] = other, " ".join(task_from[t])
        last = entry["last"]
        dev.append(last["score"])
        teacher.append(entry["teacher"])
        held_share.append(last.get("holdout_retention"))
    out = {"glue5": round(sum(dev) / len(dev), 2), "teacher_glue5": round(sum(teacher) / len(teacher), 2),
           "per_task": dict(zip(TASKS, dev)), **({"per_task_from": source} if task_from else {})}
    out["retention"] = round(100 * out["glue5"] / out["teacher_glue5"], 2)
    if all(h is not None for h in held_share):
        out["holdout_retention_mean"] = round(sum(held_share) / len(held_share), 2)
    return out


def latency_ratio(latency_dir: str, threads: int = 1) -> Dict[str, float]:
    rows = [r for r in _load(os.path.join(latency_dir, "summary.json"))["rows"] if r["threads"] == threads]
    ratios = {r["task"]: r["chain_over_today"] for r in rows}
    missing = [t for t in TASKS if t not in ratios]
    if missing:
        raise SystemExit(f"{latency_dir}: no {threads}-thread timing for {', '.join(missing)}")
    geo = math.exp(sum(math.log(ratios[t]) for t in TASKS) / len(TASKS))
    return {"ratio": round(geo, 3), "per_task": {t: ratios[t] for t in TASKS}, "threads": threads}


def plot(points: List[dict], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from matplotlib.lines import Line2D

    # points are numbered on the plot and named in a key under it: labels beside close points overlap
    fig, ax = plt.subplots(figsize=(6.4, 4.2 + 0.2 * len(points)))
    xs = [p["latency"]["ratio"] for p in points]
    ys = [p["accuracy"]["retention"] for p in points]
    x_hi = max(xs + [TARGET_RATIO]) * 1.08
    y_lo = min(ys + [TARGET_RETENTION]) - 1.0
    target = plt.Rectangle((0, TARGET_RETENTION), TARGET_RATIO, 101 - TARGET_RETENTION,
                           color="#9fd49f", alpha=0.6, zorder=1)
    ax.add_patch(target)
    ax.axhline(TARGET_RETENTION, color="#3a7d3a", lw=0.8, ls="--")
    ax.axvline(TARGET_RATIO, color="#3a7d3a", lw=0.8, ls="--")
    key = [target]
    names = ["issue 32's target (>= 98% at <= 1.10x)"]
    for n, (p, x, y) in enumerate(zip(points, xs, ys), start=1):
        color = "#2b8a2b" if p["meets_target"] else "#1f5fa8"
        ax.scatter([x], [y], s=50, color=color, zorder=3)
        # numbers of points close to an earlier one go below their point, the others above
        crowded = any(abs(x - x0) < 0.15 and abs(y - y0) < 0.6 for x0, y0 in zip(xs[:n - 1], ys[:n - 1]))
        ax.annotate(str(n), (x, y), textcoords="offset points", xytext=(4, -12) if crowded else (4, 4),
                    fontsize=8, fontweight="bold")
        key.append(Line2D([], [], ls="", marker="o", color=color))
        names.append(f"{n}  {p['label']}: {y:.2f}%, {x:.3f}x")
    ax.set_xlim(min(xs + [0.9]) - 0.05, x_hi)
    ax.set_ylim(y_lo, 100.5)
    ax.set_xlabel("batch-1 p50 over today's chain, 2-core CPU, 1 thread (geometric mean of GLUE-5)")
    ax.set_ylabel("GLUE-5 dev, % of the held-out teacher (INT8 graph)")
    ax.set_title("MPNet-base accuracy-first chains: score against latency", fontsize=10)
    ax.legend(key, names, loc="upper left", bbox_to_anchor=(0, -0.16), fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(path + ".tmp.png", dpi=120)
    plt.close(fig)
    os.replace(path + ".tmp.png", path)


class _TaskFrom(argparse.Action):
    """``--task-from`` attaches to the ``--point`` before it (argparse reads options in order)."""

    def __call__(self, parser, namespace, values, option_string=None):
        if not namespace.point:
            raise SystemExit("--task-from must follow the --point it changes")
        task, ablation, variant = values
        if task not in TASKS:
            raise SystemExit(f"--task-from {task}: not one of {', '.join(TASKS)}")
        if namespace.task_from is None:   # a dict of this parse's own, not a default shared between parses
            namespace.task_from = {}
        namespace.task_from.setdefault(len(namespace.point) - 1, {})[task] = (ablation, variant)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--point", nargs=4, action="append", required=True,
                   metavar=("LABEL", "ABLATION_DIR", "VARIANT", "LATENCY_DIR"))
    p.add_argument("--task-from", nargs=3, action=_TaskFrom, default=None, metavar=("TASK", "ABLATION_DIR", "VARIANT"),
                   help="after a --point: that task's INT8 graph from another run of the same pipeline")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", required=True, help="OUT.json and OUT.png are written")
    a = p.parse_args(argv)
    args = argv if argv is not None else sys.argv[1:]
    task_from: Dict[int, Dict[str, tuple]] = a.task_from or {}
    points = []
    for n, (label, ablation, variant, latency) in enumerate(a.point):
        points.append({"label": label, "ablation": ablation, "variant": variant, "latency_dir": latency,
                       "accuracy": glue5(ablation, variant, task_from.get(n)),
                       "latency": latency_ratio(latency, a.threads)})
    for q in points:
        q["meets_target"] = (q["accuracy"]["retention"] >= TARGET_RETENTION
                             and q["latency"]["ratio"] <= TARGET_RATIO)
    command = "python -m bench.experiments.chain_tradeoff " + " ".join(shlex.quote(x) for x in args)
    record = {"command": command, "target": {"retention": TARGET_RETENTION, "ratio": TARGET_RATIO},
              "points": points}
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    write_json(a.out + ".json", record)
    plot(points, a.out + ".png")
    for q in points:
        print(f"{q['label']}: GLUE-5 {q['accuracy']['retention']}% at {q['latency']['ratio']}x "
              f"({'meets' if q['meets_target'] else 'misses'} the target)")
    print(f"wrote {a.out}.json and {a.out}.png")


if __name__ == "__main__":
    main()
