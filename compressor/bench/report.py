"""``compressor report``: what each variant scores and how fast it runs, as markdown, HTML and JSON.

Inputs are recipe run folders (their stage records, and the results of a
``bench`` stage inside them) and results files (``compressor.core.results``
format). Every variant becomes rows in that same format; the report shows,
per variant, the batch-1 latency at each thread count measured beside its
score, each variant's speed-up from more threads, a
latency-versus-score scatter with the Pareto frontier marked, and the
machine's fingerprint.
"""
from __future__ import annotations

import base64
import glob
import html
import io
import os
import re
from typing import Dict, List, Optional, Sequence

from compressor.bench.harness import noisy, noisy_line
from compressor.core.errors import CompressorError
from compressor.core.io import read_json, write_bytes, write_text
from compressor.core.presets import detect_preset
from compressor.core.results import FORMAT, row, run_command, shown_path

RESULTS_NAME = "results.json"
GROUP_COLOURS = {"teacher": "#d62728", "ours": "#1f77b4", "peer": "#7f7f7f"}
PEER_LABELS = {"pytorch-fp32": "PyTorch FP32", "pytorch-int8": "PyTorch dynamic INT8",
               "ort-fp32": "ORT FP32", "ort-o2": "ORT O2", "ort-o2-int8": "ORT O2 + dynamic INT8",
               "inc-int8": "INC INT8", "openvino-fp32": "OpenVINO FP32", "openvino-int8": "OpenVINO + NNCF INT8"}


# -- reading -----------------------------------------------------------------

def collect(paths: Sequence[str]) -> List[dict]:
    """Rows of every run folder and results file given, each with the command that made it."""
    rows: List[dict] = []
    for path in paths:
        if os.path.isdir(path):
            rows += _run_rows(path)
        elif os.path.isfile(path):
            rows += _file_rows(path)
        else:
            raise CompressorError(f"report: no such run folder or results file: {path}")
    return rows


def _file_rows(path: str) -> List[dict]:
    doc = read_json(path)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise CompressorError(f"{path}: not a results file (format {FORMAT})")
    out = []
    for r in doc.get("rows", []):
        r = dict(r)
        r.setdefault("command", doc.get("command"))
        r.setdefault("results_file", shown_path(path))
        r.setdefault("fingerprint", doc.get("fingerprint"))
        if (doc.get("config") or {}).get("complete") is False:
            r["incomplete"] = True   # a benchmark stopped before its last thread count
        if doc.get("warnings"):
            r["file_warnings"] = list(doc["warnings"])   # what its producer warned of, for every row
        out.append(r)
    words = variant_words(out)
    for r in out:
        if r["name"] in words:
            r.setdefault("extra", {})
            r["extra"] = {**(r["extra"] or {}), "variant": words[r["name"]]}
    return out


def _folder_kind(folder: str) -> str:
    """What a folder holds, in words (its kind's loader), for an error message."""
    from compressor.core.loaders import loader_of

    try:
        return loader_of(folder).describe
    except CompressorError:
        return "a folder whose manifest.json is not a run's"


def _run_rows(folder: str) -> List[dict]:
    manifest_file = os.path.join(folder, "manifest.json")
    if not os.path.isfile(manifest_file):
        files = sorted(glob.glob(os.path.join(folder, "*.json")))
        docs = [f for f in files if _is_results(f)]
        if not docs:
            raise CompressorError(f"report: {folder} holds neither a run (manifest.json) nor results files")
        return [r for f in docs for r in _file_rows(f)]
    manifest = read_json(manifest_file)
    if not isinstance(manifest, dict) or not isinstance(manifest.get("stages"), list):
        # a model folder (an ONNX export, an OpenVINO IR folder) keeps a manifest.json too
        raise CompressorError(f"report: {folder} is {_folder_kind(folder)}, not a run folder; benchmark it "
                              f"first (compressor bench {folder} --out OUT) and report on OUT")
    teacher = next((s for s in manifest["stages"] if s.get("stage") == "teacher"), None)
    teacher_value = teacher.get("score") if teacher else None
    command = run_command(manifest.get("source"), folder)
    rows = []
    for s in manifest["stages"]:
        record_file = os.path.join(folder, s["dir"], "record.json")
        record = read_json(record_file) if os.path.isfile(record_file) else s
        if record.get("score") is not None:
            preset = record.get("preset")
            extra = {"stage": record.get("stage"), "kind": record.get("kind"),
                     "metrics": record.get("metrics"), "wall_time_s": record.get("wall_time_s"),
                     "config": record.get("config"), "layers": _layers(os.path.join(folder, s["dir"])),
                     "split": record.get("split"), "examples": record.get("examples"),
                     "preset": preset.get("name") if isinstance(preset, dict) else preset,
                     "warnings": record.get("warnings"), "holdout": record.get("holdout")}
            rows.append(row(s["dir"], manifest["task"], "+".join((record.get("metrics") or {}).keys()) or "score",
                            record.get("score"), teacher_value, parameters=record.get("parameters"),
                            size_bytes=record.get("size_bytes"), command=command,
                            extra={k: v for k, v in extra.items() if v is not None}))
        results = os.path.join(folder, s["dir"], RESULTS_NAME)
        if os.path.isfile(results):
            rows += _file_rows(results)
    words = variant_words(rows)   # the bench's rows of a stage's graph: that stage's words and preset
    presets = {r["name"]: r["extra"]["preset"] for r in rows if (r.get("extra") or {}).get("preset")}
    for r in rows:
        e = r.setdefault("extra", {})
        if r["name"] in words:
            e["variant"] = words[r["name"]]
        if r["name"] in presets:
            e.setdefault("preset", presets[r["name"]])
    return rows


