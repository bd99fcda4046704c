"""The headline report of the MPNet-base GLUE-5 benchmark (issue 14): score, latency, size and
speed-up of every variant on every machine, the GLUE-5 means, and the issue's targets checked.

    python -m bench.experiments.mpnet_glue5_report bench/results/mpnet-glue5 [--out FOLDER]

Reads, under the results folder (any file may be missing: the report says which are, and
computes nothing in their place):

- ``server/bench-{task}-cpu.json``: ``compressor bench`` on the GPU machine's CPU (the server),
  all cores and 1 thread, the trained teacher, its peers (pytorch-int8, ort-o2, ort-o2-int8,
  inc-int8) and ours (teacher-int8, chain-int8, student-6L), each scored on the task's dev split;
- ``server/bench-{task}-gpu.json``: the same machine's GPU, FP32 and BF16, batch 1 and a large
  batch (student-6L, chain and the teacher); one machine per GPU model in the fingerprints, so
  tasks benched on different GPUs are never averaged into one GLUE-5;
- ``latency-{task}-cpu.json``: the 2-core machine (the edge CPU), 1 and 2 threads, timed on
  randomly initialised copies with the trained models' exact shapes
  (``bench/experiments/mpnet_glue5_latency.py``): their ``value`` is null, and each variant's score
  is the trained model's from the server bench of the same task (``EDGE_NAMES`` says which); where
  the server bench has none, the same model's from the task's pipeline run (below;
  ``EDGE_PIPELINE``: ``teacher`` <-
  ``{task}-metrics.json``, ``teacher-int8`` <- ``{task}-int8-quantize.json``, ``chain-int8`` <-
  ``{task}-chain-int8-quantize.json``, each only where its parameter count, and for the chain its
  heads, FFN widths and vocabulary, match the timed copy). Nothing else falls back: a peer, or a
  model whose own file is missing, stays unscored, never taking another model's score (the FP32
  chain's for ``chain-int8``, say). Every line records where its score came from (``score_from``);
- the pipeline runs, ``pipeline<N>/`` (per task the newest, highest N, with that task's teacher;
  all of a task's scores from that one run): ``{task}-metrics.json``, ``-6L-kd-metrics.json``, ``-chain-hf-metrics.json``,
  ``-chain-metrics.json``, ``-int8-quantize.json``, ``-chain-int8-quantize.json``: the GPU pipeline's
  dev scores (``score``, points) of the teacher, the 6-layer kd student, the chain's steps in PyTorch
  FP32 and the teacher and chain as fused INT8 ONNX; their own table ("GLUE-5 of the pipeline's
  models", no latency: per task, GLUE-5 where all five are there, retention against the teachers),
  from which targets (a) and (e) are checked when no CPU machine can (``pipeline_targets``: (a) on
  the INT8 chain's GLUE-5, or without it on the FP32 chain's, so labelled, "not met" only where even
  that is below the target);
- ``summary.json`` (``bench/experiments/mpnet_glue5_summary.py``): dev scores of the other runs;
- ``server/commands-*.txt``, the runs' ``commands-*.txt`` and ``latency-commands.sh``: the
  commands, for "how to rerun".

Targets (b), (c) and (d) need latency and sizes only: a CPU machine with all five tasks timed gets
them even when its GLUE-5 scores are missing ((a), (c') and (e) then are not computed there). The
plot takes each panel from the server CPU at 1 thread where it has scored points, else from the
edge CPU at 1 thread (with the fallback scores); a timed variant without a score is not drawn, and
the panel says how many were left out.

Writes into ``--out`` (default: the results folder), each file to a temporary name beside it and
renamed into place: ``report.md``, ``report.html`` (self-contained), ``report.png`` (latency versus
score per task and GLUE-5) and ``report.json`` (the numbers behind the tables).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
from typing import Dict, List, Optional, Sequence, Tuple

from compressor.bench.report import GROUP_COLOURS, _fingerprint_text, _mb, _num, html_document, pareto
from compressor.core.errors import CompressorError
from compressor.core.io import write_bytes, write_json, write_text
from compressor.core.results import read_results

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
# the GPU pipeline's dev scores (no latency): the runs' folders ``pipeline<N>/``, newest (highest N)
# first; each task's scores all come from one run, the newest that has the task's teacher
# (retention is against the teacher of the same run). PIPELINE labels their rows.
PIPELINE_RUN = re.compile(r"pipeline(\d+)")
PIPELINE = "pipeline"
# (model, file under the run's folder, what it is)
PIPELINE_MODELS = (
    ("teacher", "{task}-metrics.json", "the teacher, PyTorch FP32"),
    ("6L-kd", "{task}-6L-kd-metrics.json", "the 6-layer kd student, PyTorch FP32"),
    ("chain-hf", "{task}-chain-hf-metrics.json", "the chain's heads+FFN step, PyTorch FP32"),
    ("chain", "{task}-chain-metrics.json", "the chain (heads+FFN, vocabulary), PyTorch FP32"),
    ("teacher-int8", "{task}-int8-quantize.json", "the teacher, the toolkit's fused INT8 ONNX"),
    ("chain-int8", "{task}-chain-int8-quantize.json", "the chain, the toolkit's fused INT8 ONNX"),
)
PIPELINE_FILES = {model: pattern for model, pattern, _ in PIPELINE_MODELS}
PIPELINE_STUDENT = "6L-kd"
# the edge variant -> (the pipeline model of the same weights and precision, that precision): the
# score it takes when the server bench has none. Nothing else falls back: a peer, or a model whose
# own score is missing, stays unscored (never another model's score in its place).
EDGE_PIPELINE = {"teacher": ("teacher", "fp32"), "teacher-int8": ("teacher-int8", "int8-dynamic"),
                 "chain-int8": ("chain-int8", "int8-dynamic")}
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


def pipeline_folders(folder: str) -> List[str]:
    """The pipeline runs' folders under ``folder`` (``pipeline<N>``), newest first."""
    found = [(int(m.group(1)), name) for name in os.listdir(folder) if os.path.isdir(os.path.join(folder, name))
             for m in [PIPELINE_RUN.fullmatch(name)] if m] if os.path.isdir(folder) else []
    return [name for _, name in sorted(found, reverse=True)]


