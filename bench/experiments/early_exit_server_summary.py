"""Early exit on the server CPU over the GLUE-5 tasks (issue 14): per task and as GLUE-5 means,
the early-exit chain (``recipes/mpnet/early-exit-holdout.yaml``) beside its own teacher in
PyTorch FP32, that teacher's fused INT8 without exits and optimum's O2 + INT8 of it, at batch 1
over real dev sentences, at every thread count the benches measured.

    python -m bench.experiments.early_exit_server_summary bench/results/mpnet-glue5/early-exit-server

Reads ``bench-{task}-cpu.json`` (``PHASE=eebench`` of ``mpnet_glue5_chain_gpu.sh``) and, for the
mean exit layer on dev, ``run-{task}/02-early_exit_export/record.json``. Every task's teacher is the
one fine-tuned with rows held out on that machine (the exits were calibrated on those rows), so
retention is against the teacher of the same bench. Early exit's time depends on the row: the
mean is reported beside the p50 (a row that runs every layer pays for the exits it passed).
Writes ``summary.md``, ``summary.json`` and ``summary.png`` (GLUE-5 score against mean latency),
each to a temporary name and renamed into place. A task whose bench is missing or lacks a
thread count is named, and no GLUE-5 mean is computed for that thread count.
"""
from __future__ import annotations

import argparse
import os
from typing import Dict, List, Optional, Sequence

from compressor.core.data import get_task
from compressor.core.io import read_json, save_figure, write_json, write_text
from compressor.core.results import read_results

TASKS = ("sst2", "mrpc", "stsb", "rte", "cola")
VARIANTS = (  # (name in the bench, label)
    ("teacher", "teacher, PyTorch FP32"),
    ("teacher-int8", "teacher, the toolkit's fused INT8 ONNX (no exits)"),
    ("ort-o2-int8", "optimum ORT O2 + dynamic INT8 (peer)"),
    ("early-exit-int8", "early exit, INT8 segments with layers 6-7 FP32"),
)
EARLY, TEACHER = "early-exit-int8", "teacher"


def load(folder: str) -> Dict[str, dict]:
    """task -> {"rows": {(variant, threads): row}, "exit_layer": mean exit layer on dev or None,
    "command": the bench's command, "fingerprint": its machine}."""
    found = {}
    for task in TASKS:
        path = os.path.join(folder, f"bench-{task}-cpu.json")
        if not os.path.exists(path):
            continue
        results = read_results(path)
        record_path = os.path.join(folder, f"run-{task}", "02-early_exit_export", "record.json")
        record = read_json(record_path) if os.path.exists(record_path) else {}
        found[task] = {
            "rows": {(r["name"], r["threads"]): r for r in results["rows"]
                     if r.get("batch_size") == 1 and r.get("latency_ms")},
            "exit_layer": record.get("mean_exit_layer"),
            "complete": results.get("config", {}).get("complete", True),
            "command": results.get("command"),
            "fingerprint": results.get("fingerprint") or {},
        }
    return found


def summarise(found: Dict[str, dict]) -> dict:
    """Per task and thread count each variant's score, p50 and mean; GLUE-5 means where all five
    tasks have the thread count; the early exit's ratios against the others."""
    threads = sorted({t for f in found.values() for (_, t) in f["rows"]})
    per_task: List[dict] = []
    for task, f in found.items():
        for t in threads:
            for name, _ in VARIANTS:
                r = f["rows"].get((name, t))
                if r is not None:
                    per_task.append({"task": task, "threads": t, "variant": name, "score": r["value"],
                                     "p50_ms": r["latency_ms"]["p50"], "mean_ms": r["latency_ms"]["mean"],
                                     "p90_ms": r["latency_ms"]["p90"]})
    glue5, missing = {}, {}
    for t in threads:
        lacking = [task for task in TASKS if task not in found or
                   any((name, t) not in found[task]["rows"] for name, _ in VARIANTS)]
        if lacking:
            missing[t] = lacking
            continue
        glue5[t] = {name: {key: sum(p[key] for p in per_task if p["threads"] == t and p["variant"] == name)
                                / len(TASKS) for key in ("score", "p50_ms", "mean_ms")}
                    for name, _ in VARIANTS}
    ratios = {}   # early exit's speed-up over each other variant, GLUE-5 means, p50 and mean
    for t, means in glue5.items():
        e = means[EARLY]
        ratios[t] = {name: {"p50": means[name]["p50_ms"] / e["p50_ms"], "mean": means[name]["mean_ms"] / e["mean_ms"]}
                     for name, _ in VARIANTS if name != EARLY}
    teachers = [p["score"] for p in per_task if p["variant"] == TEACHER and p["threads"] == threads[0]] \
        if threads else []
    teacher_glue5 = sum(teachers) / len(TASKS) if len(teachers) == len(TASKS) else None
    return {"threads": threads, "per_task": per_task, "glue5": glue5, "missing": missing,
            "ratios": ratios, "teacher_glue5": teacher_glue5,
            "exit_layer": {task: f["exit_layer"] for task, f in found.items()},
            "incomplete": [task for task, f in found.items() if not f["complete"]]}


