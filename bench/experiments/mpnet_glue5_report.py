"""The headline report of the MPNet-base GLUE-5 benchmark (issue 14): score, latency, size and
speed-up of every variant on every machine, the GLUE-5 means, and the issue's targets checked.

    python -m bench.experiments.mpnet_glue5_report bench/results/mpnet-glue5 [--out FOLDER]

Reads, under the results folder (any file may be missing: the report says which are, and
computes nothing in their place):

- ``server/bench-{task}-cpu.json``: ``compressor bench`` on the GPU machine's CPU (the server),
  all cores and 1 thread, the trained teacher, its peers (pytorch-int8, ort-o2, ort-o2-int8,
  inc-int8) and ours (teacher-int8, chain-int8, student-6L), each scored on the task's dev split;
- ``server/bench-{task}-gpu.json``: the same machine's GPU, FP32 and BF16, batch 1 and a large
  batch (student-6L, chain and the teacher);
- ``latency-{task}-cpu.json``: the 2-core machine (the edge CPU), 1 and 2 threads, timed on
  randomly initialised copies with the trained models' exact shapes
  (``bench/experiments/mpnet_glue5_latency.py``): their ``value`` is null, and each variant's score
  is the trained model's from the server bench of the same task (``EDGE_NAMES`` says which);
- ``summary.json`` (``bench/experiments/mpnet_glue5_summary.py``): dev scores of the other runs;
- ``server/commands-*.txt`` and ``latency-commands.sh``: the commands, for "how to rerun".

Writes into ``--out`` (default: the results folder), each file to a temporary name beside it and
renamed into place: ``report.md``, ``report.html`` (self-contained), ``report.png`` (latency versus
score per task and GLUE-5) and ``report.json`` (the numbers behind the tables).
"""
from __future__ import annotations

import argparse
import base64
import glob
import html
import os
import re
from typing import Dict, List, Optional, Sequence, Tuple

from compressor.bench.report import GROUP_COLOURS, _fingerprint_text, pareto
from compressor.errors import CompressorError
from compressor.io import write_bytes, write_json, write_text
from compressor.results import read_results

TASKS = ("sst2", "mrpc", "stsb", "rte", "cola")
TEACHER = ("teacher", "fp32")          # the baseline: the teacher in PyTorch FP32
PEERS = ("pytorch-int8", "ort-o2", "ort-o2-int8", "inc-int8")
CHAIN, STUDENT, GPU_CHAIN = "chain-int8", "student-6L", "chain"
TARGETS = {"retention": 0.99, "speedup": 15.0, "peer": 2.5, "size": 10.0, "student": 0.99}
# the edge latency files' variant -> the server bench's variant of the same weights and precision,
# whose score it takes. None: no scored model of that shape and precision exists. The edge
# ``student6-int8`` is the 6-layer student as fused INT8 ONNX; the server benches the student in
# PyTorch FP32 only (``student-6L``), a different model whose score it would not share.
EDGE_NAMES = {"teacher": "teacher", "teacher-int8": "teacher-int8", "chain-int8": "chain-int8",
              "pytorch-int8": "pytorch-int8", "ort-o2": "ort-o2", "ort-o2-int8": "ort-o2-int8",
              "inc-int8": "inc-int8", "student6-int8": None}
SOURCES = (  # (source, file under the results folder, what it is)
    ("server-cpu", os.path.join("server", "bench-{task}-cpu.json"), "server CPU"),
    ("edge-cpu", "latency-{task}-cpu.json", "edge CPU"),
    ("gpu", os.path.join("server", "bench-{task}-gpu.json"), "GPU"),
)
GROUP_ORDER = {"teacher": 0, "ours": 1, "peer": 2}
Key = Tuple[str, str]   # (variant name, precision)


# -- reading -------------------------------------------------------------------

def load(folder: str) -> Tuple[Dict[str, Dict[str, dict]], Optional[dict], List[str]]:
    """Each source's results documents by task, summary.json, and what is missing or unreadable."""
    docs: Dict[str, Dict[str, dict]] = {}
    missing: List[str] = []
    for source, pattern, what in SOURCES:
        docs[source] = {}
        absent = []
        for task in TASKS:
            path = os.path.join(folder, pattern.format(task=task))
            doc, problem = _read(path)
            if doc is not None:
                docs[source][task] = doc
            elif problem:
                missing.append(problem)
            else:
                absent.append(task)
        if absent:
            missing.append(f"{what}: no `{pattern.format(task='{task}')}` for "
                           f"{'any task' if len(absent) == len(TASKS) else ', '.join(absent)}")
    summary, problem = _read(os.path.join(folder, "summary.json"))
    if summary is None:
        missing.append(problem or "other systems: no `summary.json`")
    return docs, summary, missing