def pipeline_runs(folder: str) -> Dict[str, str]:
    """Each task's pipeline run: the newest ``pipeline<N>/`` that holds its teacher's file."""
    runs, folders = {}, pipeline_folders(folder)
    for task in TASKS:
        for run in folders:
            if os.path.isfile(os.path.join(folder, run, PIPELINE_FILES["teacher"].format(task=task))):
                runs[task] = run
                break
    return runs


def _runs_text(runs: Dict[str, str], pattern: Optional[str] = None) -> str:
    """``pipeline4/`` (sst2, mrpc), ``pipeline3/`` (stsb), or with ``pattern`` each run's file pattern."""
    by: Dict[str, List[str]] = {}
    for task in TASKS:
        if task in runs:
            by.setdefault(runs[task], []).append(task)
    return ", ".join(f"`{run}/{pattern or ''}` ({', '.join(tasks)})" for run, tasks in by.items()) \
        or "no pipeline run (`pipeline<N>/`)"


def load_pipeline(folder: str) -> Tuple[Dict[str, Dict[str, dict]], List[str]]:
    """The pipeline runs' dev scores (``pipeline_runs``: per task, one run): by model and task, each
    entry's score, parameters, size, file and (the chain's files) the shape, plus ``runs`` (task ->
    run folder); and what is missing or unreadable."""
    runs = pipeline_runs(folder)
    if not runs:
        return {"runs": {}}, [f"pipeline dev scores: no teacher in {_runs_text(runs)}"]
    out: Dict[str, Dict[str, dict]] = {"runs": runs}
    missing: List[str] = []
    no_run = [t for t in TASKS if t not in runs]
    if no_run:
        missing.append(f"pipeline dev scores: no run has a teacher for {', '.join(no_run)}")
    for model, pattern, what in PIPELINE_MODELS:
        out[model] = {}
        absent = []
        for task in runs:
            name = f"{runs[task]}/{pattern.format(task=task)}"
            path = os.path.join(folder, name)
            if not os.path.isfile(path):
                absent.append(task)
                continue
            try:
                with open(path) as f:
                    doc = json.load(f)
                score = doc.get("score")
                if not isinstance(score, (int, float)) or isinstance(score, bool):
                    raise ValueError("no numeric `score`")
            except (OSError, ValueError, AttributeError) as exc:
                missing.append(f"`{name}` unreadable: {exc}")
                continue
            pruning = doc.get("pruning") or {}
            shape = {"heads": pruning.get("heads_after"), "ffn": pruning.get("ffn_after"),
                     "vocab": pruning.get("pieces_after")}
            out[model][task] = {"score": float(score), "parameters": doc.get("parameters"),
                                "size_bytes": doc.get("size_bytes"), "file": name,
                                "shape": {k: v for k, v in shape.items() if v is not None}}
        if absent:
            missing.append(f"pipeline dev scores ({what}): no "
                           + _runs_text({t: runs[t] for t in absent}, pattern))
    return out, missing


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
        if source == "gpu":   # one machine per GPU model: tasks benched on different GPUs are not averaged
            names = sorted({gpu_name(d) for d in docs[source].values()})
            for name in names:
                out.append({"key": "gpu" if len(names) == 1 else "gpu-" + re.sub(r"[^a-z0-9]+", "-", name.lower()),
                            "source": source, "threads": None, "title": f"GPU ({name}), FP32 and BF16",
                            "gpu": name, "only": [t for t, d in docs[source].items() if gpu_name(d) == name]})
            continue
        counts = sorted({r["threads"] for d in docs[source].values() for r in d["rows"] if r.get("threads")},
                        reverse=source == "server-cpu")
        cores = max((d.get("fingerprint") or {}).get("cores") or 0 for d in docs[source].values())
        for t in counts:
            title = f"{what}, {t} thread{'s' if t != 1 else ''}" + (" (all cores)" if t == cores and t > 1 else "")
            out.append({"key": f"{source}-{t}t", "source": source, "threads": t, "title": title})
    return out


def gpu_name(doc: dict) -> str:
    """The GPU a bench ran on, from its fingerprint."""
    fp = doc.get("fingerprint") or {}
    return fp.get("gpu") or (fp.get("versions") or {}).get("gpu") or "GPU not recorded"


def variant_key(r: dict) -> Key:
    """(name, precision); a name carrying its precision as a suffix (``chain-bf16``) loses it."""
    precision = (r.get("extra") or {}).get("precision") or "fp32"
    name = r["name"]
    if precision != "fp32" and name.endswith("-" + precision):
        name = name[: -len(precision) - 1]
    return name, precision


def task_lines(doc: dict, machine: dict, server: Optional[dict] = None,
               pipeline: Optional[Dict[str, Dict[str, dict]]] = None, task: Optional[str] = None) -> List[dict]:
    """One line per variant of one task on one machine, each with where its score came from
    (``score_from``, a file under the results folder). An edge line takes its score from ``server``
    (the server bench of the same task, None if there is none), else from ``pipeline`` (the
    pipeline run's file of the same model, ``EDGE_PIPELINE``), else has none (``score_note`` says why)."""
    task = task or next((r.get("task") for r in doc["rows"] if r.get("task")), None)
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
    own = next(pattern for source, pattern, _ in SOURCES if source == machine["source"])
    for line in lines.values():
        line["throughput"].sort()
        if machine["source"] == "edge-cpu":
            _edge_score(line, task, server, pipeline, (doc.get("shapes") or {}).get("chain"))
        else:
            line["score_src"] = own if line["value"] is not None else None
            line["score_from"] = own.format(task=task) if line["value"] is not None else None
    return _finish(list(lines.values()))