def _layers(folder: str) -> Optional[int]:
    """The encoder layers of a stage folder's model (its ``compressor.json`` shape or ``config.json``)."""
    for name, keys in (("compressor.json", ("shape", "layers")), ("config.json", ("num_hidden_layers",))):
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            try:
                value = read_json(path)
                for k in keys:
                    value = value.get(k) if isinstance(value, dict) else None
            except CompressorError:
                value = None
            if isinstance(value, int):
                return value
    return None


def variant_words(rows: Sequence[dict]) -> Dict[str, str]:
    """{stage folder: what its model is, in words}, e.g. "3-layer student, 50% heads/FFN pruned,
    ONNX INT8 (dynamic)": built stage by stage from the stage rows' records (their ``config``,
    the layers their folder holds), each stage changing what the one before it made."""
    out: Dict[str, str] = {}
    role, layers, changes, onnx, precision = "teacher", None, [], False, "FP32"
    for r in rows:
        e = r.get("extra") or {}
        stage, cfg = e.get("stage"), e.get("config") or {}
        if not stage or r.get("latency_ms") or r.get("throughput") or r["name"] in out:
            continue
        if stage == "teacher":
            role, layers, changes, onnx, precision = "teacher", None, [], False, "FP32"
        elif stage in ("distill", "theseus"):
            student = cfg.get("student") if isinstance(cfg.get("student"), dict) else {}
            role, changes = "student", []
            layers = student.get("num_layers") or cfg.get("num_layers") or cfg.get("layers") or None
            if stage == "theseus":
                changes = ["layers replaced (Theseus)"]
        elif stage == "prune":
            method = cfg.get("method", "structured")
            if method == "structured":
                heads, ffn = cfg.get("heads", 0.5), cfg.get("ffn", 0.0)
                changes.append(f"{heads:.0%} heads/FFN pruned" if heads == ffn
                               else ", ".join(f"{share:.0%} {what} pruned" for share, what in
                                              ((heads, "heads"), (ffn, "FFN")) if share))
            elif method == "vocab":
                changes.append("vocabulary pruned")
            elif method == "magnitude":
                changes.append(f"{cfg.get('sparsity', 0.9):.0%} of weights zeroed")
            elif method != "layers":   # layers: the count says it
                changes.append(f"{method} pruned")
        elif stage == "share":
            changes.append("layers shared")
        elif stage == "early_exit":
            changes.append("early exit")
        elif stage in ("export", "early_exit_export"):
            onnx = True
        elif stage == "quantize":
            onnx, precision = True, "INT8" + (f" ({cfg['method']})" if cfg.get("method") else "")
        elif stage == "quantize_torch":
            precision = "INT8" + (f" ({cfg['method']})" if cfg.get("method") else "")
        layers = e.get("layers") or layers
        who = f"{layers}-layer {role}" if layers else role
        out[r["name"]] = ", ".join([who, *changes, ("ONNX " if onnx else "") + precision])
    return out


def _is_results(path: str) -> bool:
    try:
        doc = read_json(path)
    except CompressorError:
        return False
    return isinstance(doc, dict) and doc.get("format") == FORMAT


# -- choosing what to show -----------------------------------------------------

def timed_tasks(rows: Sequence[dict]) -> List[str]:
    """The tasks whose batch-1 latency the rows hold, sorted (one entry, maybe "", for untagged rows)."""
    return sorted({r.get("task") or "" for r in rows if r.get("batch_size") == 1 and r.get("latency_ms")})


def of_task(rows: Sequence[dict], task: Optional[str]) -> List[dict]:
    """The rows of one task (all of them for ``task`` None): a variant is timed and compared against
    the teacher and peers of its own task, never another's."""
    return list(rows) if task is None else [r for r in rows if (r.get("task") or "") == task]


def variants(rows: Sequence[dict], threads: Optional[int] = None, task: Optional[str] = None) -> Dict[str, object]:
    """One line per measured variant: its batch-1 latency at ``threads`` and best throughput.

    Returns ``{"threads", "lines", "fingerprint"}``; lines carry speed-ups
    versus the teacher and versus the fastest peer, and whether the variant is
    on the Pareto frontier (no other is both faster and better scoring).
    Rows of several tasks need ``task`` (one task's lines; a name is one line per task).
    """
    tasks = timed_tasks(rows)
    if task is None and len(tasks) > 1:
        raise CompressorError(f"report: the timings cover several tasks ({', '.join(tasks)}); "
                              "compare one task's variants at a time")
    rows = of_task(rows, task)
    timed = [r for r in rows if r.get("batch_size") == 1 and r.get("latency_ms")]
    counts = sorted({r.get("threads") for r in timed if r.get("threads")})
    if threads is None and counts:
        threads = counts[0]
    if threads is not None and counts and threads not in counts:
        raise CompressorError(f"report: no latency measured at {threads} threads (measured: "
                              f"{', '.join(map(str, counts))})")
    lines: Dict[str, dict] = {}
    for r in timed:
        if r.get("threads") == threads:
            lines[r["name"]] = {**r, "p50": r["latency_ms"]["p50"], "p90": r["latency_ms"]["p90"],
                                "p99": r["latency_ms"].get("p99"), "mean": r["latency_ms"].get("mean")}
    for r in rows:
        if r.get("throughput") and r["name"] in lines and r.get("threads") == threads:
            best = lines[r["name"]].get("throughput_best")
            if best is None or r["throughput"] > best[1]:
                lines[r["name"]]["throughput_best"] = (r["batch_size"], r["throughput"])
    # a run's stage rows (same names as its bench rows) know parameters the timings may lack
    for r in rows:
        v = lines.get(r["name"])
        if v is not None and not r.get("latency_ms"):
            for key in ("parameters", "size_bytes"):
                if v.get(key) is None and r.get(key) is not None:
                    v[key] = r[key]
    teacher = next((v for v in lines.values() if _group(v) == "teacher"), None)
    peers = [v for v in lines.values() if _group(v) == "peer"]
    best_peer = min(peers, key=lambda v: v["p50"]) if peers else None
    for v in lines.values():
        v["speedup_teacher"] = round(teacher["p50"] / v["p50"], 2) if teacher else None
        v["speedup_best_peer"] = round(best_peer["p50"] / v["p50"], 2) if best_peer else None
    frontier = pareto([v for v in lines.values() if v.get("value") is not None])
    for v in lines.values():
        v["pareto"] = v["name"] in frontier
    fp = next((r.get("fingerprint") for r in timed if r.get("fingerprint")), None)
    ordered = sorted(lines.values(), key=lambda v: ({"teacher": 0, "ours": 1, "peer": 2}.get(_group(v), 3), v["p50"]))
    return {"threads": threads, "lines": ordered, "best_peer": best_peer["name"] if best_peer else None,
            "fingerprint": fp}