def _read(path: str) -> Tuple[Optional[dict], Optional[str]]:
    """A results document, or None and why (None when the file is simply not there)."""
    if not os.path.isfile(path):
        return None, None
    try:
        return read_results(path), None
    except (CompressorError, ValueError) as exc:
        return None, f"`{os.path.basename(path)}` unreadable: {exc}"


# -- one table per machine and task ---------------------------------------------

def machines(docs: Dict[str, Dict[str, dict]]) -> List[dict]:
    """The machines measured: the server CPU and the edge CPU at each thread count present, the GPU."""
    out = []
    for source, _, what in SOURCES:
        if not docs[source]:
            continue
        if source == "gpu":
            out.append({"key": "gpu", "source": source, "threads": None, "title": "GPU, FP32 and BF16"})
            continue
        counts = sorted({r["threads"] for d in docs[source].values() for r in d["rows"] if r.get("threads")},
                        reverse=source == "server-cpu")
        cores = max((d.get("fingerprint") or {}).get("cores") or 0 for d in docs[source].values())
        for t in counts:
            title = f"{what}, {t} thread{'s' if t != 1 else ''}" + (" (all cores)" if t == cores and t > 1 else "")
            out.append({"key": f"{source}-{t}t", "source": source, "threads": t, "title": title})
    return out


def variant_key(r: dict) -> Key:
    """(name, precision); a name carrying its precision as a suffix (``chain-bf16``) loses it."""
    precision = (r.get("extra") or {}).get("precision") or "fp32"
    name = r["name"]
    if precision != "fp32" and name.endswith("-" + precision):
        name = name[: -len(precision) - 1]
    return name, precision


def task_lines(doc: dict, machine: dict, server: Optional[dict] = None) -> List[dict]:
    """One line per variant of one task on one machine; an edge line takes its score from ``server``
    (the server bench of the same task, None if there is none)."""
    rows = [r for r in doc["rows"] if machine["threads"] is None or r.get("threads") == machine["threads"]]
    lines: Dict[Key, dict] = {}
    for r in rows:
        name, precision = variant_key(r)
        line = lines.setdefault((name, precision), {
            "name": name, "precision": precision, "group": (r.get("extra") or {}).get("group", "ours"),
            "engine": r.get("engine"), "value": r.get("value"), "p50": None, "p90": None, "throughput": [],
            "size_bytes": r.get("size_bytes"), "parameters": r.get("parameters")})
        if r.get("batch_size") == 1 and r.get("latency_ms"):
            line["p50"], line["p90"] = r["latency_ms"]["p50"], r["latency_ms"].get("p90")
        elif r.get("throughput"):
            line["throughput"].append([r["batch_size"], r["throughput"]])
    for line in lines.values():
        line["throughput"].sort()
        if machine["source"] == "edge-cpu":
            _score_from_server(line, server)
    return _finish(list(lines.values()))


def _score_from_server(line: dict, server: Optional[dict]) -> None:
    """An edge line's score: the server row of the same weights (``EDGE_NAMES``), else None and why."""
    source = EDGE_NAMES.get(line["name"], "unmapped")
    line["value"], line["score_from"] = None, None
    if source is None:
        line["score_note"] = "no scored model of this shape and precision (EDGE_NAMES)"
    elif source == "unmapped":
        line["score_note"] = "name not in EDGE_NAMES"
    elif server is None:
        line["score_note"] = "no server bench of this task"
    else:
        match = [r for r in server["rows"] if r["name"] == source and variant_key(r)[1] == line["precision"]]
        if match and match[0].get("value") is not None:
            line["value"], line["score_from"] = match[0]["value"], source
        else:
            line["score_note"] = f"no scored `{source}` ({line['precision']}) in the server bench"