def _edge_score(line: dict, task: Optional[str], server: Optional[dict],
                pipeline: Optional[Dict[str, Dict[str, dict]]], chain_shape: Optional[dict]) -> None:
    """An edge line's score: the server bench's, else the pipeline run's file of the same model; else None.
    The chain's score is taken only for a copy of the very chain that was scored: its heads, FFN widths
    and vocabulary equal those of the task's pipeline run, and a server bench's teacher scores what
    that run's teacher scores (the bench was made from that run's models)."""
    _score_from_server(line, server, task)
    if line["value"] is not None:
        why = _not_this_chain(task, server, pipeline, chain_shape) if line["name"] == CHAIN else None
        if why:
            line["value"], line["score_src"], line["score_from"] = None, None, None
            line["score_note"] = f"the server bench's {CHAIN} is not this copy's model: {why}"
        return
    model, precision = EDGE_PIPELINE.get(line["name"], (None, None))
    if model is None or precision != line["precision"]:
        if line["group"] == "peer":
            line["score_note"] += "; a peer is scored by the server bench only"
        return   # a peer, or a model the pipeline does not score: the server bench's note stands
    run = ((pipeline or {}).get("runs") or {}).get(task)
    pattern = f"{run or '(no pipeline run)'}/" + PIPELINE_FILES[model]
    entry = (pipeline or {}).get(model, {}).get(task)
    why = None
    if entry is None:
        why = f"no `{pattern.format(task=task)}`"
    elif entry["parameters"] and line["parameters"] and entry["parameters"] != line["parameters"]:
        why = (f"`{entry['file']}` has {entry['parameters']:,} parameters, this copy "
               f"{line['parameters']:,}: another model")
    elif model == CHAIN:
        differ = _shape_differs(pipeline or {}, task, chain_shape)
        if differ:
            why = f"{run}'s chain has other {'/'.join(differ)} than this copy: another model"
    if why:
        line["score_note"] += f"; {why}"
        return
    line["value"], line["score_src"], line["score_from"] = entry["score"], pattern, entry["file"]
    line.pop("score_note", None)


def _shape_differs(pipeline: Dict[str, Dict[str, dict]], task: Optional[str], chain_shape: Optional[dict]) -> List[str]:
    """Which of heads, FFN widths and vocabulary of the pipeline run's chain differ from the copy's."""
    theirs = _pipeline_chain_shape(pipeline, task)
    return [k for k in ("heads", "ffn", "vocab")
            if k in theirs and (chain_shape or {}).get(k) is not None and theirs[k] != chain_shape[k]]


def _not_this_chain(task: Optional[str], server: Optional[dict], pipeline: Optional[Dict[str, Dict[str, dict]]],
                    chain_shape: Optional[dict]) -> Optional[str]:
    """Why the server bench's chain may be another model than the edge copy's, or None. The server
    bench records no shapes: it is tied to a pipeline run by its teacher's score (training is
    seeded, and a rerun of the same chain lands on other heads), and the copy to that run by shape."""
    pipeline = pipeline or {}
    run = (pipeline.get("runs") or {}).get(task)
    ours = (pipeline.get("teacher", {}).get(task) or {}).get("score")
    if run is None or ours is None:
        return None   # nothing on record to compare with
    theirs = next((r.get("value") for r in (server or {}).get("rows", [])
                   if variant_key(r) == TEACHER and r.get("value") is not None), None)
    if theirs is not None and abs(theirs - ours) > 1e-6:
        return (f"its teacher scores {theirs:.2f}, {run}'s {ours:.2f} (the bench is of another run, "
                "whose chain shape is not on record)")
    differ = _shape_differs(pipeline, task, chain_shape)
    if differ:
        return f"{run}'s chain has other {'/'.join(differ)} than this copy"
    return None


def _pipeline_chain_shape(pipeline: Dict[str, Dict[str, dict]], task: Optional[str]) -> dict:
    """The heads and FFN widths (the heads+FFN step's file) and vocabulary (the chain's) of the pipeline run's chain."""
    shape = dict((pipeline.get("chain-hf", {}).get(task) or {}).get("shape") or {})
    vocab = ((pipeline.get("chain", {}).get(task) or {}).get("shape") or {}).get("vocab")
    shape.pop("vocab", None)
    if vocab is not None:
        shape["vocab"] = vocab
    return shape


def _score_from_server(line: dict, server: Optional[dict], task: Optional[str] = None) -> None:
    """An edge line's score: the server row of the same weights (``EDGE_NAMES``), else None and why."""
    source = EDGE_NAMES.get(line["name"], "unmapped")
    line["value"], line["score_from"], line["score_src"] = None, None, None
    bench = next(pattern for s, pattern, _ in SOURCES if s == "server-cpu")
    if source is None:
        line["score_note"] = "no scored model of this shape and precision: EDGE_NAMES maps it to none"
    elif source == "unmapped":
        line["score_note"] = "name not in EDGE_NAMES"
    elif server is None:
        line["score_note"] = "no server bench of this task"
    else:
        match = [r for r in server["rows"] if r["name"] == source and variant_key(r)[1] == line["precision"]]
        if match and match[0].get("value") is not None:
            line["value"], line["score_src"] = match[0]["value"], bench
            line["score_from"] = bench.format(task=task or match[0].get("task"))
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
        unscored = [t for t in TASKS if got[t]["value"] is None]
        srcs = "; ".join(sorted({got[t].get("score_src") for t in TASKS if got[t].get("score_src")}))
        reasons = {(got[t].get("score_note") or "").replace(f"/{t}-", "/{task}-") for t in unscored}
        note = f"no score on {', '.join(unscored)}" if len(unscored) < len(TASKS) else "no score on any task"
        if len(reasons) == 1 and "" not in reasons:
            note += f" ({reasons.pop()})"
        lines.append({"name": name, "precision": precision, "group": per[0]["group"], "engine": per[0]["engine"],
                      "value": _mean([ln["value"] for ln in per]), "p50": _mean([ln["p50"] for ln in per]),
                      "p90": _mean([ln["p90"] for ln in per]), "throughput": tput,
                      "size_bytes": _mean([ln["size_bytes"] for ln in per]),
                      "parameters": _mean([ln["parameters"] for ln in per]),
                      "tasks": {t: got[t]["value"] for t in TASKS},
                      "score_from": srcs or None, "scored_tasks": [t for t in TASKS if t not in unscored],
                      **({"score_note": note, "unscored_tasks": unscored} if unscored else {})})
    return {"missing_tasks": [], "lines": _finish(lines), "partial": partial}