def json_rows(rows: Sequence[dict], threads: Optional[int] = None) -> List[dict]:
    """One row per variant and task (``compressor report --json``): its batch-1 timing where measured,
    compared within its task."""
    timed, scaling = {}, {}
    for task in timed_tasks(rows):
        task_rows = of_task(rows, task)
        timed.update({(v["name"], task): v for v in variants(task_rows, threads)["lines"]})
        scaling.update({(v["name"], task): v for v in thread_scaling(task_rows)})
    out, seen = [], set()
    for r in rows:
        name, key = r["name"], (r["name"], r.get("task") or "")
        if key in seen:
            continue
        seen.add(key)
        if key in timed:
            v = timed[key]
            item = {k: v.get(k) for k in ("name", "task", "metric", "value", "teacher_value", "retention",
                                          "parameters", "size_bytes", "engine", "device", "threads",
                                          "batch_size", "latency_ms", "command")}
            item["extra"] = {**(v.get("extra") or {}), "speedup_teacher": v["speedup_teacher"],
                             "speedup_best_peer": v["speedup_best_peer"], "pareto": v["pareto"],
                             "throughput_best": v.get("throughput_best")}
            if key in scaling and len(scaling[key]["p50"]) > 1:
                item["extra"]["p50_ms_by_threads"] = scaling[key]["p50"]
                item["extra"]["speedup_by_threads"] = scaling[key]["speedup"]
        else:
            item = {k: r.get(k) for k in ("name", "task", "metric", "value", "teacher_value", "retention",
                                          "parameters", "size_bytes", "command", "extra")}
        out.append(item)
    return out


def pareto(points: Sequence[dict]) -> set:
    """Names of the points no other point beats on both latency (lower) and score (higher)."""
    names = set()
    for p in points:
        dominated = any(q is not p and q["p50"] <= p["p50"] and q["value"] >= p["value"]
                        and (q["p50"] < p["p50"] or q["value"] > p["value"]) for q in points)
        if not dominated:
            names.add(p["name"])
    return names


def _label(v: dict) -> str:
    """A peer's readable name (with its quantisation preset), else the variant's own name."""
    label = PEER_LABELS.get(v["name"], v["name"])
    source = (v.get("extra") or {}).get("source") or ""
    preset = re.search(r"\((avx2|avx512_vnni|avx512|arm64)\)", source)
    return f"{label} ({preset.group(1)})" if preset and _group(v) == "peer" else label


def _group(v: dict) -> str:
    return (v.get("extra") or {}).get("group", "ours")


def _words(v: dict) -> str:
    """A variant in words: a peer's readable name, a stage's words (``variant_words``), else its name."""
    if _group(v) == "peer":
        return _label(v)
    return (v.get("extra") or {}).get("variant") or v["name"]


def row_warnings(v: dict) -> List[tuple]:
    """What a row's figures must be read with: ``[(affects, text)]``, ``affects`` "latency",
    "score" or "all". The warnings its producer recorded (the row's ``extra.warnings``, the results
    file's ``warnings``), and those the bench's own records imply: other processes' share of the CPU
    while timing above the bench's threshold, a VNNI/AMX preset's INT8 graph run on a CPU where its
    products saturate (its score there is wrong), bf16 on a CPU that emulates it."""
    e = v.get("extra") or {}
    out: List[tuple] = []
    share = e.get("other_cpu_share")
    if v.get("latency_ms") and noisy(share):
        out.append(("latency", noisy_line(share)))
    for text in list(e.get("warnings") or []) + list(v.get("file_warnings") or []):
        if not any(text == t for _, t in out):
            out.append(("latency" if "other processes used" in text else "all", text))
    fp = v.get("fingerprint") or {}
    flags = set(fp.get("cpu_flags") or [])
    x86 = (fp.get("machine") or "x86_64").lower() in ("x86_64", "amd64")
    precision = str(e.get("precision") or "")
    preset = e.get("preset") or _preset_in(e.get("source"))
    if (flags and x86 and v.get("engine") == "onnxruntime" and "int8" in precision
            and preset in ("avx512_vnni", "amx") and detect_preset(flags, "x86_64") == "avx2"):
        out.append(("score", f"the {preset} preset's INT8 graph saturates on this CPU (AVX2 without VNNI): "
                             "its score measured here is wrong"))
    if precision == "bf16" and (v.get("device") or "cpu") == "cpu" and flags and x86 \
            and not flags & {"avx512_bf16", "amx_bf16"}:
        out.append(("latency", "bf16 on this CPU (no AVX-512 BF16 or AMX) is emulated: several times "
                               "slower than on a CPU with bf16"))
    return out


def _preset_in(source) -> Optional[str]:
    found = re.search(r"\((avx2|avx512_vnni|amx|arm64)\)", source or "")
    return found.group(1) if found else None


# -- writing -----------------------------------------------------------------

def plot_name(task: str, tasks: Sequence[str]) -> str:
    """The plot file of one task's speed section: ``report.png``, or ``report-TASK.png`` for several."""
    return "report.png" if len(tasks) < 2 else f"report-{task or 'untagged'}.png"


