"""The accuracy-first chain's deployable graph against today's chain and the PyTorch FP32 teacher,
on this CPU, in one bench run per task (issue 32's latency target, issue 33's 15x).

The trained models stay on the GPU machine; latency depends on shapes, not on the weights' values.
So each graph is rebuilt here from MPNet-base with random task heads, through the toolkit's own
stages, in the shapes and with the INT8 choices of the trained models:

- ``teacher``: MPNet-base, 12 layers, a fresh task head, timed in PyTorch FP32 (the bench's teacher);
- ``chain-int8``: the accuracy-first chain (``recipes/mpnet/chain-augmented.yaml``): every other
  layer (6), heads and FFN neurons resized to what each layer kept in the GPU run
  (``{records}/{task}-chain/03-prune/record.json``, ``pruning.heads_after``/``ffn_after``), no
  vocabulary pruning, the fused ONNX export, and the INT8 graph the run chose on held-out rows
  (``05-quantize/record.json``: dynamic INT8, or mixed with the same units kept FP32, by name).
  A task without a prune record is pruned here by the toolkit (heads and FFN halved, gradient /
  Taylor importance on a few training rows); a task without a quantize record gets dynamic INT8
  and, as a bracket, ``chain-int8-fp32units``: the units kept FP32 by the record keeping most;
- ``today-chain-int8``: the headline chain (``bench/results/mpnet-glue5``, as its
  ``latency-{task}-cpu.json`` was built by ``mpnet_glue5_latency``): the 6-layer student resized to
  the GPU run's ``{task}-chain-hf-metrics.json`` shape, its vocabulary pruned to the task's training
  text (the same pieces as on the GPU machine, checked), the fused export and dynamic INT8.

``compressor.bench.suite.run_benchmark`` then times the three (four) of one task in one run: each
variant in its own process, in rounds, batch 1 over the task's real dev sentences, at each thread
count. Scores are not measured (``score`` off): the heads are random. Built folders are kept under
``--work`` and reused when their plan is unchanged, so a later run only times.

    GLUE_DIR=../shared/glue_data flock -x /tmp/cpu.lock .venv/bin/python -m \\
        bench.experiments.chain_latency_same_shape --base /tmp/mpnet \\
        --out-dir bench/results/chain-latency-same-shape

``--build-only`` builds every graph without timing; ``--sentences 20 --threads 1`` is one round.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from typing import Dict, List, Optional

TASKS = ("sst2", "mrpc", "stsb", "cola", "rte")
# the run each task's headline chain is scored from (bench/results/mpnet-glue5/README.md)
TODAY_RUNS = {"sst2": "pipeline7", "mrpc": "pipeline7", "stsb": "pipeline7", "rte": "pipeline7", "cola": "pipeline5"}
MADE_BY = "bench.experiments.chain_latency_same_shape"
NOTE = ("random weights in the trained models' shapes, with the trained models' INT8 choices: "
        "latency is comparable, scores are not measured")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _read(path: str) -> Optional[dict]:
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


# -- what to build, from the GPU runs' records ------------------------------------------------

def _stage_dir(run_folder: str, kind: str) -> str:
    """The run's last stage folder of ``kind`` (``05-quantize`` in a chain, ``04-quantize`` where
    QAT replaced the export stage); ``05-quantize`` when there is none."""
    from bench.experiments.jsonfiles import last_stage

    return last_stage(run_folder, kind) or "05-quantize"


def unit_nodes(onnx_path: str) -> Dict[str, List[str]]:
    """Unit name -> nodes of this graph, for layers and single products alike. A product the GPU run's
    graph named under its wrapper module (``layer.1.inner.layer.1.intermediate.dense``) is found by
    its plain name (``layer.1.intermediate.dense``)."""
    from compressor.export import int8 as ox

    units = dict(ox.quantizable_units(onnx_path, "matrix"))
    units.update(ox.quantizable_units(onnx_path, "layer"))
    return {_plain(name): nodes for name, nodes in units.items()}


def _plain(unit: str) -> str:
    return re.sub(r"^(layer\.\d+)\.inner\.\1\.", r"\1.", unit)


def int8_choice(record: dict) -> dict:
    """The INT8 graph a quantize record says was kept: method (dynamic, dynamic_per_tensor,
    static, mixed or fp32) and, for mixed, the units left FP32 (layer granularity names)."""
    search = record.get("search") or {}
    chosen = search.get("chosen")
    if record.get("method") == "mixed" or (chosen or "").startswith("mixed"):
        units = search.get("fp32_units") or (search.get("mixed") or {}).get("fp32_units") or []
        return {"method": "mixed", "fp32_units": list(units)}
    # a QAT graph is dynamic INT8 of other weights: the same latency
    names = {"dynamic-int8": "dynamic", "dynamic-int8-per-tensor": "dynamic_per_tensor",
             "static-int8": "static", "fp32": "fp32", "qat-int8": "dynamic"}
    if chosen is not None:
        if chosen not in names:
            raise SystemExit(f"quantize record: unknown choice {chosen!r}")
        return {"method": names[chosen], "fp32_units": []}
    if record.get("method") in ("dynamic", "static", "qat"):
        return {"method": "static" if record["method"] == "static" else "dynamic", "fp32_units": []}
    raise SystemExit(f"quantize record: no INT8 choice in method {record.get('method')!r}")


def widened(pruning: dict, heads: float, ffn: float) -> dict:
    """A pruned shape with each layer's kept heads and FFN neurons multiplied by ``heads`` and ``ffn``
    (rounded, capped at the layer's count before pruning): a lighter pruning of the same student
    that no run has trained yet, for its latency."""
    def scale(after, before, by):
        return [min(b, max(1, round(a * by))) for a, b in zip(after, before)]
    return {"heads": scale(pruning["heads_after"], pruning["heads_before"], heads),
            "ffn": scale(pruning["ffn_after"], pruning["ffn_before"], ffn)}


def new_chain_plan(records: str, task: str, bracket_units: List[str], run: str = "chain",
                   criterion: Optional[tuple] = None, widen: Optional[tuple] = None) -> dict:
    """The accuracy-first chain's shape and INT8 choice for ``task`` from its GPU run's records
    (``{records}/{task}-{run}/``); with ``criterion`` (max_drop, min_agreement[, latency_margin]), the choice those
    records' verdicts give under it (``int8_rejudge``) instead of the one they made; with ``widen``
    (heads, ffn), the recorded shape widened by those factors (:func:`widened`)."""
    folder = os.path.join(records, f"{task}-{run}")
    prune = _read(os.path.join(folder, "03-prune", "record.json"))
    quant_dir = _stage_dir(folder, "quantize")
    quant = _read(os.path.join(folder, quant_dir, "record.json"))
    plan = {"layers": 6, "vocab": "full (no vocabulary pruning)"}
    if prune is not None:
        p = prune["pruning"]
        plan["shape"] = {"heads": p["heads_after"], "ffn": p["ffn_after"]}
        plan["shape_from"] = os.path.join(folder, "03-prune", "record.json")
        if widen is not None:
            plan["shape"] = widened(p, *widen)
            plan["widened"] = {"heads": widen[0], "ffn": widen[1], "recorded": {"heads": p["heads_after"],
                                                                               "ffn": p["ffn_after"]}}
    elif widen is not None:
        raise SystemExit(f"--widen: {folder} has no prune record to widen")
    else:
        plan["shape"] = None
        plan["shape_from"] = ("no prune record: heads and FFN halved here (structured, gradient/taylor "
                              "importance on training rows of the random-head model)")
    if quant is not None:
        if criterion is not None and (quant.get("search") or {}).get("tried"):
            from bench.experiments.int8_rejudge import rejudge
            again = rejudge(quant["search"]["tried"], *criterion)["chosen"]
            plan["int8_rejudged"] = {"max_drop": criterion[0], "min_agreement": criterion[1],
                                     **({"latency_margin": criterion[2]} if len(criterion) > 2 else {}),
                                     "recorded": quant["search"]["chosen"], "chosen": again}
            quant = {**quant, "search": {**quant["search"], "chosen": again}}
        plan["int8"] = int8_choice(quant)
        plan["int8_from"] = os.path.join(folder, quant_dir, "record.json")
        plan["int8_preset_on_gpu"] = (quant.get("preset") or {}).get("name")
    else:
        plan["int8"] = {"method": "dynamic", "fp32_units": []}
        plan["int8_from"] = "no quantize record: dynamic INT8 (all units), bracketed by chain-int8-fp32units"
        plan["bracket"] = {"method": "mixed", "fp32_units": list(bracket_units)}
    return plan


def bracket_units(records: str, tasks=TASKS, run: str = "chain") -> List[str]:
    """The FP32 units of the recorded mixed choice that kept the most (the bracket for tasks without one)."""
    most: List[str] = []
    for task in tasks:
        folder = os.path.join(records, f"{task}-{run}")
        quant = _read(os.path.join(folder, _stage_dir(folder, "quantize"), "record.json"))
        if quant is not None:
            units = int8_choice(quant)["fp32_units"]
            if len(units) > len(most):
                most = units
    return most


def today_plan(runs: str, task: str) -> dict:
    """Today's chain for ``task``: the headline run's pruned shape, vocabulary and INT8 method."""
    folder = os.path.join(runs, TODAY_RUNS[task])
    hf = _read(os.path.join(folder, f"{task}-chain-hf-metrics.json"))
    if hf is None:
        raise SystemExit(f"no {task}-chain-hf-metrics.json in {folder}")
    chain = _read(os.path.join(folder, f"{task}-chain-metrics.json")) or {}
    quant = _read(os.path.join(folder, f"{task}-chain-int8-quantize.json")) or {}
    return {"layers": 6, "shape": {"heads": hf["pruning"]["heads_after"], "ffn": hf["pruning"]["ffn_after"]},
            "vocab_on_gpu": (chain.get("pruning") or {}).get("pieces_after"),
            "int8": {"method": quant.get("method", "dynamic"), "fp32_units": list((quant.get("config") or {})
                                                                              .get("exclude") or [])},
            "from": folder}


# -- building, each folder reused when it is complete and its plan unchanged -------------------

def _done(folder: str, final_file: str) -> bool:
    return os.path.exists(os.path.join(folder, final_file))


# what the toolkit's export and INT8 write, changed when they change (a folder built before is built
# again): static INT8 stores the word table INT8; SkipLayerNormalization is written as Add +
# LayerNormalization (the CPU's fast pair: compressor.export.onnx.split_skip_layernorm)
EXPORT_BUILD = "static-word-table-int8, skip-layernorm-split"


def build_task(task: str, base: str, work: str, data_dir: str, new: dict, today: dict, preset: str) -> dict:
    """Every graph of ``task`` under ``work/task``; returns name -> folder of what is timed."""
    from bench.experiments.prune_latency import build_pruned
    from compressor.core.data import get_task, load_data
    from compressor.core.models import checkpoint_meta, load_for_task, save_checkpoint
    from compressor.export.onnx import export_onnx
    from compressor.prune.api import prune

    folder = os.path.join(work, task)
    os.makedirs(folder, exist_ok=True)
    plan = {"base": os.path.abspath(base), "preset": preset, "new": new, "today": today, "export": EXPORT_BUILD}
    plan_file = os.path.join(folder, "plan.json")
    fresh = _read(plan_file) != plan   # a changed plan rebuilds every folder

    def d(name: str) -> str:
        return os.path.join(folder, name)
    spec = get_task(task)
    dev8 = load_data(spec, "dev", data_dir, 8)

    def step(name: str, final_file: str, make) -> str:
        if fresh or not _done(d(name), final_file):
            log(f"{task}: building {name}")
            make(d(name))
        return d(name)

    def teacher(out):
        model, tokenizer = load_for_task(base, spec)
        save_checkpoint(model.eval(), tokenizer, out, checkpoint_meta(spec, 128, MADE_BY, note=NOTE))

    def pruned(src, config, train_limit=64):
        return lambda out: prune(src, out, config, task=task, data_dir=data_dir, train_limit=train_limit,
                                 dev_limit=8, overwrite=True)

    def export(src):
        return lambda out: export_onnx(src, out, task=task, data_dir=data_dir, parity_limit=8, overwrite=True)

    step("teacher", "compressor.json", teacher)
    step("student6", "compressor.json",
         pruned(d("teacher"), {"method": "layers", "rule": "every_other", "recover": {"mode": "none"}}))
    # the accuracy-first chain: the recorded shape, or the toolkit's structured pruning here
    if new["shape"] is not None:
        step("chain-hf", "compressor.json", lambda out: build_pruned(d("student6"), new["shape"], out))
    else:
        step("chain-hf", "compressor.json",
             pruned(d("student6"), {"method": "structured", "heads": 0.5, "ffn": 0.5, "iterations": 1,
                                    "importance_rows": 64, "recover": {"mode": "none"}}))
    step("chain-onnx", "manifest.json", export(d("chain-hf")))
    # today's chain: its shape, then its vocabulary pruned to the task's training text
    step("today-hf", "compressor.json", lambda out: build_pruned(d("student6"), today["shape"], out))
    step("today-vocab", "compressor.json",
         pruned(d("today-hf"), {"method": "vocab", "recover": {"mode": "none"}}, train_limit=None))
    pieces = _read(os.path.join(d("today-vocab"), "metrics.json"))["pruning"]["pieces_after"]
    if today["vocab_on_gpu"] is not None and pieces != today["vocab_on_gpu"]:
        raise SystemExit(f"{task}: vocabulary here {pieces} pieces, on the GPU machine {today['vocab_on_gpu']}")
    step("today-onnx", "manifest.json", export(d("today-vocab")))

    timed = {"today-chain-int8": step("today-int8", "quantize.json",
                                      int8_maker(d("today-onnx"), today["int8"], task, data_dir, preset, dev8))}
    timed["chain-int8"] = (d("chain-onnx") if new["int8"]["method"] == "fp32" else
                           step("chain-int8", "quantize.json",
                                int8_maker(d("chain-onnx"), new["int8"], task, data_dir, preset, dev8)))
    if new.get("bracket"):
        timed["chain-int8-fp32units"] = step("chain-int8-fp32units", "quantize.json",
                                             int8_maker(d("chain-onnx"), new["bracket"], task, data_dir,
                                                        preset, dev8))
    if fresh:
        with open(plan_file + ".tmp", "w") as f:
            json.dump(plan, f, indent=1)
        os.replace(plan_file + ".tmp", plan_file)
    return {"teacher": d("teacher"), **timed}


def int8_maker(onnx_folder: str, choice: dict, task: str, data_dir: str, preset: str, dev_set):
    """The quantize call making ``choice`` of ``onnx_folder``: a mixed graph is dynamic INT8 with the
    nodes of its FP32 units (found by unit name in this graph) excluded, as the search writes it."""
    from compressor.export import int8 as ox
    from compressor.quantize.api import quantize
    from compressor.quantize.configs import OrtDynamicConfig, OrtStaticConfig

    def make(out):
        method = choice["method"]
        if method == "static":
            config = OrtStaticConfig(preset=preset)
        elif method == "dynamic_per_tensor":
            config = OrtDynamicConfig(preset=preset, per_channel=False)
        elif method in ("dynamic", "mixed"):
            units = unit_nodes(ox.onnx_file(onnx_folder))
            missing = [u for u in choice["fp32_units"] if _plain(u) not in units]
            if missing:
                raise SystemExit(f"{onnx_folder}: no units {missing} in this graph (it has {list(units)})")
            config = OrtDynamicConfig(preset=preset,
                                      exclude=[n for u in choice["fp32_units"] for n in units[_plain(u)]])
        else:
            raise SystemExit(f"no INT8 maker for {method!r}")
        quantize(onnx_folder, out, config, task=task, data_dir=data_dir, dev_set=dev_set, overwrite=True)
    return make


# -- timing and the summary -----------------------------------------------------------------

def time_task(task: str, folders: Dict[str, str], data_dir: str, threads: List[int], sentences: int,
              preset: str, out: str, work: str, command: str, plans: dict) -> dict:
    from compressor.bench.harness import BenchConfig
    from compressor.bench.suite import run_benchmark

    config = BenchConfig(sentences=sentences, threads=threads, batch_sizes=[], score=False, memory=False)
    models = [f"{name}={path}" for name, path in folders.items() if name != "teacher"]
    run_benchmark(models, teacher=folders["teacher"], peers=(), task=task, data_dir=data_dir, config=config,
                  device="cpu", work_dir=os.path.join(work, task, "peers"), out=out, preset=preset,
                  command=command)
    with open(out) as f:
        record = json.load(f)
    record["shapes"] = {"task": task, "note": NOTE, **plans}
    with open(out + ".tmp", "w") as f:
        json.dump(record, f, indent=1)
    os.replace(out + ".tmp", out)
    return record


BUILT = ("teacher", "today-chain-int8", "chain-int8", "chain-int8-fp32units")


def summarize(records: Dict[str, dict]) -> dict:
    """Per task and thread count: each variant's batch-1 p50 and the ratios the targets name
    (chain / today's chain: issue 32 wants at most 1.10; teacher / chain: issue 33 wants at least 15),
    and their geometric means over the tasks."""
    rows = []
    for task, record in records.items():
        p50 = {}
        for r in record["rows"]:
            if r["batch_size"] == 1 and r.get("latency_ms"):
                p50.setdefault(r["threads"], {})[r["name"]] = r["latency_ms"]["p50"]
        for threads, by in sorted(p50.items()):
            row = {"task": task, "threads": threads, "p50_ms": by}
            if "chain-int8" in by and "today-chain-int8" in by:
                row["chain_over_today"] = round(by["chain-int8"] / by["today-chain-int8"], 3)
                row["meets_issue32_latency"] = row["chain_over_today"] <= 1.10
            if "teacher" in by:
                for name in ("chain-int8", "today-chain-int8", "chain-int8-fp32units"):
                    if name in by:
                        row[f"teacher_over_{name}"] = round(by["teacher"] / by[name], 2)
                if "teacher_over_chain-int8" in row:
                    row["meets_issue33_15x"] = row["teacher_over_chain-int8"] >= 15
            if "chain-int8-fp32units" in by and "today-chain-int8" in by:
                row["chain_fp32units_over_today"] = round(by["chain-int8-fp32units"] / by["today-chain-int8"], 3)
            for name in by:   # graphs given with --add: over today's chain, and the teacher over them
                if name not in BUILT and "today-chain-int8" in by:
                    row.setdefault("added", {})[name] = {
                        "over_today": round(by[name] / by["today-chain-int8"], 3),
                        "teacher_over": round(by["teacher"] / by[name], 2) if "teacher" in by else None}
            rows.append(row)
    means = {}
    for threads in sorted({r["threads"] for r in rows}):
        for key in ("chain_over_today", "teacher_over_chain-int8", "teacher_over_today-chain-int8"):
            values = [r[key] for r in rows if r["threads"] == threads and key in r]
            if values:
                means.setdefault(threads, {})[key] = round(math.exp(sum(map(math.log, values)) / len(values)), 3)
                means[threads][f"{key}_tasks"] = len(values)
    return {"note": NOTE, "rows": rows, "geometric_mean": means}


def markdown(summary: dict) -> str:
    lines = ["Batch-1 p50 (ms) on this CPU; " + summary["note"] + ".", "",
             ("| task | threads | teacher PyTorch FP32 | today's chain INT8 | chain INT8 | chain / today (≤1.10) "
              "| teacher / chain (≥15) | teacher / today | bracket: chain with FP32 units |"),
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]

    def fmt(v, digits=2):
        return "-" if v is None else f"{v:.{digits}f}"
    for r in summary["rows"]:
        by = r["p50_ms"]
        lines.append(f"| {r['task']} | {r['threads']} | {fmt(by.get('teacher'))} | {fmt(by.get('today-chain-int8'))} "
                     f"| {fmt(by.get('chain-int8'))} | {fmt(r.get('chain_over_today'), 3)} "
                     f"| {fmt(r.get('teacher_over_chain-int8'), 1)} | {fmt(r.get('teacher_over_today-chain-int8'), 1)} "
                     f"| {fmt(by.get('chain-int8-fp32units'))} |")
    for threads, m in summary["geometric_mean"].items():
        lines.append(f"| geometric mean | {threads} | | | | {fmt(m.get('chain_over_today'), 3)} "
                     f"| {fmt(m.get('teacher_over_chain-int8'), 1)} | {fmt(m.get('teacher_over_today-chain-int8'), 1)} | |")
    added = [(r, name, a) for r in summary["rows"] for name, a in (r.get("added") or {}).items()]
    if added:
        lines += ["", "Graphs given with `--add` (trained weights), timed in the same runs:", "",
                  "| task | threads | graph | p50 ms | / today's chain (≤1.10) | teacher / it (≥15) |",
                  "|---|---:|---|---:|---:|---:|"]
        for r, name, a in added:
            lines.append(f"| {r['task']} | {r['threads']} | {name} | {fmt(r['p50_ms'][name])} "
                         f"| {fmt(a['over_today'], 3)} | {fmt(a['teacher_over'], 1)} |")
    return "\n".join(lines) + "\n"


def _pair(text: Optional[str], flag: str, want: str, least: float, sizes=(2,)) -> Optional[tuple]:
    """``A,B`` (or as many numbers as ``sizes`` allows) of at least ``least``; None when the flag
    was not given."""
    if not text:
        return None
    try:
        pair = tuple(float(v) for v in text.split(","))
    except ValueError:
        pair = ()
    if len(pair) not in sizes or min(pair) < least:
        raise SystemExit(f"{flag} {text!r}: give {want}")
    return pair


def main(argv=None) -> dict:
    from compressor.core.io import write_text

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", default=os.environ.get("MPNET_BASE"),
                    help="MPNet-base folder (fp32; ../shared/tools/get-mpnet-teacher.sh)")
    ap.add_argument("--tasks", default=",".join(TASKS))
    ap.add_argument("--records", default="bench/results/accuracy-glue5-h200x2",
                    help="the accuracy-first chain's GPU run ({task}-chain/0N-*/record.json)")
    ap.add_argument("--today-runs", default="bench/results/mpnet-glue5",
                    help="the headline runs (pipeline7/, pipeline5/) today's chain shapes come from")
    ap.add_argument("--data-dir", default=os.environ.get("GLUE_DIR"))
    ap.add_argument("--work", default="runs/chain-latency-same-shape")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--sentences", type=int, default=100)
    ap.add_argument("--preset", default="auto", help="INT8 preset of every graph (auto: this CPU's)")
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--run-name", default="chain",
                    help="the chain's run folder in --records: {task}-RUN (e.g. task2-b256)")
    ap.add_argument("--add", action="append", default=[], metavar="TASK:NAME=FOLDER",
                    help="also time this graph folder (trained weights) in TASK's run, as NAME; repeatable")
    ap.add_argument("--rejudge", metavar="MAX_DROP,MIN_AGREEMENT[,LATENCY_MARGIN]",
                    help="time the INT8 choice the records' verdicts give under this criterion "
                         "(bench.experiments.int8_rejudge), not the one they made")
    ap.add_argument("--widen", metavar="HEADS,FFN",
                    help="multiply each layer's recorded kept heads and FFN neurons by these factors (a "
                         "lighter pruning's latency, e.g. 1,1.2: 40%% of the FFN removed where the run removed half)")
    ap.add_argument("--build-only", action="store_true", help="build every graph, time nothing")
    args = ap.parse_args(argv)
    if not args.base or not os.path.isdir(args.base):
        raise SystemExit("--base (or MPNET_BASE): the MPNet-base folder is needed")
    if not args.data_dir:
        raise SystemExit("--data-dir or GLUE_DIR is needed")
    tasks = [t for t in args.tasks.split(",") if t]
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        raise SystemExit(f"unknown tasks {unknown}; known: {', '.join(TASKS)}")
    threads = [int(t) for t in args.threads.split(",")]
    added: Dict[str, Dict[str, str]] = {}
    for spec in args.add:
        task_name, _, folder = spec.partition("=")
        task, _, name = task_name.partition(":")
        if not (task and name and folder) or task not in tasks:
            raise SystemExit(f"--add {spec!r}: give TASK:NAME=FOLDER with TASK one of {', '.join(tasks)}")
        if name in BUILT or not os.path.isdir(folder):
            raise SystemExit(f"--add {spec!r}: NAME must not be one of {', '.join(BUILT)}, FOLDER a folder")
        added.setdefault(task, {})[name] = folder
    command = "python -m bench.experiments.chain_latency_same_shape " + " ".join(
        a if not os.path.isabs(a) or a.startswith("/tmp/") else "PATH" for a in (argv or sys.argv[1:]))
    criterion = _pair(args.rejudge, "--rejudge", "MAX_DROP,MIN_AGREEMENT[,LATENCY_MARGIN], e.g. 0.3,0.98,0.1",
                      0, sizes=(2, 3))
    widen = _pair(args.widen, "--widen", "HEADS,FFN factors above 0, e.g. 1,1.2", 1e-9)
    bracket = bracket_units(args.records, run=args.run_name)
    plans = {t: {"chain": new_chain_plan(args.records, t, bracket, args.run_name, criterion, widen),
                 "today_chain": today_plan(args.today_runs, t)} for t in tasks}
    for t, graphs in added.items():
        plans[t]["added"] = {name: "a given folder (trained weights)" for name in graphs}
    started = time.monotonic()
    folders = {t: build_task(t, args.base, args.work, args.data_dir, plans[t]["chain"], plans[t]["today_chain"],
                             args.preset) for t in tasks}
    log(f"built in {time.monotonic() - started:.0f} s")
    if args.build_only:
        return {"folders": folders}
    os.makedirs(args.out_dir, exist_ok=True)
    records = {}
    for t in tasks:
        log(f"{t}: timing {', '.join(folders[t])}")
        records[t] = time_task(t, {**folders[t], **added.get(t, {})}, args.data_dir, threads, args.sentences, args.preset,
                               os.path.join(args.out_dir, f"latency-{t}-cpu.json"), args.work, command, plans[t])
    summary = summarize(records)
    summary.update(command=command, tasks=tasks, threads=threads, sentences=args.sentences,
                   wall_s=round(time.monotonic() - started, 1))
    write_text(os.path.join(args.out_dir, "summary.json"), json.dumps(summary, indent=1))
    write_text(os.path.join(args.out_dir, "summary.md"), markdown(summary))
    print(markdown(summary))
    log(f"done in {time.monotonic() - started:.0f} s: {args.out_dir}")
    return summary


if __name__ == "__main__":
    main()