# -- the targets -------------------------------------------------------------

def targets(machine: dict, g5: dict) -> List[dict]:
    """The issue's targets on one CPU machine, each met, not met or not computed (and why)."""
    teacher, chain, student = (_find(g5["lines"], *TEACHER), _find(g5["lines"], CHAIN),
                               _find(g5["lines"], STUDENT))
    why = _why_not(g5, teacher, chain, CHAIN)   # scores are not needed for (b), (c) and (d)
    both = chain is not None and teacher is not None
    ret = _ratio(chain["value"], teacher["value"]) if both else None
    sp = chain["speedup"] if chain else None
    size = _ratio(teacher["size_bytes"], chain["size_bytes"]) if both else None
    sret = _ratio(student["value"], teacher["value"]) if student and teacher else None
    out = [
        _target("a", f"GLUE-5 retention of {CHAIN} >= {_pct(TARGETS['retention'])}", ret, TARGETS["retention"],
                lambda: f"{CHAIN} {_num(chain['value'])} / teacher {_num(teacher['value'])} = {_pct(ret)}",
                why or _unscored(teacher, chain)),
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
                _why_not(g5, teacher, student, STUDENT) or _unscored(teacher, student)),
    ]
    return [{**t, "machine": machine["title"], "machine_key": machine["key"]} for t in out]


def _unscored(*lines: Optional[dict]) -> str:
    """Which GLUE-5 lines lack a score, on which tasks."""
    said = [f"{ln['label']} has no score on {', '.join(ln['unscored_tasks'])}" for ln in lines
            if ln and ln.get("unscored_tasks")]
    return "scores missing: " + "; ".join(said) if said else "scores missing"


def _target(tid: str, what: str, value: Optional[float], threshold: float, figures, reason: str) -> dict:
    """One target's verdict; ``figures`` (called only when there is a value) shows the numbers."""
    verdict = "not computed" if value is None else ("met" if value >= threshold else "not met")
    return {"id": tid, "target": what, "value": value, "threshold": threshold, "verdict": verdict,
            "figures": figures() if value is not None else reason}


def _peer_targets(g5: dict, chain: Optional[dict], why: Optional[str]) -> List[dict]:
    """(c) against the fastest peer whatever its score; (c') the same ratio, met only where the chain
    also scores at least that peer (the chain at equal or better score). The figures of (c') add the
    iso-accuracy view: the fastest peer that reaches the chain's score, and how much slower it is."""
    peers = sorted((ln for ln in g5["lines"] if ln["name"] in PEERS and ln["p50"] is not None),
                   key=lambda p: p["p50"])
    listed = ", ".join(f"{p['label']} {_ms(p['p50'])} ms (score {_num(p['value']) or 'n/a'})" for p in peers)
    fastest = peers[0] if peers else None
    r = _ratio(fastest["p50"], chain["p50"]) if chain and fastest else None
    c = _target("c", f"p50 of {CHAIN} >= {_x(TARGETS['peer'])} lower than the fastest peer's", r, TARGETS["peer"],
                lambda: f"fastest peer {fastest['label']} {_ms(fastest['p50'])} ms / {CHAIN} {_ms(chain['p50'])} ms"
                        f" = {_x(r)}; {CHAIN} scores {_num(chain['value']) or 'n/a'}; peers: {listed}",
                why or "no peer measured on all five tasks")
    what = (f"p50 of {CHAIN} >= {_x(TARGETS['peer'])} lower than the fastest peer's, {CHAIN} scoring at least "
            "that peer")
    chain_score = chain["value"] if chain else None
    if why or r is None or chain_score is None or fastest["value"] is None:
        reason = why or ("no peer measured on all five tasks" if r is None else
                         _unscored(chain) if chain_score is None else f"{fastest['label']} has no score")
        return [c, _target("c'", what, None, TARGETS["peer"], None, reason)]
    better = [p for p in peers if p["value"] is not None and p["value"] >= chain_score]
    iso = (f"; iso-accuracy view: the fastest peer scoring at least {CHAIN} is {better[0]['label']} "
           f"({_num(better[0]['value'])}, {_ms(better[0]['p50'])} ms, "
           f"{_x(_ratio(better[0]['p50'], chain['p50']))} slower)" if better
           else f"; no peer reaches {CHAIN}'s score")
    figures = (f"{CHAIN} {_num(chain_score)} vs {fastest['label']} {_num(fastest['value'])}; "
               f"{_ms(fastest['p50'])} ms / {_ms(chain['p50'])} ms = {_x(r)}" + iso)
    ok = chain_score >= fastest["value"] and r >= TARGETS["peer"]
    if chain_score < fastest["value"]:
        figures += f"; {CHAIN} scores {_num(fastest['value'] - chain_score)} below the fastest peer"
    return [c, {"id": "c'", "target": what, "value": r, "threshold": TARGETS["peer"],
                "verdict": "met" if ok else "not met", "figures": figures}]


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


# -- the pipeline runs' dev scores (no latency) -----------------------------------