def markdown(rows: Sequence[dict], title: str = "Compression report", threads: Optional[int] = None,
             plot_file=None) -> str:
    """The report. ``plot_file``: the plot's file name (one task), or {task: file name}; a speed
    section per task when the timings cover several."""
    lines = [f"# {title}", ""]
    stopped = sorted({r.get("results_file") or "?" for r in rows if r.get("incomplete")})
    if stopped:
        lines += ["Incomplete: " + ", ".join(f"`{f}`" for f in stopped) + " stopped before every thread "
                  "count was measured; what it finished is shown.", ""]
    stage_rows = [r for r in rows if (r.get("extra") or {}).get("stage")]
    differs = two_scores(rows)
    if stage_rows:
        held = any((r["extra"].get("holdout") or {}).get("score") is not None for r in stage_rows)
        lines += ["## Stages", "",
                  "| stage | variant | kind | parameters | size (MB) | metrics | score | vs teacher | "
                  + ("held-out | vs teacher (held-out) | " if held else "") + "time (s) |",
                  "|---|---|---|---:|---:|---|---:|---:|" + ("---:|---:|" if held else "") + "---:|"]
        for r in stage_rows:
            e = r["extra"]
            metrics = ", ".join(f"{k} {v:.4f}" for k, v in (e.get("metrics") or {}).items())
            mark = "†" if r["name"] in differs else ""
            h = e.get("holdout") or {}
            lines.append(f"| {r['name']} | {e.get('variant') or ''} | {e.get('kind') or ''} | "
                         f"{_int(r.get('parameters'))} | {_mb(r.get('size_bytes'))} | {metrics} | "
                         f"{_num(r.get('value'))}{mark} | {_pct(r.get('retention'))} | "
                         + (f"{_num(h.get('score'))} | {_pct(h.get('retention'))} | " if held else "")
                         + f"{_num(e.get('wall_time_s'), 0)} |")
        lines += ["", "Scores are the task's GLUE metric(s) on the dev split, x100 (a task with two "
                  "metrics scores their mean). Each stage's full record is `NN-<stage>/record.json`."]
        if held:
            rows_held = next(r["extra"]["holdout"].get("rows") for r in stage_rows if r["extra"].get("holdout"))
            lines.append(f"Held-out: the {rows_held} training rows the teacher was fine-tuned without (no "
                         "stage trains on them); choose between runs on these, not on dev.")
        lines.append("")
        stage_warnings = [f"- **Warning** (`{r['name']}`): {t}" for r in stage_rows
                          for t in (r["extra"].get("warnings") or [])]
        lines += stage_warnings + ([""] if stage_warnings else [])
        lines += _two_scores_note(differs)
    glue = _glue_table(rows)
    lines += glue
    scored = [r for r in rows if r.get("value") is not None and not r.get("latency_ms")
              and not r.get("throughput") and not (r.get("extra") or {}).get("stage")]
    if scored and not glue:   # results without timings (training runs): their scores
        lines += ["## Scores", "", "| variant | task | metric | score | vs teacher | parameters |",
                  "|---|---|---|---:|---:|---:|"]
        lines += [f"| {r['name']} | {r.get('task') or ''} | {r.get('metric') or ''} "
                  f"| {_num(r.get('value'))} | {_pct(r.get('retention'))} | {_int(r.get('parameters'))} |"
                  for r in scored]
        lines.append("")
    tasks = timed_tasks(rows)
    plots = plot_file if isinstance(plot_file, dict) else {task: plot_file for task in tasks}
    fingerprint = None
    for task in tasks:
        task_rows = of_task(rows, task) if len(tasks) > 1 else rows
        view = variants(task_rows, threads)
        if not view["lines"]:
            continue
        fingerprint = fingerprint or view["fingerprint"]
        named = f"{task}: " if len(tasks) > 1 else ""
        t = view["threads"]
        lines += [f"## {named}Speed and score (batch 1, {t} thread{'s' if t != 1 else ''})", ""]
        warned = _warning_lines(view["lines"])
        lines += warned + ([""] if warned else [])
        if plots.get(task):
            lines += [f"![latency versus score]({plots[task]})", ""]
            if warned:
                lines += ["*The plot's figures carry the warnings above (its footnote says so too).*", ""]
        lines += _speed_table(view, differs)
        counts = thread_counts(task_rows) if threads is None else [t]
        for other in [c for c in counts if c != t]:   # every other thread count measured
            lines += ["", f"## {named}Speed and score (batch 1, {other} thread{'s' if other != 1 else ''})", ""]
            other_view = variants(task_rows, other)
            warned = _warning_lines(other_view["lines"])
            lines += warned + ([""] if warned else [])
            lines += _speed_table(other_view, differs)
        if len(counts) > 1:
            lines += ["", *_threads_table(task_rows, counts, named)]
        lines.append("")
    if tasks:
        isolated = any((r.get("extra") or {}).get("timing") for r in rows if r.get("latency_ms"))
        how = ("each variant in a process of its own, the variants timed in turn in rounds "
               "(the results' `extra.timing`)" if isolated else "variants interleaved in one process")
        lines += ["", f"Latency: per sentence at its real length, no padding, {how}; speed-ups compare "
                  "p50. Pareto: no other variant is both faster and better scoring.", ""]
        commands = sorted({r.get("command") for r in rows if r.get("command") and r.get("latency_ms")})
        if commands:
            lines += ["Measured by: " + "; ".join(f"`{c}`" for c in commands), ""]
        if fingerprint:
            lines += ["## Machine", "", _fingerprint_text(fingerprint), ""]
    return "\n".join(lines)


def thread_counts(rows: Sequence[dict]) -> List[int]:
    """The thread counts at which batch-1 latency was measured, fewest first."""
    return sorted({r["threads"] for r in rows if r.get("batch_size") == 1 and r.get("latency_ms")
                   and r.get("threads")})