def markdown(found: Dict[str, dict], s: dict) -> str:
    label = dict(VARIANTS)
    lines = ["# Early exit on the server CPU, GLUE-5", "",
             "Batch 1 over each task's real dev sentences (up to 300), each variant in its own process, "
             "timed in rounds; scores on the whole dev split. The teacher of each task is fine-tuned with "
             "about a tenth of its training rows held out; the exits were calibrated on those rows "
             "(`recipes/mpnet/early-exit-holdout.yaml`), so nothing was chosen on dev.", ""]
    for t in s["threads"]:
        lines += [f"## {t} thread{'s' if t > 1 else ''}", "",
                  "| task | mean exit layer (of 12) | " + " | ".join(label[n] for n, _ in VARIANTS) + " |",
                  "|---|---:|" + "---:|" * len(VARIANTS)]
        for task in TASKS:
            if task not in found:
                continue
            cells = []
            for name, _ in VARIANTS:
                r = found[task]["rows"].get((name, t))
                cells.append("" if r is None else
                             f"{r['value']:.2f}; p50 {r['latency_ms']['p50']:.2f}, mean {r['latency_ms']['mean']:.2f} ms")
            layer = found[task]["exit_layer"]
            lines.append(f"| {get_task(task).folder} | {'' if layer is None else f'{layer:.2f}'} | " + " | ".join(cells) + " |")
        if t in s["glue5"]:
            means = s["glue5"][t]
            lines.append("| **GLUE-5** | | " + " | ".join(
                f"**{means[n]['score']:.2f}**; p50 {means[n]['p50_ms']:.2f}, mean {means[n]['mean_ms']:.2f} ms"
                for n, _ in VARIANTS) + " |")
            r = s["ratios"][t]
            lines += ["", "Early exit against the others (GLUE-5 means of p50 and of mean latency): " + "; ".join(
                f"{label[n]} {r[n]['p50']:.2f}x p50, {r[n]['mean']:.2f}x mean" for n in r) + "."]
            if s["teacher_glue5"]:
                lines.append(f"Early exit keeps {100 * means[EARLY]['score'] / s['teacher_glue5']:.1f}% of the "
                             f"teachers' GLUE-5 ({means[EARLY]['score']:.2f} against {s['teacher_glue5']:.2f}).")
        else:
            lines.append(f"\nNo GLUE-5 mean at {t} thread{'s' if t > 1 else ''}: "
                         f"{', '.join(s['missing'][t])} not measured there.")
        lines.append("")
    if s["incomplete"]:
        lines += [f"Benches marked incomplete: {', '.join(s['incomplete'])}.", ""]
    lines += ["![GLUE-5 score against mean latency](summary.png)", "", "## Measured by", ""]
    for task, f in found.items():
        fp = f["fingerprint"]
        host = f"{fp.get('processor', '')}, {fp.get('cores', '?')} cores, preset {fp.get('cpu_preset', '?')}"
        lines.append(f"- {get_task(task).folder} ({host}): `{f['command']}`")
    return "\n".join(lines) + "\n"


def plot(s: dict, path: str) -> Optional[str]:
    if not s["glue5"]:
        return None
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    threads = sorted(s["glue5"])
    fig, axes = plt.subplots(1, len(threads), figsize=(5.2 * len(threads), 4.2), squeeze=False)
    for ax, t in zip(axes[0], threads):
        for name, label in VARIANTS:
            m = s["glue5"][t][name]
            ax.scatter([m["mean_ms"]], [m["score"]], s=50, label=label)
            ax.annotate(name, (m["mean_ms"], m["score"]), textcoords="offset points", xytext=(5, 4), fontsize=8)
        ax.set_xscale("log")
        ax.set_xlabel("mean latency per sentence, GLUE-5 mean (ms, log)")
        ax.set_ylabel("GLUE-5 score (dev)")
        ax.set_title(f"server CPU, batch 1, {t} thread{'s' if t > 1 else ''}")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return save_figure(fig, path)


def main(argv: Optional[Sequence[str]] = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder")
    args = parser.parse_args(argv)
    found = load(args.folder)
    s = summarise(found)
    write_json(os.path.join(args.folder, "summary.json"),
               {**s, "glue5": {str(t): v for t, v in s["glue5"].items()},
                "ratios": {str(t): v for t, v in s["ratios"].items()},
                "missing": {str(t): v for t, v in s["missing"].items()}})
    write_text(os.path.join(args.folder, "summary.md"), markdown(found, s))
    plot(s, os.path.join(args.folder, "summary.png"))
    print(f"written: {os.path.join(args.folder, 'summary.md')}")
    return s


if __name__ == "__main__":
    main()