def pipeline_glue5(pipeline: Dict[str, Dict[str, dict]]) -> List[dict]:
    """Per pipeline model: the score of each task, retention against the same task's teacher, the
    GLUE-5 mean and its retention against the teachers' GLUE-5 (where all five are there), the tasks
    missing."""
    teacher = {t: e["score"] for t, e in pipeline.get("teacher", {}).items()}
    runs = pipeline.get("runs") or {}
    teacher5 = _mean([teacher.get(t) for t in TASKS])
    out = []
    for model, pattern, what in PIPELINE_MODELS:
        got = pipeline.get(model, {})
        scores = {t: got[t]["score"] for t in TASKS if t in got}
        missing = [t for t in TASKS if t not in scores]
        g5 = _mean([scores[t] for t in TASKS]) if not missing else None
        out.append({"model": model, "what": what, "file": _runs_text(runs, pattern), "tasks": scores,
                    "missing_files": _runs_text({t: runs[t] for t in missing if t in runs}, pattern)
                    if any(t in runs for t in missing) else None,
                    "retention_tasks": {t: _ratio(v, teacher.get(t)) for t, v in scores.items()},
                    "glue5": g5, "teacher_glue5": teacher5, "retention": _ratio(g5, teacher5),
                    "missing_tasks": missing,
                    "parameters": {t: got[t]["parameters"] for t in TASKS if t in got},
                    "size_bytes": {t: got[t]["size_bytes"] for t in TASKS if t in got}})
    return out


def pipeline_targets(rows: List[dict], machine_targets: List[dict], runs: Dict[str, str]) -> List[dict]:
    """(a) and (e) on the pipeline's dev scores, for each that no CPU machine could compute: (a) on
    the INT8 chain where all five tasks have its score, else on the chain in FP32, labelled so (and
    "not met" only where that FP32 figure is already below the target; the INT8 figure stays not
    computed); (e) on the 6-layer kd student."""
    by = {r["model"]: r for r in rows}
    computed = {t["id"] for t in machine_targets if t["verdict"] != "not computed"}
    where = f"the pipeline runs ({', '.join(dict.fromkeys(runs[t] for t in TASKS if t in runs))}; dev scores, no latency)"
    in_runs = "in " + (_runs_text(runs) if runs else "no pipeline run")
    out = []
    teacher = by.get("teacher")
    no_teacher = ("teacher (PyTorch FP32) missing on " + ", ".join(teacher["missing_tasks"])) \
        if teacher and teacher["missing_tasks"] else None
    if "a" not in computed:
        what = f"GLUE-5 retention of {CHAIN} >= {_pct(TARGETS['retention'])}"
        ci, c = by.get(CHAIN), by.get("chain")
        if ci and ci["retention"] is not None:
            t = _target("a", what, ci["retention"], TARGETS["retention"],
                        lambda: f"{CHAIN} {_num(ci['glue5'])} / teacher {_num(ci['teacher_glue5'])} "
                                f"= {_pct(ci['retention'])} ({ci['file']})", "")
            out.append({**t, "value_of": CHAIN})
        else:
            known = [t for t in TASKS if ci and t in ci["tasks"]]
            int8 = (f"its INT8 score is known for {', '.join(known)} only" if known
                    else "its INT8 score is known for no task")
            if c and c["retention"] is not None:
                r = c["retention"]
                verdict = "not met" if r < TARGETS["retention"] else "not computed"
                figures = (f"the chain in FP32 ({int8}): chain {_num(c['glue5'])} / teacher "
                           f"{_num(c['teacher_glue5'])} = {_pct(r)}; the INT8 figure ({CHAIN}'s GLUE-5 "
                           f"retention) is not computed"
                           + (f" (no {ci['missing_files']})" if ci and ci["missing_files"] else "")
                           + ("; the FP32 chain is below the target" if verdict == "not met"
                              else "; the FP32 chain meets it, so the verdict waits for the INT8 scores"))
                out.append({"id": "a", "target": what, "value": r, "threshold": TARGETS["retention"],
                            "verdict": verdict, "figures": figures, "value_of": "chain (FP32)"})
            else:
                reason = no_teacher or (f"no chain score on {', '.join(c['missing_tasks'])} and {int8}" if c
                                        else f"no chain {in_runs}")
                out.append({**_target("a", what, None, TARGETS["retention"], None, reason), "value_of": None})
    if "e" not in computed:
        what = f"a 6-layer student ({PIPELINE_STUDENT}) at >= {_pct(TARGETS['student'])} GLUE-5 retention"
        st = by.get(PIPELINE_STUDENT)
        reason = no_teacher or (f"no {PIPELINE_STUDENT} score on {', '.join(st['missing_tasks'])}" if st
                                else f"no {PIPELINE_STUDENT} {in_runs}")
        t = _target("e", what, st and st["retention"], TARGETS["student"],
                    lambda: f"{PIPELINE_STUDENT} {_num(st['glue5'])} / teacher {_num(st['teacher_glue5'])} "
                            f"= {_pct(st['retention'])}", reason)
        out.append({**t, "value_of": PIPELINE_STUDENT if t["value"] is not None else None})
    return [{**t, "machine": where, "machine_key": PIPELINE} for t in out]


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

def other_systems(summary: Optional[dict], shown: Optional[Dict[str, str]] = None) -> List[dict]:
    """summary.json's models by run: the score on each task, GLUE-5 where all five are there. A task
    of a run the pipeline table shows already (``shown``: task -> run) is left out here."""
    shown = shown or {}
    if summary is None:
        return []
    models: Dict[Tuple[str, str], dict] = {}
    for r in summary["rows"]:
        if r["name"].count("/") < 2:   # not a run/task/model row
            continue
        run, task, model = r["name"].rsplit("/", 2)
        if shown.get(task) == run:
            continue
        m = models.setdefault((run, model), {"run": run, "model": model, "label": (r.get("extra") or {}).get("label"),
                                             "tasks": {}, "teacher": {}})
        m["tasks"][task], m["teacher"][task] = r["value"], r.get("teacher_value")
    for m in models.values():
        five = all(t in m["tasks"] for t in TASKS)
        m["glue5"] = _mean([m["tasks"][t] for t in TASKS]) if five else None
        m["teacher_glue5"] = _mean([m["teacher"][t] for t in TASKS]) if five else None
        m["retention"] = _ratio(m["glue5"], m["teacher_glue5"])
        # a recipe whose tasks' runs differ (one chose on dev, say): the summary's GLUE-5 label names them
        m["label"] = (summary.get("glue5") or {}).get(f"{m['run']}_{m['model']}", {}).get("label") or m["label"]
    return list(models.values())