def thread_scaling(rows: Sequence[dict]) -> List[dict]:
    """Per variant: its batch-1 p50 at each thread count and its speed-up over its own p50 at the
    fewest threads measured (``{"name", "group", "p50": {threads: ms}, "speedup": {threads: x}}``)."""
    out: Dict[str, dict] = {}
    for r in rows:
        if r.get("batch_size") == 1 and r.get("latency_ms") and r.get("threads"):
            line = out.setdefault(r["name"], {"name": r["name"], "group": _group(r), "p50": {}, "speedup": {}})
            line["p50"][r["threads"]] = r["latency_ms"]["p50"]
    for line in out.values():
        base = line["p50"][min(line["p50"])]
        line["speedup"] = {t: round(base / p, 2) for t, p in sorted(line["p50"].items())}
    return sorted(out.values(), key=lambda v: ({"teacher": 0, "ours": 1, "peer": 2}.get(v["group"], 3),
                                               v["p50"][min(v["p50"])]))


def _threads_table(rows: Sequence[dict], counts: Sequence[int], named: str = "") -> List[str]:
    lines = [f"## {named}Threads", "", "p50 per sentence (batch 1, ms) at each thread count, and each variant's "
             f"speed-up over its own {counts[0]}-thread p50.", "",
             "| variant | group | " + " | ".join(f"p50 @ {c}" for c in counts) + " | "
             + " | ".join(f"speed-up @ {c}" for c in counts[1:]) + " |",
             "|---|---|" + "---:|" * (2 * len(counts) - 1)]
    for v in thread_scaling(rows):
        lines.append(f"| {v['name']} | {v['group']} | "
                     + " | ".join(_num(v["p50"].get(c)) for c in counts) + " | "
                     + " | ".join(_x(v["speedup"].get(c) if c in v["p50"] else None) for c in counts[1:]) + " |")
    return lines


def two_scores(rows: Sequence[dict]) -> Dict[str, dict]:
    """The graphs scored twice with different results: {name: {"stage", "bench", "stage_rows",
    "bench_rows"}} where a run's stage record and its bench scored one graph (one stage folder)
    differently, e.g. when the stage's scorer then differed from the bench's (other tokenisation,
    session or threads). A current run scores both through ``export.onnx.score_onnx``."""
    stages = {r["name"]: r for r in rows if (r.get("extra") or {}).get("stage") and r.get("value") is not None}
    out: Dict[str, dict] = {}
    for r in rows:
        s = stages.get(r["name"])
        if s is None or not r.get("latency_ms") or r.get("value") is None or r.get("task") != s.get("task"):
            continue
        if round(r["value"], 2) != round(s["value"], 2):
            out[r["name"]] = {"stage": s["value"], "bench": r["value"],
                              "stage_rows": (s["extra"] or {}).get("examples"),
                              "bench_rows": (r.get("extra") or {}).get("scored_rows")}
    return out


def _rows_said(n) -> str:
    return f"{n} dev rows" if n else "the dev split"


def _two_scores_note(differs: Dict[str, dict]) -> List[str]:
    if not differs:
        return []
    return ["† Two measurements of one graph: " + "; ".join(
        f"`{name}` scored {d['stage']:.2f} when its stage scored it ({_rows_said(d['stage_rows'])}, the "
        f"stage's scorer) and {d['bench']:.2f} when the bench scored it ({_rows_said(d['bench_rows'])}, one "
        "sentence at a time in the bench's worker)" for name, d in differs.items())
        + ". The stage table shows the stage's figure, the speed tables and the plot the bench's (the "
        "figure measured beside the timings); the code that made this run scored them by different paths "
        "(a run made now scores both through `export.onnx.score_onnx`, one figure).", ""]


def _warning_lines(lines: Sequence[dict]) -> List[str]:
    """One markdown line per warning the shown variants' figures carry, naming the variants."""
    groups: Dict[tuple, List[str]] = {}
    for v in lines:
        for affects, text in row_warnings(v):
            groups.setdefault((affects, text), []).append(v["name"])
    out = []
    for (affects, text), names in groups.items():
        who = ("every variant" if len(names) == len(lines) and len(lines) > 1
               else ", ".join(f"`{n}`" for n in names))
        what = {"latency": "latencies and speed-ups", "score": "scores"}.get(affects, "figures")
        out.append(f"- **Warning** ({who}; their {what} are marked ⚠): {text}")
    return out


def _warned(v: dict, what: str) -> str:
    return " ⚠" if any(a in (what, "all") for a, _ in row_warnings(v)) else ""


def numbered(view: dict) -> bool:
    """Whether the plot names its points by number (many points): the tables then show the numbers."""
    return len([v for v in view["lines"] if v.get("value") is not None]) > DENSE


DENSE = 14   # more scored points than this: the plot numbers them instead of naming them