def _finish(lines: List[dict]) -> List[dict]:
    """Labels, retention and speed-up against the PyTorch FP32 teacher, the Pareto mark; sorted."""
    names = [ln["name"] for ln in lines]
    for ln in lines:
        ln["label"] = ln["name"] if ln["precision"] == "fp32" or names.count(ln["name"]) == 1 \
            else f"{ln['name']}-{ln['precision']}"
    teacher = next((ln for ln in lines if (ln["name"], ln["precision"]) == TEACHER), None)
    for ln in lines:
        ln["retention"] = _ratio(ln["value"], teacher and teacher["value"])
        ln["speedup"] = _ratio(teacher and teacher["p50"], ln["p50"])
    scored = [{"name": ln["label"], "p50": ln["p50"], "value": ln["value"]} for ln in lines
              if ln["p50"] is not None and ln["value"] is not None]
    front = pareto(scored)
    for ln in lines:
        ln["pareto"] = ln["label"] in front
    return sorted(lines, key=lambda ln: (GROUP_ORDER.get(ln["group"], 3),
                                         ln["p50"] if ln["p50"] is not None else float("inf"), ln["label"]))


def _ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    """a / b unrounded (verdicts compare it with the target; report.json rounds what it keeps)."""
    return a / b if a is not None and b else None


def _mean(xs: Sequence[Optional[float]]) -> Optional[float]:
    return sum(xs) / len(xs) if xs and all(x is not None for x in xs) else None


# -- GLUE-5 ----------------------------------------------------------------------

def glue5(per_task: Dict[str, List[dict]]) -> dict:
    """Means over the five tasks of the variants present on all five; nothing when a task is missing."""
    absent = [t for t in TASKS if not per_task.get(t)]
    if absent:
        return {"missing_tasks": absent, "lines": [], "partial": []}
    by_key: Dict[Key, Dict[str, dict]] = {}
    for task in TASKS:
        for ln in per_task[task]:
            by_key.setdefault((ln["name"], ln["precision"]), {})[task] = ln
    lines, partial = [], []
    for (name, precision), got in by_key.items():
        if len(got) < len(TASKS):
            partial.append({"name": name, "precision": precision, "tasks": [t for t in TASKS if t in got]})
            continue
        per = [got[t] for t in TASKS]
        batches = {tuple(b for b, _ in ln["throughput"]) for ln in per}
        tput = [[b, _mean([dict(ln["throughput"])[b] for ln in per])] for b in next(iter(batches))] \
            if len(batches) == 1 else []
        lines.append({"name": name, "precision": precision, "group": per[0]["group"], "engine": per[0]["engine"],
                      "value": _mean([ln["value"] for ln in per]), "p50": _mean([ln["p50"] for ln in per]),
                      "p90": _mean([ln["p90"] for ln in per]), "throughput": tput,
                      "size_bytes": _mean([ln["size_bytes"] for ln in per]),
                      "parameters": _mean([ln["parameters"] for ln in per]),
                      "tasks": {t: got[t]["value"] for t in TASKS}})
    return {"missing_tasks": [], "lines": _finish(lines), "partial": partial}


# -- the targets -------------------------------------------------------------

def targets(machine: dict, g5: dict) -> List[dict]:
    """The issue's targets on one CPU machine, each met, not met or not computed (and why)."""
    teacher, chain, student = (_find(g5["lines"], *TEACHER), _find(g5["lines"], CHAIN),
                               _find(g5["lines"], STUDENT))
    why = _why_not(g5, teacher, chain, CHAIN)
    scored = chain is not None and teacher is not None
    ret = _ratio(chain["value"], teacher["value"]) if scored else None
    sp = chain["speedup"] if chain else None
    size = _ratio(teacher["size_bytes"], chain["size_bytes"]) if scored else None
    sret = _ratio(student["value"], teacher["value"]) if student and teacher else None
    out = [
        _target("a", f"GLUE-5 retention of {CHAIN} >= {_pct(TARGETS['retention'])}", ret, TARGETS["retention"],
                lambda: f"{CHAIN} {_num(chain['value'])} / teacher {_num(teacher['value'])} = {_pct(ret)}",
                why or "scores missing"),
        _target("b", f"p50 batch-1 speed-up of {CHAIN} vs teacher PyTorch FP32 >= {_x(TARGETS['speedup'])}",
                sp, TARGETS["speedup"],
                lambda: f"teacher {_ms(teacher['p50'])} ms / {CHAIN} {_ms(chain['p50'])} ms = {_x(sp)}",
                why or "latency missing"),
        *_peer_targets(g5, chain, why),
        _target("d", f"size on disk of {CHAIN} >= {_x(TARGETS['size'])} smaller than the teacher's", size,
                TARGETS["size"],
                lambda: f"teacher {_mb(teacher['size_bytes'])} MB / {CHAIN} {_mb(chain['size_bytes'])} MB "
                        f"= {_x(size)}", why or "sizes missing"),
        _target("e", f"a 6-layer student ({STUDENT}) at >= {_pct(TARGETS['student'])} GLUE-5 retention", sret,
                TARGETS["student"],
                lambda: f"{STUDENT} {_num(student['value'])} / teacher {_num(teacher['value'])} = {_pct(sret)}",
                _why_not(g5, teacher, student, STUDENT) or "scores missing"),
    ]
    return [{**t, "machine": machine["title"], "machine_key": machine["key"]} for t in out]