# -- the whole report --------------------------------------------------------------

def build(folder: str) -> dict:
    """Everything the report shows, as plain data (``report.json``)."""
    docs, summary, missing = load(folder)
    pipeline, pipeline_missing = load_pipeline(folder)
    runs = pipeline["runs"]
    report = {"folder": folder, "edge_names": EDGE_NAMES,
              "edge_pipeline": {e: m for e, (m, _) in EDGE_PIPELINE.items()}, "targets_thresholds": TARGETS,
              "missing": missing + pipeline_missing, "machines": [], "targets": [], "gpu_throughput": [],
              "pipeline_runs": runs, "pipeline": pipeline_glue5(pipeline),
              "other_systems": other_systems(summary, runs),
              "summary_glue5": (summary or {}).get("glue5"), "fingerprints": _fingerprints(docs),
              "commands": commands(folder, docs, summary)}
    for m in machines(docs):
        server = docs["server-cpu"]
        per_task = {task: task_lines(doc, m, server.get(task), pipeline, task)
                    for task, doc in docs[m["source"]].items() if task in m.get("only", TASKS)}
        g5 = glue5(per_task)
        report["machines"].append({**m, "tasks": {t: per_task[t] for t in TASKS if t in per_task}, "glue5": g5})
        if m["source"] == "gpu":
            report["gpu_throughput"] += [{**r, "gpu": m["gpu"]} for r in gpu_throughput(per_task, g5)]
        else:
            report["targets"] += targets(m, g5)
    report["targets"] += pipeline_targets(report["pipeline"], report["targets"], runs)
    report["plot"] = [{k: v for k, v in p.items() if k != "lines"} for p in plot_panels(report)]
    report["seeds"] = seed_retention(report["other_systems"])
    return report


def commands(folder: str, docs: Dict[str, Dict[str, dict]], summary: Optional[dict]) -> dict:
    """The command files found (their text) and each results file's own command."""
    files = sorted(glob.glob(os.path.join(folder, "server", "commands-*.txt")))
    for run in pipeline_folders(folder):
        files += sorted(glob.glob(os.path.join(folder, run, "commands-*.txt")))
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
             + f". Where the server bench has no score, the same model's score comes from the GPU pipeline's "
             f"own dev evaluation in the task's pipeline run ({_runs_text(report['pipeline_runs'])}): "
             + ", ".join(f"`{e}` <- `{PIPELINE_FILES[pm]}`"
                         for e, pm in report["edge_pipeline"].items())
             + " (and only where its parameter count, and for the chain its heads, FFN widths and vocabulary, match "
             "the timed copy); any other variant, peers included, stays unscored: no model takes another's score. "
             "Every table's `score from` column names the file each score came from. Speed-ups compare batch-1 "
             "p50 with the teacher in PyTorch FP32 on the same machine and threads.",
             ""]
    if plot_file:   # the plot and the tables first, the commands that made them last
        lines += [f"![latency versus score]({plot_file})", ""]
        lines += ["Plot panels: " + "; ".join(
            f"{p['name']}: " + (f"{p['machine']}, {p['drawn']} drawn" if p["machine"] else "nothing measured")
            + (f", {len(p['left_out'])} without a score left out ({', '.join(p['left_out'])})" if p["left_out"]
               else "") for p in report.get("plot", [])) + ".", ""]
    lines += ["## Missing", ""]
    lines += [f"- {m}" for m in report["missing"]] or ["Nothing: every input file is there."]
    lines += [""]
    lines += _targets_section(report)
    lines += _pipeline_section(report)
    lines += _glue5_section(report)
    lines += _gpu_section(report)
    lines += _task_section(report)
    lines += _others_section(report)
    if report.get("seeds"):
        lines += [f"![seed systems: score as a share of the teacher]({SEEDS_PLOT})", "",
                  "The seed recipes (`recipes/mpnet/`): each run's last dev score as a share of the teacher "
                  "of its own run, per task; a task without a bar is a pair not run yet. Sorted by the mean "
                  "over the tasks run.", ""]
    lines += ["## Machines", ""]
    for fp in report["fingerprints"]:
        lines += [f"**{fp['source']}** ({', '.join(fp['tasks'])}; {fp['hosts']} host(s)):", "", fp["text"], ""]
    if not report["fingerprints"]:
        lines += ["No results file, so no machine fingerprint.", ""]
    lines += _rerun_section(report)
    return "\n".join(lines)


def _rerun_section(report: dict) -> List[str]:
    out = ["## How to rerun", "", "<details>", "<summary>The commands that made every input file "
           "(collapsed)</summary>", ""]
    files = report["commands"]["files"]
    for name, text in files.items():
        out += [f"`{name}`:", "", "```", text, "```", ""]
    for expected in ("server/commands-*.txt", "latency-commands.sh"):
        if not any(re.fullmatch(expected.replace("*", ".*"), f) for f in files):
            out += [f"- `{expected}`: missing, so those commands are not recorded here."]
    own = report["commands"]["results"]
    if own:
        out += ["", "Each results file's own command:", ""] + [f"- `{f}`: `{c}`" for f, c in own.items()]
    out += ["", f"This report: `python -m bench.experiments.mpnet_glue5_report {report['folder']}`", "",
            "</details>", ""]
    return out