def _speed_table(view: dict, differs: Optional[Dict[str, dict]] = None) -> List[str]:
    """One thread count's table of every variant (in words, its row name beside it), and the peers line."""
    t = view["threads"]
    differs = differs or {}
    numbers = _point_numbers(view) if numbered(view) else {}
    lines = ["| variant | name | group | engine | precision | parameters | size (MB) | score | retention "
             "| p50 (ms) | p90 (ms) | mean (ms) | vs teacher | vs best peer | throughput (sent/s @ batch) "
             "| peak RSS (MB) | Pareto |",
             "|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:-:|"]
    for v in view["lines"]:
        tp = v.get("throughput_best")
        slow, wrong = _warned(v, "latency"), _warned(v, "score")
        number = f"({numbers[v['name']]}) " if v["name"] in numbers else ""
        lines.append(
            f"| {number}{_words(v)} | {v['name']} | {_group(v)} | {v.get('engine', '')} "
            f"| {(v.get('extra') or {}).get('precision', '')} "
            f"| {_int(v.get('parameters'))} | {_mb(v.get('size_bytes'))} | {_num(v.get('value'))}"
            f"{'†' if v['name'] in differs else ''}{wrong} "
            f"| {_pct(v.get('retention'))} | {v['p50']:.2f}{slow} | {v['p90']:.2f} | {_num(v.get('mean'))} "
            f"| {_x(v['speedup_teacher'])}{slow if v['speedup_teacher'] else ''} "
            f"| {_x(v['speedup_best_peer'])} | {f'{tp[1]:.0f} @ {tp[0]}' if tp else ''} "
            f"| {_num((v.get('extra') or {}).get('peak_rss_mb'), 0)} | {'yes' if v['pareto'] else ''} |")
    peers = [v for v in view["lines"] if _group(v) == "peer"]
    teacher = next((v for v in view["lines"] if _group(v) == "teacher" and v.get("engine") == "pytorch"
                    and (v.get("extra") or {}).get("precision") == "fp32"), None)
    if teacher and not any(v["name"] == "pytorch-fp32" for v in peers):
        peers.append({**teacher, "name": "pytorch-fp32"})  # the teacher as it is is that peer
    if peers:
        base = next((v for v in peers if v["name"] == "pytorch-fp32"), peers[0])
        lines += ["", "**Peers** (p50, batch 1, real dev lengths, "
                  f"{t} thread{'s' if t != 1 else ''}; ratio to {PEER_LABELS.get(base['name'], base['name'])}): "
                  + ", ".join(f"{_label(v)} {v['p50']:.1f} ms "
                              f"({base['p50'] / v['p50']:.2f}x)" for v in sorted(peers, key=lambda v: -v["p50"]))]
    return lines


def _glue_table(rows: Sequence[dict]) -> List[str]:
    """Score per task and the GLUE score (mean over tasks) of variants measured on several tasks."""
    tasks = sorted({r.get("task") for r in rows if r.get("task") and r.get("value") is not None})
    if len(tasks) < 2:
        return []
    scores: Dict[str, Dict[str, float]] = {}
    for r in rows:
        if r.get("value") is not None:
            scores.setdefault(r["name"], {}).setdefault(r["task"], r["value"])
    out = ["## Score per task", "", "| variant | " + " | ".join(tasks) + " | GLUE score (tasks given) |",
           "|---|" + "---:|" * (len(tasks) + 1)]
    for name, per_task in scores.items():
        merged: Dict[str, List[float]] = {}
        for task, value in per_task.items():  # MNLI matched and mismatched count as one task
            merged.setdefault("mnli" if task in ("mnli", "mnli_mm") else task, []).append(value)
        glue = sum(sum(v) / len(v) for v in merged.values()) / len(merged)
        cells = [_num(per_task.get(t)) for t in tasks]
        out.append(f"| {name} | " + " | ".join(cells) + f" | {glue:.2f} ({len(merged)}) |")
    return out + ["", "The GLUE score averages the tasks a variant was scored on (MNLI matched and "
                  "mismatched count as one), so it compares only variants scored on the same tasks.", ""]


def plot_png(rows: Sequence[dict], threads: Optional[int] = None, task: Optional[str] = None) -> Optional[bytes]:
    """The latency-versus-score scatter of one task's variants, frontier drawn, as PNG bytes (None
    without timings; ``task`` is needed where the timings cover several)."""
    view = variants(rows, threads, task)
    points = [v for v in view["lines"] if v.get("value") is not None]
    if not points:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9.5, 5.6), dpi=110)
    for group, colour in GROUP_COLOURS.items():
        pts = [p for p in points if _group(p) == group]
        if pts:
            ax.scatter([p["p50"] for p in pts], [p["value"] for p in pts], s=60, c=colour,
                       label=group, zorder=3, edgecolors="black", linewidths=0.5)
    curves: Dict[str, list] = {}
    for p in points:   # one model along a setting (an early-exit threshold sweep): one line
        curve = (p.get("extra") or {}).get("curve")
        if curve:
            curves.setdefault(curve, []).append(p)
    shades = ["#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#ff7f0e"]
    for i, (curve, pts) in enumerate(curves.items()):
        pts = sorted(pts, key=lambda p: p["p50"])
        ax.plot([p["p50"] for p in pts], [p["value"] for p in pts], "-", lw=1.2, color=shades[i % len(shades)],
                alpha=0.8, zorder=2, label=curve)
    frontier = sorted((p for p in points if p["pareto"]), key=lambda p: p["p50"])
    if frontier:
        xs = [p["p50"] for p in frontier]
        ys = [p["value"] for p in frontier]
        # a staircase: below the frontier's score nothing is faster
        ax.step(xs, ys, where="post", color="#2ca02c", lw=1.5, ls="--", zorder=2, label="Pareto frontier")
        ax.scatter(xs, ys, s=170, facecolors="none", edgecolors="#2ca02c", linewidths=1.6, zorder=4)
    ax.set_xscale("log")
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 7.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    lo, hi = min(p["p50"] for p in points), max(p["p50"] for p in points)
    ax.set_xlim(lo / 1.25, hi * 1.35)
    lo_y, hi_y = min(p["value"] for p in points), max(p["value"] for p in points)
    pad = max(hi_y - lo_y, 0.5) * 0.12
    ax.set_ylim(lo_y - pad, hi_y + pad)
    ax.set_xlabel(f"p50 latency per sentence, batch 1, {view['threads']} thread(s) (ms, log scale)")
    task = points[0].get("task", "")
    ax.set_ylabel(f"{task} dev score (x100)")
    ax.set_title("Latency versus score (up and left is better)")
    ax.grid(True, which="both", alpha=0.3)
    numbers = _point_numbers(view) if numbered(view) else {}
    # outside the axes, so it covers no point
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, borderaxespad=0.0,
              title="points numbered as in the\nreport's speed table" if numbers else None,
              title_fontsize=7)
    notes = []
    for v in view["lines"]:
        for _, text in row_warnings(v):
            if text not in notes:
                notes.append(text)
    if notes:   # the figures' warnings go with the figure
        import textwrap

        fig.text(0.01, 0.01, "\n".join(textwrap.fill("Warning: " + n, 150) for n in notes), fontsize=7,
                 color="#b00", va="bottom", ha="left")
    fig.tight_layout(rect=(0, 0.035 * len(notes) + (0.02 if notes else 0), 1, 1))
    _label_points(ax, points, numbers)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight", pad_inches=0.15)
    plt.close(fig)
    return buf.getvalue()