def _target(tid: str, what: str, value: Optional[float], threshold: float, figures, reason: str) -> dict:
    """One target's verdict; ``figures`` (called only when there is a value) shows the numbers."""
    verdict = "not computed" if value is None else ("met" if value >= threshold else "not met")
    return {"id": tid, "target": what, "value": value, "threshold": threshold, "verdict": verdict,
            "figures": figures() if value is not None else reason}


def _peer_targets(g5: dict, chain: Optional[dict], why: Optional[str]) -> List[dict]:
    """(c) against the fastest peer whatever its score; (c') against the fastest peer scoring at
    least the chain's score."""
    peers = sorted((ln for ln in g5["lines"] if ln["name"] in PEERS and ln["p50"] is not None),
                   key=lambda p: p["p50"])
    listed = ", ".join(f"{p['label']} {_ms(p['p50'])} ms (score {_num(p['value']) or 'n/a'})" for p in peers)
    fastest = peers[0] if peers else None
    r = _ratio(fastest["p50"], chain["p50"]) if chain and fastest else None
    c = _target("c", f"p50 of {CHAIN} >= {_x(TARGETS['peer'])} lower than the fastest peer's", r, TARGETS["peer"],
                lambda: f"fastest peer {fastest['label']} {_ms(fastest['p50'])} ms / {CHAIN} {_ms(chain['p50'])} ms"
                        f" = {_x(r)}; {CHAIN} scores {_num(chain['value']) or 'n/a'}; peers: {listed}",
                why or "no peer measured on all five tasks")
    chain_score = chain["value"] if chain else None
    better = [p for p in peers if chain_score is not None and p["value"] is not None and p["value"] >= chain_score]
    best = better[0] if better else None
    r2 = _ratio(best["p50"], chain["p50"]) if chain and best else None
    reason = why or ("scores missing" if chain_score is None
                     else f"no peer scores at least {CHAIN}'s {_num(chain_score)} (peers: {listed or 'none'})")
    c2 = _target("c'", f"p50 of {CHAIN} >= {_x(TARGETS['peer'])} lower than the fastest peer's at equal or "
                       "better score", r2, TARGETS["peer"],
                 lambda: f"{best['label']} (score {_num(best['value'])}) {_ms(best['p50'])} ms / {CHAIN} "
                         f"{_ms(chain['p50'])} ms = {_x(r2)}", reason)
    return [c, c2]


def _find(lines: List[dict], name: str, precision: Optional[str] = None) -> Optional[dict]:
    return next((ln for ln in lines if ln["name"] == name and precision in (None, ln["precision"])), None)


def _why_not(g5: dict, teacher: Optional[dict], variant: Optional[dict], name: str) -> Optional[str]:
    if g5["missing_tasks"]:
        return "GLUE-5 not computed: missing " + ", ".join(g5["missing_tasks"])
    if teacher is None:
        return "no teacher (PyTorch FP32) on all five tasks"
    if variant is None:
        return f"no {name} on all five tasks"
    return None


def gpu_throughput(per_task: Dict[str, List[dict]], g5: dict) -> List[dict]:
    """Per task and GLUE-5 (ratio of the mean throughputs): the GPU chain's over the teacher's, FP32 and BF16."""
    out = []
    for task, lines in [(t, per_task.get(t) or []) for t in TASKS] + [("GLUE-5", g5["lines"])]:
        by = {(ln["name"], ln["precision"]): ln for ln in lines}
        for precision in ("fp32", "bf16"):
            t, c = by.get(("teacher", precision)), by.get((GPU_CHAIN, precision))
            common = sorted(set(dict(t["throughput"])) & set(dict(c["throughput"]))) if t and c else []
            if not common:
                continue
            b = common[-1]
            tt, ct = dict(t["throughput"])[b], dict(c["throughput"])[b]
            out.append({"task": task, "precision": precision, "batch_size": b, "teacher": tt, "chain": ct,
                        "ratio": _ratio(ct, tt)})
    return out


# -- other systems (summary.json) ----------------------------------------------------