def _targets_section(report: dict) -> List[str]:
    out = ["## Targets", "",
           f"Checked against `{CHAIN}` on each CPU machine's GLUE-5 means (the fastest peer is the fastest of "
           f"{', '.join(PEERS)} present on all five tasks; (c) compares with it whatever its score; (c') is met only where the "
           f"chain also scores at least that peer, and adds the iso-accuracy view: the fastest peer scoring at least "
           f"the chain). Where a machine has all five tasks' latency and sizes but "
           f"not their scores, (b), (c) and (d) are still computed (they need no score); (a), (c') and (e) are "
           f"not. Where no CPU machine can check (a) or (e), the pipeline rows check them on the pipeline runs' "
           f"dev scores (next section).", "",
           "| target | machine | figures | verdict |", "|---|---|---|---|"]
    for m in report["machines"]:
        mine = [t for t in report["targets"] if t["machine_key"] == m["key"]]
        if mine and m["glue5"]["missing_tasks"]:   # one line for all: nothing computed without five tasks
            out.append(f"| ({mine[0]['id']})-({mine[-1]['id']}) all | {m['title']} | {mine[0]['figures']} "
                       "| **not computed** |")
            continue
        out += [f"| ({t['id']}) {t['target']} | {t['machine']} | {t['figures']} | **{t['verdict']}** |" for t in mine]
    out += [f"| ({t['id']}) {t['target']} | {t['machine']} | {t['figures']} | **{t['verdict']}** |"
            for t in report["targets"] if t["machine_key"] == PIPELINE]
    if not report["targets"]:
        out += ["| all | - | no CPU results | **not computed** |"]
    return out + [""]


def _pipeline_section(report: dict) -> List[str]:
    rows = report["pipeline"]
    out = ["## GLUE-5 of the pipeline's models (dev scores, no latency)", "",
           f"From the GPU pipeline runs, {_runs_text(report['pipeline_runs'])} (per task the newest run "
           f"with that task's teacher, all of a task's scores from that run; each model's own evaluation "
           f"on the dev split): each "
           f"task's score (its retention against the same task's teacher in brackets), the GLUE-5 mean where "
           f"all five tasks are there, and its retention against the teachers' GLUE-5.", ""]
    if not any(r["tasks"] for r in rows):
        return out + ["Not computed: no pipeline run's scores.", ""]
    out += ["| model | what | " + " | ".join(TASKS) + " | GLUE-5 | retention | missing | file |",
            "|---|---|" + "---:|" * (len(TASKS) + 2) + "---|---|"]
    for r in rows:
        cells = [_num(r["tasks"][t]) + (f" ({_pct(r['retention_tasks'][t])})" if r["retention_tasks"][t] else "")
                 if t in r["tasks"] else "-" for t in TASKS]
        out.append(f"| {r['model']} | {r['what']} | " + " | ".join(cells)
                   + f" | {_num(r['glue5']) or 'n/a'} | {_pct(r['retention']) or 'n/a'} "
                     f"| {', '.join(r['missing_tasks']) or '-'} | {r['file']} |")
    return out + ["", "GLUE-5 is left n/a for a model missing a task: it is never filled in with another "
                      "model's score.", ""]


TABLE_HEAD = ["| variant | group | engine | precision | score | score from | retention | p50 (ms) | p90 (ms) "
              "| throughput (sent/s @ batch) | size (MB) | parameters | speed-up | Pareto |",
              "|---|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|:-:|"]