def _point_numbers(view: dict) -> Dict[str, int]:
    """{variant: its number}, in the speed table's order, for a plot with many points."""
    scored = [v for v in view["lines"] if v.get("value") is not None]
    return {v["name"]: i for i, v in enumerate(scored, 1)}


def _label_points(ax, points, numbers: Optional[Dict[str, int]] = None) -> None:
    """Name every point (by its words, or by number where ``numbers``): each label goes to the first
    spot around its point, moving outwards, that overlaps no other label and no point and stays
    inside the axes (so never over the title); a label away from its point gets a leader line."""
    fig = ax.figure
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    scale = fig.dpi / 72.0
    xy = [tuple(ax.transData.transform((p["p50"], p["value"]))) for p in points]
    marks = [(x - 7, y - 7, x + 7, y + 7) for x, y in xy]  # the markers (and Pareto rings), display px
    placed: List[tuple] = []

    def free(box) -> bool:
        x0, y0, x1, y1 = box
        if x0 < frame.x0 + 2 or x1 > frame.x1 - 2 or y0 < frame.y0 + 2 or y1 > frame.y1 - 2:
            return False
        return not any(x0 < b[2] and b[0] < x1 and y0 < b[3] and b[1] < y1 for b in placed + marks)

    order = sorted(range(len(points)), key=lambda i: (points[i]["p50"], -points[i]["value"]))
    for i in order:
        p, (x, y) = points[i], xy[i]
        text = str(numbers[p["name"]]) if numbers else _words(p)
        label = ax.annotate(text, (p["p50"], p["value"]), textcoords="offset points", xytext=(0, 0),
                            fontsize=7 if numbers else 8, zorder=5, ha="left", va="bottom")
        box = label.get_window_extent(renderer)
        w, h = box.width, box.height
        spot = None
        for r in (8, 14, 22, 32, 44, 58, 75, 95, 120):
            for ux, uy in ((1, 0.3), (1, -0.6), (-1, 0.3), (-1, -0.6), (0, 1), (0, -1.4),
                           (0.8, 0.9), (-0.8, 0.9), (0.8, -1.1), (-0.8, -1.1)):
                dx, dy = ux * r * scale, uy * r * scale
                x0 = x + dx if ux > 0 else (x + dx - w if ux < 0 else x - w / 2)
                y0 = y + dy
                cand = (x0, y0, x0 + w, y0 + h)
                if free(cand):
                    spot = cand
                    break
            if spot:
                break
        if spot is None:   # nowhere free: right of the point, as before
            spot = (x + 6 * scale, y + 4 * scale, x + 6 * scale + w, y + 4 * scale + h)
        placed.append(spot)
        off = ((spot[0] - x) / scale, (spot[1] - y) / scale)
        label.set_position(off)
        near = abs(off[0]) < 12 and abs(off[1]) < 12
        if not near:
            label.arrow_patch = None
            ax.annotate("", (p["p50"], p["value"]),
                        xytext=((spot[0] + spot[2]) / 2 / scale - x / scale, (spot[1] + spot[3]) / 2 / scale - y / scale),
                        textcoords="offset points",
                        arrowprops=dict(arrowstyle="-", color="#999", lw=0.5, shrinkA=0, shrinkB=3), zorder=1)


def plots(rows: Sequence[dict], threads: Optional[int] = None) -> Dict[str, bytes]:
    """Each timed task's plot: {file name: PNG bytes} (``plot_name``), tasks without a scored
    timing left out."""
    tasks = timed_tasks(rows)
    out = {}
    for task in tasks:
        png = plot_png(rows, threads, task if len(tasks) > 1 else None)
        if png:
            out[plot_name(task, tasks)] = png
    return out


def _plot_files(rows: Sequence[dict], pngs: Dict[str, bytes]) -> Dict[str, str]:
    """{task: its plot's file name} for the tasks ``plots`` drew."""
    tasks = timed_tasks(rows)
    return {task: plot_name(task, tasks) for task in tasks if plot_name(task, tasks) in pngs}


def html_page(rows: Sequence[dict], title: str, threads: Optional[int] = None,
              pngs: Optional[Dict[str, bytes]] = None) -> str:
    """A page with everything inline (CSS, the plots as base64 PNG): one file to send around."""
    pngs = plots(rows, threads) if pngs is None else pngs
    return html_document(title, markdown(rows, title, threads, plot_file=_plot_files(rows, pngs)), pngs)


PAGE_STYLE = ("body{{font-family:system-ui,sans-serif;max-width:{width}px;margin:2em auto;padding:0 1em;color:#222}}"
              "table{{border-collapse:collapse;margin:1em 0;font-size:13px}}th,td{{border:1px solid #ccc;"
              "padding:3px 7px;text-align:right}}td:first-child,th:first-child{{text-align:left}}"
              "th{{background:#f4f4f4}}img{{max-width:100%}}pre{{background:#f7f7f7;padding:1em;overflow:auto}}")


def html_document(title: str, md: str, png=None, width: int = 1200) -> str:
    """A report's markdown as one self-contained page: tables as tables, the plots (the markdown's
    image lines) inline as base64 PNG (``png``: bytes, or {file: bytes}, as ``md_to_html``)."""
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{PAGE_STYLE.format(width=width)}</style></head><body>{md_to_html(md, png)}</body></html>\n")