def other_systems(summary: Optional[dict]) -> List[dict]:
    """summary.json's models by run: the score on each task, GLUE-5 where all five are there."""
    if summary is None:
        return []
    models: Dict[Tuple[str, str], dict] = {}
    for r in summary["rows"]:
        if r["name"].count("/") < 2:   # not a run/task/model row
            continue
        run, task, model = r["name"].rsplit("/", 2)
        m = models.setdefault((run, model), {"run": run, "model": model, "label": (r.get("extra") or {}).get("label"),
                                             "tasks": {}, "teacher": {}})
        m["tasks"][task], m["teacher"][task] = r["value"], r.get("teacher_value")
    for m in models.values():
        five = all(t in m["tasks"] for t in TASKS)
        m["glue5"] = _mean([m["tasks"][t] for t in TASKS]) if five else None
        m["teacher_glue5"] = _mean([m["teacher"][t] for t in TASKS]) if five else None
        m["retention"] = _ratio(m["glue5"], m["teacher_glue5"])
    return list(models.values())


# -- the whole report --------------------------------------------------------------

def build(folder: str) -> dict:
    """Everything the report shows, as plain data (``report.json``)."""
    docs, summary, missing = load(folder)
    report = {"folder": folder, "edge_names": EDGE_NAMES, "targets_thresholds": TARGETS, "missing": missing,
              "machines": [], "targets": [], "gpu_throughput": [], "other_systems": other_systems(summary),
              "summary_glue5": (summary or {}).get("glue5"), "fingerprints": _fingerprints(docs),
              "commands": commands(folder, docs, summary)}
    for m in machines(docs):
        server = docs["server-cpu"]
        per_task = {task: task_lines(doc, m, server.get(task)) for task, doc in docs[m["source"]].items()}
        g5 = glue5(per_task)
        report["machines"].append({**m, "tasks": {t: per_task[t] for t in TASKS if t in per_task}, "glue5": g5})
        if m["source"] == "gpu":
            report["gpu_throughput"] = gpu_throughput(per_task, g5)
        else:
            report["targets"] += targets(m, g5)
    return report


def commands(folder: str, docs: Dict[str, Dict[str, dict]], summary: Optional[dict]) -> dict:
    """The command files found (their text) and each results file's own command."""
    files = sorted(glob.glob(os.path.join(folder, "server", "commands-*.txt")))
    latency = os.path.join(folder, "latency-commands.sh")
    if os.path.isfile(latency):
        files.append(latency)
    found = {}
    for path in files:
        with open(path) as f:
            found[os.path.relpath(path, folder)] = f.read().strip()
    own = {pattern.format(task=t): d.get("command")
           for source, pattern, _ in SOURCES for t, d in sorted(docs[source].items())}
    if summary is not None:
        own["summary.json"] = summary.get("command")
    return {"files": found, "results": own}


def _fingerprints(docs: Dict[str, Dict[str, dict]]) -> List[dict]:
    """Each source's machines: the fingerprint text and the tasks (and hosts) measured on it."""
    out = []
    for source, _, what in SOURCES:
        seen: Dict[str, dict] = {}
        for task, doc in docs[source].items():
            fp = doc.get("fingerprint") or {}
            text = _fingerprint_text(fp) if fp.get("processor") else "- " + str(fp)
            entry = seen.setdefault(text, {"source": what, "text": text, "tasks": [], "hosts": []})
            entry["tasks"].append(task)
            entry["hosts"].append(fp.get("hostname_hash"))
        for e in seen.values():
            out.append({**e, "tasks": [t for t in TASKS if t in e["tasks"]], "hosts": len(set(e["hosts"]))})
    return out


# -- markdown ------------------------------------------------------------------------

def markdown(report: dict, plot_file: Optional[str] = None) -> str:
    lines = ["# MPNet-base on GLUE-5: score, latency and size (issue 14)", "",
             f"Made by `python -m bench.experiments.mpnet_glue5_report {report['folder']}` from the result "
             "files there. Scores are dev scores in points (the task's headline metric x100, as each row's "
             "`value`), always of the trained weights. The edge CPU's latency was measured on randomly "
             "initialised copies with the trained models' exact shapes (`bench/experiments/mpnet_glue5_latency.py`); "
             "each edge variant's score is the trained model's from the server bench of the same task "
             "(identical weights score identically). Edge names map to server names as: "
             + ", ".join(f"`{e}` -> " + (f"`{s}`" if s else "none (unscored)") for e, s in report["edge_names"].items())
             + ". Speed-ups compare batch-1 p50 with the teacher in PyTorch FP32 on the same machine and threads.",
             ""]
    lines += _rerun_section(report)
    lines += ["## Missing", ""]
    lines += [f"- {m}" for m in report["missing"]] or ["Nothing: every input file is there."]
    lines += [""]
    lines += _targets_section(report)
    if plot_file:
        lines += [f"![latency versus score]({plot_file})", ""]
    lines += _glue5_section(report)
    lines += _gpu_section(report)
    lines += _task_section(report)
    lines += _others_section(report)
    lines += ["## Machines", ""]
    for fp in report["fingerprints"]:
        lines += [f"**{fp['source']}** ({', '.join(fp['tasks'])}; {fp['hosts']} host(s)):", "", fp["text"], ""]
    if not report["fingerprints"]:
        lines += ["No results file, so no machine fingerprint.", ""]
    return "\n".join(lines)