def _table(lines: List[dict]) -> List[str]:
    out = list(TABLE_HEAD)
    for ln in lines:
        tput = "; ".join(f"{t:.1f} @ {b}" for b, t in ln["throughput"])
        score = _num(ln["value"]) or ("n/a" if ln.get("score_note") else "")
        src = "; ".join(f"`{f}`" for f in ln["score_from"].split("; ")) if ln.get("score_from") else ""
        if src and ln.get("unscored_tasks"):
            src += f" ({', '.join(ln['scored_tasks'])} only)"
        out.append(f"| {ln['label']} | {ln['group']} | {ln.get('engine') or ''} | {ln['precision']} | {score} "
                   f"| {src} | {_pct(ln['retention'])} | {_ms(ln['p50'])} | {_ms(ln['p90'])} | {tput} "
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
    out += ["| task | GPU | precision | batch | teacher (sent/s) | chain (sent/s) | chain / teacher |",
            "|---|---|---|---:|---:|---:|---:|"]
    out += [f"| {r['task']} | {r['gpu']} | {r['precision']} | {r['batch_size']} | {r['teacher']:.1f} "
            f"| {r['chain']:.1f} | {_x(r['ratio'])} |" for r in rows]
    return out + ["", "GLUE-5: the ratio of the five tasks' mean throughputs, only where one GPU model measured all "
                      "five (tasks benched on different GPUs are never averaged). A GPU bench times and scores the "
                      "models of the run on the machine it ran on (its own scores, `server/bench-{task}-gpu.json`), "
                      "which may be an earlier run than the pipeline table's.", ""]


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

def _ms(x: Optional[float]) -> str:
    return _num(x, 2)


def _pct(x: Optional[float]) -> str:
    return f"{100 * x:.2f}%" if x is not None else ""


def _x(x: Optional[float]) -> str:
    return f"{x:.1f}×" if x is not None else ""


def _int(n: Optional[float]) -> str:
    return f"{round(n):,}" if n else ""


# -- the plot ----------------------------------------------------------------------

def plot_panels(report: dict) -> List[dict]:
    """The plot's six panels (each task, then GLUE-5), each from the server CPU at 1 thread where that
    panel has scored points there, else the edge CPU at 1 thread (its scores: the server bench's, else
    the pipeline run's of the same model), else whichever has lines (latency only). ``left_out``: the labels
    of the timed variants without a score, which are not drawn."""
    by = {m["key"]: m for m in report["machines"]}
    candidates = [by[k] for k in ("server-cpu-1t", "edge-cpu-1t") if k in by]
    panels = []
    for name in TASKS + ("GLUE-5",):
        options = [(m, m["glue5"]["lines"] if name == "GLUE-5" else m["tasks"].get(name) or [])
                   for m in candidates]
        chosen = next(((m, lines) for m, lines in options if any(_drawable(ln) for ln in lines)), None) \
            or next(((m, lines) for m, lines in options if lines), None)
        m, lines = chosen or (None, [])
        if lines:
            empty = "latency only: no scores (see report.md)"
        elif name != "GLUE-5":
            empty = "not measured at 1 thread"
        else:
            missing = [t for t in TASKS if not any(t in mm["tasks"] for mm in candidates)] if candidates else TASKS
            empty = ("not computed: missing " + ", ".join(missing)) if missing else "not computed"
        panels.append({"name": name, "machine": m["title"] if m else None, "lines": lines, "empty": empty,
                       "drawn": sum(1 for ln in lines if _drawable(ln)),
                       "left_out": [ln["label"] for ln in lines if ln["p50"] is not None and ln["value"] is None]})
    return panels


def _drawable(ln: dict) -> bool:
    return ln["p50"] is not None and ln["value"] is not None


def plot(report: dict):
    """2x3 panels: latency versus score per task and GLUE-5, coloured by group, the frontier stepped."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = plot_panels(report)
    fig, axes = plt.subplots(2, 3, figsize=(16, 9.5), dpi=100)
    fig.suptitle("MPNet-base GLUE-5: p50 latency (batch 1) versus dev score, CPU at 1 thread "
                 "(each panel names its machine)")
    for ax, p in zip(axes.flat, panels):
        _panel(ax, p["name"], p["lines"], p["machine"] or "no CPU at 1 thread measured", p["empty"])
        if p["left_out"] and p["drawn"]:
            names = ", ".join(p["left_out"]) if len(p["left_out"]) <= 4 else f"{', '.join(p['left_out'][:4])}, ..."
            ax.text(0.99, 0.01, f"{len(p['left_out'])} without a score not drawn: {names}", ha="right",
                    va="bottom", transform=ax.transAxes, fontsize=7, color="#555")
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


# -- the seed systems' plot ---------------------------------------------------------

SEEDS_PLOT = "seeds.png"


def seed_retention(others: List[dict]) -> List[dict]:
    """The seed recipes' runs (summary.json's ``seeds`` rows): each task's score over its own
    run's teacher, the recipes sorted by the mean of those (best first)."""
    rows = []
    for m in others:
        if m["run"] != "seeds" or m["model"].startswith("teacher"):   # teacher, teacher-holdout
            continue
        share = {t: m["tasks"][t] / m["teacher"][t] for t in TASKS if t in m["tasks"] and m["teacher"].get(t)}
        if share:
            rows.append({"model": m["model"], "retention": share, "glue5_retention": m.get("retention")})
    return sorted(rows, key=lambda r: -sum(r["retention"].values()) / len(r["retention"]))


def plot_seeds(rows: List[dict]):
    """Horizontal bars, one group per recipe, one bar per task: score as % of its run's teacher."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = [t for t in TASKS if any(t in r["retention"] for r in rows)]
    fig, ax = plt.subplots(figsize=(11, 1.0 + 0.55 * len(rows)), dpi=100)
    height = 0.8 / max(1, len(tasks))
    colours = plt.get_cmap("tab10")
    for j, task in enumerate(tasks):
        ys = [i + (j - (len(tasks) - 1) / 2) * height for i, r in enumerate(rows) if task in r["retention"]]
        xs = [100 * r["retention"][task] for r in rows if task in r["retention"]]
        ax.barh(ys, xs, height=height, color=colours(j), label=task)
        for y, x in zip(ys, xs):   # a score near nothing still says it was run (no bar: not run)
            if x < 10:
                ax.text(max(x, 0) + 0.5, y, f"{x:.1f}%", va="center", fontsize=7)
    ax.axvline(100, color="black", lw=0.8)
    ax.axvline(99, color="#2ca02c", lw=0.8, ls="--", label="99%")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([r["model"] + (f"\nGLUE-5 {100 * round(r['glue5_retention'], 6):.1f}%" if r.get("glue5_retention") else "")
                        for r in rows])
    ax.invert_yaxis()
    ax.set_xlim(min(0, min(100 * v for r in rows for v in r["retention"].values()) - 2), 110)
    ax.set_xlabel("dev score, % of the teacher of the same run")
    ax.set_title("Seed systems on MPNet-base (recipes/mpnet/): share of the teacher's dev score")
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    fig.tight_layout()
    return fig


# -- HTML --------------------------------------------------------------------------

def html_page(md: str, png, title: str) -> str:
    """The markdown as one self-contained page (``bench.report.html_document``; ``png``: bytes,
    or {file: bytes} for several plots)."""
    return html_document(title, md, png, width=1300)


# -- writing -------------------------------------------------------------------------

def write_report(report: dict, out: str) -> List[str]:
    """report.md, report.html, report.png and report.json in ``out``, each written atomically."""
    import io

    import matplotlib.pyplot as plt

    paths = [os.path.join(out, f"report.{ext}") for ext in ("md", "html", "png", "json")]

    def png_of(fig) -> bytes:
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
        plt.close(fig)
        return buf.getvalue()

    images = {os.path.basename(paths[2]): png_of(plot(report))}
    if report.get("seeds"):
        images[SEEDS_PLOT] = png_of(plot_seeds(report["seeds"]))
    md = markdown(report, os.path.basename(paths[2]))
    write_text(paths[0], md + "\n")
    write_text(paths[1], html_page(md, images, "MPNet-base GLUE-5 (issue 14)"))
    write_json(paths[3], _rounded(report))
    for name, data in images.items():
        write_bytes(os.path.join(out, name), data)
    return paths + [os.path.join(out, name) for name in images if name != os.path.basename(paths[2])]


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