def md_to_html(md: str, png=None) -> str:
    """The subset of markdown the reports write: headings, tables, lists, code blocks, images.
    ``png``: the bytes of the one image, or {file named in the image line: bytes} for several."""
    out: List[str] = []
    table: List[List[str]] = []
    in_pre = in_list = False
    for line in md.splitlines() + [""]:
        if line.startswith("```"):
            out.append("</pre>" if in_pre else "<pre>")
            in_pre = not in_pre
            continue
        if in_pre:
            out.append(html.escape(line))
            continue
        if line.startswith("|"):
            table.append([c.strip() for c in line.strip().strip("|").split("|")])
            continue
        if table:
            out.append(_html_table(table))
            table = []
        if in_list and not line.startswith("- "):
            out.append("</ul>")
            in_list = False
        if re.fullmatch(r"</?details>|<summary>[^<>]*</summary>", line.strip()):
            out.append(line.strip())   # a collapsed block (the markdown's own HTML, as GitHub renders it)
            continue
        heading = re.match(r"(#{1,4}) (.*)", line)
        if heading:
            n = len(heading.group(1))
            out.append(f"<h{n}>{html.escape(heading.group(2))}</h{n}>")
        elif line.startswith("!["):
            image = re.match(r"!\[([^\]]*)\]\(([^)]*)\)", line)
            alt, name = (image.group(1), image.group(2)) if image else ("latency versus score", "")
            data = png.get(name) if isinstance(png, dict) else png
            if data:
                out.append(f'<img alt="{html.escape(alt)}" src="data:image/png;base64,'
                           + base64.b64encode(data).decode() + '">')
        elif line.startswith("- "):
            if not in_list:
                out.append("<ul>")
                in_list = True
            out.append(f"<li>{_inline(line[2:])}</li>")
        elif line.strip():
            out.append(f"<p>{_inline(line)}</p>")
    return "\n".join(out)


def _html_table(table: List[List[str]]) -> str:
    head, body = table[0], [r for r in table[1:] if not set("".join(r)) <= set("-:")]
    return ("<table><tr>" + "".join(f"<th>{_inline(c)}</th>" for c in head) + "</tr>"
            + "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in r) + "</tr>" for r in body) + "</table>")


def _inline(text: str) -> str:
    text = re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text, quote=False))
    return re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", text)


def write_report_files(paths: Sequence[str], out: Optional[str] = None, title: Optional[str] = None,
                       threads: Optional[int] = None, rows: Optional[List[dict]] = None) -> List[str]:
    """Write ``report.md``, ``report.png`` and ``report.html`` into ``out``; return their paths."""
    rows = collect(paths) if rows is None else rows
    if out is None:
        first = paths[0]
        if not (os.path.isdir(first) and os.path.isfile(os.path.join(first, "manifest.json"))):
            raise CompressorError("report: give --out (the first path is not a run folder)")
        out = first
    if title is None:
        title = _title(paths)
    os.makedirs(out, exist_ok=True)
    written = []
    pngs = plots(rows, threads)
    for name, png in pngs.items():
        path = os.path.join(out, name)
        write_bytes(path, png)
        written.append(path)
    md_path = os.path.join(out, "report.md")
    write_text(md_path, markdown(rows, title, threads, _plot_files(rows, pngs)))
    html_path = os.path.join(out, "report.html")
    write_text(html_path, html_page(rows, title, threads, pngs))
    return [md_path, html_path] + written


def _title(paths: Sequence[str]) -> str:
    first = paths[0]
    manifest = os.path.join(first, "manifest.json") if os.path.isdir(first) else None
    if manifest and os.path.isfile(manifest):
        m = read_json(manifest)
        return f"{m.get('recipe')}: {m.get('task')}"
    return "Compression report"


def print_rows(rows: Sequence[dict]) -> None:
    """A terminal summary of a benchmark: one line per variant, thread count and batch size."""
    import click

    for r in rows:
        lat = r.get("latency_ms")
        speed = (f"p50 {lat['p50']:7.2f} ms  p90 {lat['p90']:7.2f} ms" if lat
                 else f"{r.get('throughput', 0):8.1f} sentences/s")
        ways = r.get("throughput_by_batching")
        if ways:   # --batching padded,sorted: each way, and the padding-free gain
            speed = "  ".join(f"{way} {rate:.1f}/s" for way, rate in ways.items())
            if r.get("padding_free_speedup"):
                speed += f"  x{r['padding_free_speedup']:.2f}"
        score = f"{r['value']:.2f}" if r.get("value") is not None else "-"
        click.echo(f"{r['name']:<22} {r.get('engine', ''):<16} threads {r.get('threads')} "
                   f"batch {r.get('batch_size'):>3}  {speed}  score {score}")


def _fingerprint_text(fp: dict) -> str:
    v = fp.get("versions", {})
    keep = ("torch", "transformers", "onnxruntime", "onnx", "optimum", "optimum-onnx", "neural_compressor",
            "openvino", "nncf", "tokenizers", "numpy")
    parts = [f"CPU: {fp.get('processor')} ({fp.get('cores')} cores; flags {' '.join(fp.get('cpu_flags', []))}; "
             f"the quantisation preset `auto` picks {fp.get('cpu_preset')} here)"]
    if fp.get("gpu"):
        parts.append(f"GPU: {fp['gpu']} (CUDA {fp.get('cuda')})")
    parts.append(f"Python {fp.get('python')}, {fp.get('platform')}")
    parts.append("Libraries: " + ", ".join(f"{k} {v[k]}" for k in keep if k in v))
    return "\n".join(f"- {p}" for p in parts)


def _int(n) -> str:
    return f"{n:,}" if n else ""


def _mb(n) -> str:
    return f"{n / 1e6:.1f}" if n else ""


def _num(x, digits: int = 2) -> str:
    return f"{x:.{digits}f}" if x is not None else ""


def _pct(x) -> str:
    return f"{100 * x:.1f}%" if x is not None else ""


def _x(x) -> str:
    return f"{x:.2f}x" if x is not None else ""