def _rerun_section(report: dict) -> List[str]:
    out = ["## How to rerun", ""]
    files = report["commands"]["files"]
    for name, text in files.items():
        out += [f"`{name}`:", "", "```", text, "```", ""]
    for expected in ("server/commands-*.txt", "latency-commands.sh"):
        if not any(re.fullmatch(expected.replace("*", ".*"), f) for f in files):
            out += [f"- `{expected}`: missing, so those commands are not recorded here."]
    own = report["commands"]["results"]
    if own:
        out += ["", "Each results file's own command:", ""] + [f"- `{f}`: `{c}`" for f, c in own.items()]
    out += ["", f"This report: `python -m bench.experiments.mpnet_glue5_report {report['folder']}`", ""]
    return out


def _targets_section(report: dict) -> List[str]:
    out = ["## Targets", "",
           f"Checked against `{CHAIN}` on each CPU machine's GLUE-5 means (the fastest peer is the fastest of "
           f"{', '.join(PEERS)} present on all five tasks; (c) compares with it whatever its score, (c') with the "
           f"fastest peer scoring at least the chain).", "",
           "| target | machine | figures | verdict |", "|---|---|---|---|"]
    for m in report["machines"]:
        mine = [t for t in report["targets"] if t["machine_key"] == m["key"]]
        if mine and m["glue5"]["missing_tasks"]:   # one line for all: nothing computed without GLUE-5
            out.append(f"| ({mine[0]['id']})-({mine[-1]['id']}) all | {m['title']} | {mine[0]['figures']} "
                       "| **not computed** |")
            continue
        out += [f"| ({t['id']}) {t['target']} | {t['machine']} | {t['figures']} | **{t['verdict']}** |" for t in mine]
    if not report["targets"]:
        out += ["| all | - | no CPU results | **not computed** |"]
    return out + [""]


TABLE_HEAD = ["| variant | group | engine | precision | score | retention | p50 (ms) | p90 (ms) "
              "| throughput (sent/s @ batch) | size (MB) | parameters | speed-up | Pareto |",
              "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|:-:|"]


def _table(lines: List[dict]) -> List[str]:
    out = list(TABLE_HEAD)
    for ln in lines:
        tput = "; ".join(f"{t:.1f} @ {b}" for b, t in ln["throughput"])
        score = _num(ln["value"]) or ("n/a" if ln.get("score_note") else "")
        out.append(f"| {ln['label']} | {ln['group']} | {ln.get('engine') or ''} | {ln['precision']} | {score} "
                   f"| {_pct(ln['retention'])} | {_ms(ln['p50'])} | {_ms(ln['p90'])} | {tput} "
                   f"| {_mb(ln['size_bytes'])} | {_int(ln['parameters'])} | {_x(ln['speedup'])} "
                   f"| {'yes' if ln['pareto'] else ''} |")
    notes: Dict[str, List[str]] = {}
    for ln in lines:
        if ln.get("score_note"):
            notes.setdefault(ln["score_note"], []).append(f"`{ln['label']}`")
    if notes:
        out += ["", "Score n/a: " + "; ".join(f"{', '.join(names)}: {note}" for note, names in notes.items()) + "."]
    return out


def _glue5_section(report: dict) -> List[str]:
    out = ["## GLUE-5", "",
           "Per machine, the variants measured on all five tasks: the plain mean of the five task scores, "
           "retention = that mean / the teacher's, latency = the mean of the five p50s, speed-up = the teacher's "
           "mean / the variant's, size and throughput the means.", ""]
    for m in report["machines"]:
        g5 = m["glue5"]
        out += [f"### {m['title']}", ""]
        if g5["missing_tasks"]:
            out += [f"Not computed: missing {', '.join(g5['missing_tasks'])} on this machine.", ""]
            continue
        out += _table(g5["lines"])
        if g5["partial"]:
            out += ["", "Not on all five tasks: " + "; ".join(
                f"{p['name']} ({p['precision']}): {', '.join(p['tasks'])}" for p in g5["partial"]) + "."]
        out += [""]
    if not report["machines"]:
        out += ["No machine measured.", ""]
    return out


def _gpu_section(report: dict) -> List[str]:
    out = ["## GPU throughput: chain vs teacher", ""]
    rows = report["gpu_throughput"]
    if not rows:
        return out + [f"Not computed: no GPU throughput of both the teacher and `{GPU_CHAIN}`.", ""]
    out += ["| task | precision | batch | teacher (sent/s) | chain (sent/s) | chain / teacher |",
            "|---|---|---:|---:|---:|---:|"]
    out += [f"| {r['task']} | {r['precision']} | {r['batch_size']} | {r['teacher']:.1f} | {r['chain']:.1f} "
            f"| {_x(r['ratio'])} |" for r in rows]
    return out + ["", "GLUE-5: the ratio of the five tasks' mean throughputs.", ""]


def _task_section(report: dict) -> List[str]:
    out = ["## Per task", ""]
    for task in TASKS:
        for m in report["machines"]:
            lines = m["tasks"].get(task)
            if lines:
                out += [f"### {task}: {m['title']}", ""] + _table(lines) + [""]
    return out


def _others_section(report: dict) -> List[str]:
    out = ["## Other systems scored (no latency)", ""]
    others = report["other_systems"]
    if not others:
        return out + ["`summary.json` missing or empty.", ""]
    out += ["From `summary.json`: dev scores of the training runs (retention against each run's own teacher).", "",
            "| run | model | " + " | ".join(TASKS) + " | GLUE-5 | retention |",
            "|---|---|" + "---:|" * (len(TASKS) + 2)]
    out += [f"| {m['run']} | {m['label'] or m['model']} | " + " | ".join(_num(m["tasks"].get(t)) for t in TASKS)
            + f" | {_num(m['glue5'])} | {_pct(m['retention'])} |" for m in others]
    g = report.get("summary_glue5") or {}
    if g:
        out += ["", "`summary.json`'s own GLUE-5 figures:", ""]
        out += [f"- {name}: " + ", ".join(f"{k} {v}" for k, v in sorted(v.items()) if k != "tasks")
                for name, v in g.items() if isinstance(v, dict)]
    return out + [""]


# -- formatting ----------------------------------------------------------------------

def _num(x: Optional[float], digits: int = 2) -> str:
    return f"{x:.{digits}f}" if x is not None else ""


def _ms(x: Optional[float]) -> str:
    return _num(x, 2)


def _pct(x: Optional[float]) -> str:
    return f"{100 * x:.2f}%" if x is not None else ""


def _x(x: Optional[float]) -> str:
    return f"{x:.1f}×" if x is not None else ""


def _mb(n: Optional[float]) -> str:
    return f"{n / 1e6:.1f}" if n else ""


def _int(n: Optional[float]) -> str:
    return f"{round(n):,}" if n else ""


# -- the plot ----------------------------------------------------------------------

def plot_machine(report: dict) -> Optional[dict]:
    """The server CPU at 1 thread, else the edge CPU at 1 thread."""
    by = {m["key"]: m for m in report["machines"]}
    for key in ("server-cpu-1t", "edge-cpu-1t"):
        if key in by and by[key]["tasks"]:
            return by[key]
    return None


def plot(report: dict):
    """2x3 panels: latency versus score per task and GLUE-5, coloured by group, the frontier stepped."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    m = plot_machine(report)
    fig, axes = plt.subplots(2, 3, figsize=(16, 9.5), dpi=100)
    where = m["title"] if m else "no CPU at 1 thread measured"
    fig.suptitle(f"MPNet-base GLUE-5: p50 latency (batch 1) versus dev score, {where}")
    tasks = m["tasks"] if m else {}
    g5 = m["glue5"] if m else {"lines": [], "missing_tasks": list(TASKS)}
    panels = [(t, tasks.get(t) or [], "not measured" if t not in tasks else "latency only: no scores (see report.md)")
              for t in TASKS]
    panels.append(("GLUE-5", g5["lines"], "not computed: missing " + ", ".join(g5["missing_tasks"])
                   if g5["missing_tasks"] else "no scored variant on all five tasks"))
    for ax, (name, lines, empty) in zip(axes.flat, panels):
        _panel(ax, name, lines, where, empty)
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], marker="o", ls="", color=c, markeredgecolor="black", label=g)
               for g, c in GROUP_COLOURS.items()]
    handles.append(Line2D([], [], color="#2ca02c", ls="--", label="Pareto frontier (lower latency, higher score)"))
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=9)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig


def _panel(ax, name: str, lines: List[dict], where: str, empty: str) -> None:
    points = [ln for ln in lines if ln["p50"] is not None and ln["value"] is not None]
    ax.set_title(f"{name}: {where}", fontsize=10)
    if not points:
        ax.text(0.5, 0.5, empty, ha="center", va="center", transform=ax.transAxes, color="#777", wrap=True)
        ax.set_xticks([])
        ax.set_yticks([])
        return
    for group, colour in GROUP_COLOURS.items():
        pts = [p for p in points if p["group"] == group]
        if pts:
            ax.scatter([p["p50"] for p in pts], [p["value"] for p in pts], s=45, c=colour, zorder=3,
                       edgecolors="black", linewidths=0.5)
    front = sorted((p for p in points if p["pareto"]), key=lambda p: p["p50"])
    ax.step([p["p50"] for p in front], [p["value"] for p in front], where="post", color="#2ca02c", lw=1.3,
            ls="--", zorder=2)
    for p in points:
        ax.annotate(p["label"], (p["p50"], p["value"]), textcoords="offset points", xytext=(4, 4), fontsize=7)
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.margins(x=0.15, y=0.1)
    ax.set_xlabel("p50 latency, batch 1 (ms, log scale)")
    ax.set_ylabel("dev score (points)" if name != "GLUE-5" else "GLUE-5 score (mean of five)")
    ax.grid(True, which="both", alpha=0.3)


# -- HTML --------------------------------------------------------------------------

def html_page(md: str, png: bytes, title: str) -> str:
    """The markdown as one self-contained page: tables as tables, the plot inline as base64 PNG."""
    style = ("body{font-family:system-ui,sans-serif;max-width:1300px;margin:2em auto;padding:0 1em;color:#222}"
             "table{border-collapse:collapse;margin:1em 0;font-size:13px}th,td{border:1px solid #ccc;"
             "padding:3px 7px;text-align:right}td:first-child,th:first-child{text-align:left}"
             "th{background:#f4f4f4}img{max-width:100%}pre{background:#f7f7f7;padding:1em;overflow:auto}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{style}</style></head><body>{_md_to_html(md, png)}</body></html>\n")


def _md_to_html(md: str, png: bytes) -> str:
    """The subset of markdown ``markdown`` writes (headings, tables, lists, code, the image)."""
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
        heading = re.match(r"(#{1,4}) (.*)", line)
        if heading:
            n = len(heading.group(1))
            out.append(f"<h{n}>{html.escape(heading.group(2))}</h{n}>")
        elif line.startswith("!["):
            out.append('<img alt="latency versus score" src="data:image/png;base64,'
                       + base64.b64encode(png).decode() + '">')
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


# -- writing -------------------------------------------------------------------------

def write_report(report: dict, out: str) -> List[str]:
    """report.md, report.html, report.png and report.json in ``out``, each written atomically."""
    import io

    import matplotlib.pyplot as plt

    paths = [os.path.join(out, f"report.{ext}") for ext in ("md", "html", "png", "json")]
    fig = plot(report)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    png = buf.getvalue()
    md = markdown(report, os.path.basename(paths[2]))
    write_text(paths[0], md + "\n")
    write_text(paths[1], html_page(md, png, "MPNet-base GLUE-5 (issue 14)"))
    write_bytes(paths[2], png)
    write_json(paths[3], _rounded(report))
    return paths


def _rounded(obj, digits: int = 6):
    """``obj`` with every float rounded (the means and ratios carry no more than the inputs)."""
    if isinstance(obj, float):
        return round(obj, digits)
    if isinstance(obj, dict):
        return {k: _rounded(v, digits) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_rounded(v, digits) for v in obj]
    return obj


def main(argv: Optional[Sequence[str]] = None) -> List[str]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folder", help="the results folder (bench/results/mpnet-glue5)")
    ap.add_argument("--out", help="where to write the report (default: the results folder)")
    args = ap.parse_args(argv)
    if not os.path.isdir(args.folder):
        raise SystemExit(f"{args.folder}: no such folder")
    paths = write_report(build(args.folder), args.out or args.folder)
    for p in paths:
        print(p)
    return paths


if __name__ == "__main__":
    main()
