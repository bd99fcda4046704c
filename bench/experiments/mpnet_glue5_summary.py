"""The headline's accuracy so far (issue 14), from the GPU runs' metrics under
``bench/results/mpnet-glue5/``: per task, each teacher run and each model made from it, its
dev score and retention (against the teacher of the same run), and the GLUE-5 score where
all five tasks are there. Writes ``summary.json`` (compressor.core.results) and ``summary.md``.

    python -m bench.experiments.mpnet_glue5_summary bench/results/mpnet-glue5

``students/`` is ``PHASE=students`` of ``mpnet_glue5_chain_gpu.sh`` (teachers, kd and pkd
students); ``pipeline/`` is ``PHASE=pipeline`` (teachers again, kd students, Theseus, the
chain, INT8), cut off by the call's time limit before STS-B's, MRPC's and CoLA's chains and
SST-2 (not run there) finished. The SST-2 kd student of 2 epochs is the earlier session's
(``bench/results/mpnet-glue5-h100/``), against its own teacher. ``pipeline3/`` is the pipeline
once more on two machines of one session, with Theseus left out: CoLA, MRPC and RTE on an H100
(the machine's own transformers 5.17), SST-2 and STS-B on an H200 (the pinned stack, carried as
wheels), each task's chain against the teacher of its own run: the first GLUE-5 of the chain.
``pipeline4/`` is the pipeline again on two H200 machines of one later session, all on the pinned
stack: RTE, MRPC and CoLA on the first (beside the server-CPU bench of RTE), SST-2 on the
second; the second's MRPC, a repeat of the same commands, is ``pipeline4/mrpc-repeat/`` (the
spread of one rerun). ``pipeline4`` has no STS-B; the headline report takes STS-B from
``pipeline3`` (the same stack on an H200). ``pipeline5/`` is MRPC, STS-B and CoLA once more on an
H200 (the same commands; beside the server-CPU benches of MRPC and CoLA): their teachers score
exactly what pipeline4's (MRPC, CoLA) and pipeline3's (STS-B) scored, so seeded fine-tuning on the
same GPU kind repeats itself; the students and chains move by up to half a point.
``pipeline6/`` is SST-2 on an H100 (the first SST-2 chain with its INT8 score, beside SST-2's
server-CPU bench); ``pipeline6/stsb-h100-cut/`` is an STS-B run on that machine cut off before
its chain's INT8 (another machine's rerun). ``pipeline7/`` is the pipeline on all tasks but
CoLA, on two H200 machines of one session (MRPC and STS-B on the first, SST-2 and RTE on the
second), each beside the server-CPU bench of its tasks: one kind of server host for the
benches of all five tasks (CoLA's from pipeline5's machine). The MRPC and RTE teachers score
again what pipeline5's and pipeline4's scored; STS-B's and SST-2's moved (88.79 against
88.73; 93.81, as the seeds' sixth session's SST-2 teacher, against pipeline4's 93.69).
``seeds/`` is ``PHASE=seeds``: every seed system's committed recipe (``recipes/mpnet/``) run by
``compressor run`` on each task's teacher fine-tuned on that machine (an H200 in each of four
device sessions; the fourth added SST-2; cut off by the device time, so some recipes ran on
some tasks only); each run's manifest gives the teacher's (of its own session) and the final
model's dev scores. A seed recipe run on all five tasks gets a GLUE-5 figure (``seeds_RECIPE``)
against the mean of its own runs' teachers.
Dev is scored once per run, at the end; nothing is chosen on dev.
"""
from __future__ import annotations

import json
import os
import sys

TASKS = ("sst2", "mrpc", "stsb", "rte", "cola")
MODELS = (  # (suffix, label)
    ("6L-kd", "6-layer student, soft targets (T=2)"),
    ("6L-pkd", "6-layer student, soft targets + hidden states (PKD)"),
    ("theseus", "BERT-of-Theseus 12 -> 6 (constant rate 0.5)"),
    ("chain-hf", "chain: 6-layer kd student, half of heads and FFN pruned, kd recovery"),
    ("chain", "chain + vocabulary pruned"),
)
RUNS = (  # (label, folder under the results root, the models each task may have)
    ("students", "students", MODELS),
    ("pipeline", "pipeline", MODELS),
    ("pipeline3", "pipeline3", MODELS),
    ("pipeline4", "pipeline4", MODELS),
    ("pipeline4 MRPC repeat", os.path.join("pipeline4", "mrpc-repeat"), MODELS),
    ("pipeline5", "pipeline5", MODELS),
    ("pipeline6", "pipeline6", MODELS),
    ("pipeline6 STS-B (H100, cut off)", os.path.join("pipeline6", "stsb-h100-cut"), MODELS),
    ("pipeline7", "pipeline7", MODELS),
    ("earlier session", os.path.join("..", "mpnet-glue5-h100"), (("6L", MODELS[0][1] + ", 2-5 epochs"),)),
)


SEED_LABELS = {  # recipes/mpnet/NAME.yaml -> what it reproduces
    "distilbert-6l": "DistilBERT-style 6-layer (soft targets, task loss, hidden cosine)",
    "pkd-6l": "BERT-PKD 6-layer (first six layers, [CLS] hidden states)",
    "tinybert-4l": "TinyBERT-shaped 4-layer",
    "minilm-6l": "MiniLM-style 6-layer, 384 wide (Q-K, V-V relations)",
    "pd-minilm-l6": "PD: the pre-trained MiniLM-L6 student, soft targets",
    "theseus-6l": "BERT-of-Theseus 12 -> 6 (recipe: 2 + 1 epochs)",
    "albert-share": "ALBERT-style sharing (layer pairs, embedding rank 128), kd recovery",
    "mobilebert-progressive": "MobileBERT-style progressive transfer, 12 layers 384 wide",
    "q8bert-dynamic": "Q8BERT-style dynamic INT8 (fused ONNX)",
    "q8bert-qat": "Q8BERT-style quantisation-aware training, INT8",
    "qbert-mixed": "Q-BERT-style mixed precision (per-layer INT8/FP32)",
    "qbert-mixed-holdout": "Q-BERT-style mixed precision (per-layer INT8/FP32), teacher fine-tuned with rows held out",
    "early-exit": "early exit (entropy; patience on STS-B), INT8 segments",
    "early-exit-holdout": "early exit calibrated on rows the teacher held out, INT8 segments with layers 6-7 FP32",
}
SCHEDULES = {  # what a run's distill phases say, for the randomly built students it matters to
    ("tinybert-4l", False): ", task stage only (no general distillation)",
    ("minilm-6l", False): ", task stage only",
    ("tinybert-4l", True): ", general distillation first",
    ("minilm-6l", True): ", general distillation first",
}


def _stage_records(run_folder: str, manifest: dict):
    """Each stage's ``record.json`` after the teacher's ({} where there is none)."""
    for stage in manifest["stages"][1:]:
        yield _load(os.path.join(run_folder, stage.get("dir", ""), "record.json")) or {}


def _search_note(run_folder: str, manifest: dict) -> str:
    """Where a mixed-precision search chose (its stage record's ``search``): on dev, the score is a
    best-of-dev; on drawn training rows, dev was scored once, on the model chosen."""
    for record in _stage_records(run_folder, manifest):
        search = record.get("search")
        if search:
            if search.get("search_on", "dev") == "dev":
                return ", FP32 layers chosen on dev (best-of-dev)"
            if search["search_on"] == "holdout":
                # the count differs per task (about a tenth of its rows): not in the label, which the
                # GLUE-5 row and the report merge tasks by; the teacher's record has it
                return ", FP32 layers chosen on the training rows the teacher held out"
            return f", FP32 layers chosen on {search.get('search_rows')} training rows"
    return ""


def _had_general_stage(run_folder: str, manifest: dict) -> bool:
    """Whether a stage of the run trained a general-distillation phase (its record's phases)."""
    return any(p.get("phase") == "general" for record in _stage_records(run_folder, manifest)
               for p in record.get("phases") or [])


def collect_seeds(root: str) -> list:
    """``seeds/RECIPE-TASK/manifest.json``: the run's teacher (stage 0) and its last stage."""
    folder = os.path.join(root, "seeds")
    entries, teachers = [], {}
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        manifest = _load(os.path.join(folder, name, "manifest.json"))
        if manifest is None or not manifest.get("stages"):
            continue
        task = manifest["task"]
        recipe = name[: -len(task) - 1] if name.endswith("-" + task) else name
        first, last = manifest["stages"][0], manifest["stages"][-1]
        t = round(first["score"], 2)
        # a teacher fine-tuned with rows held out (the GPU script's TASK-holdout folder) learned from
        # fewer rows: its own row, not one more score of the task's teacher
        kind = "teacher-holdout" if _held_out_teacher(first) else "teacher"
        if (task, kind) not in teachers:
            teachers[task, kind] = {"run": "seeds", "task": task, "model": kind, "label": TEACHER_LABELS[kind],
                                    "score": t, "teacher": t, "parameters": first.get("parameters"), "scores": []}
            entries.append(teachers[task, kind])
        if t not in teachers[task, kind]["scores"]:
            teachers[task, kind]["scores"].append(t)
        schedule = SCHEDULES.get((recipe, _had_general_stage(os.path.join(folder, name), manifest)), "")
        schedule += _search_note(os.path.join(folder, name), manifest)
        entries.append({"run": "seeds", "task": task, "model": recipe, "note": schedule,
                        "label": SEED_LABELS.get(recipe, recipe) + schedule + f" (`recipes/mpnet/{recipe}.yaml`)",
                        "score": round(last["score"], 2), "teacher": t,
                        "retention": round(last["score"] / first["score"], 6),
                        "parameters": last.get("parameters"), "size_bytes": last.get("size_bytes")})
    # each device session fine-tunes its own teachers: one label (the report merges tasks' rows by
    # label) names every task's scores where they differ
    from compressor.core.data import get_task

    for kind in TEACHER_LABELS:
        spread = [f"{get_task(task).folder} " + "/".join(f"{x:.2f}" for x in sorted(row["scores"]))
                  for (task, k), row in teachers.items() if k == kind and len(row["scores"]) > 1]
        for (task, k), row in teachers.items():
            if k == kind and spread:
                row["label"] += (" (fine-tuned again in each device session, same seed: " + ", ".join(spread)
                                 + "; each run is scored against its own)")
    for row in teachers.values():
        row.pop("scores")
    order = {task: i for i, task in enumerate(TASKS)}
    return sorted(entries, key=lambda e: (e["model"] not in TEACHER_LABELS, order[e["task"]]))


TEACHER_LABELS = {"teacher": "MPNet-base teacher",
                  "teacher-holdout": "MPNet-base teacher fine-tuned with about a tenth of its training rows held out "
                                     "(`compressor finetune --holdout N`; 2,000 on SST-2)"}


def _held_out_teacher(stage: dict) -> bool:
    """Whether a run's teacher stage is a teacher fine-tuned with rows held out: the GLUE-5 GPU script
    names that folder TASK-holdout (mpnet_glue5_chain_gpu.sh's teacher ... holdout)."""
    return os.path.basename(str(stage.get("model_dir") or "").rstrip("/")).endswith("-holdout")


def _glue5_label(rows: list) -> str:
    """One recipe's label over its five tasks: the label most of them share, then the tasks whose
    run differed (a search made on dev in an earlier session, say), each with its own note."""
    from collections import Counter

    from compressor.core.data import get_task

    common = Counter(e["label"] for e in rows).most_common(1)[0][0]
    odd = [f"{get_task(e['task']).folder}: {e['note'].lstrip(', ') or 'without that'}"
           for e in rows if e["label"] != common]
    if not odd:
        return common
    head, recipe = common.rsplit(" (`", 1)   # the recipe's path ends every seed label
    return f"{head} ({'; '.join(odd)}) (`{recipe}"


def _load(path):
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def collect(root: str) -> list:
    entries = []
    for where, run, models in RUNS:
        folder = os.path.join(root, run)
        for task in TASKS:
            teacher = _load(os.path.join(folder, f"{task}-metrics.json"))
            if teacher is None:
                continue
            t = round(teacher["score"], 2)
            entries.append({"run": where, "task": task, "model": "teacher", "label": "MPNet-base teacher",
                            "score": t, "teacher": t, "parameters": teacher.get("parameters")})
            for suffix, label in models:
                m = _load(os.path.join(folder, f"{task}-{suffix}-metrics.json"))
                if m is not None:
                    entries.append({"run": where, "task": task, "model": suffix, "label": label,
                                    "score": round(m["score"], 2), "teacher": t,
                                    "retention": round(m["score"] / teacher["score"], 6),
                                    "parameters": m.get("parameters")})
            for model, what in (("teacher-int8", "teacher"), ("chain-int8", "chain")):
                q = _load(os.path.join(folder, f"{task}-{model}-quantize.json".replace("teacher-", "")))
                if q is not None:
                    entries.append({"run": where, "task": task, "model": model,
                                    "label": f"{what}, fused ONNX dynamic INT8 (avx512_vnni), scored on the "
                                             "GPU machine's CPU", "score": round(q["score"], 2), "teacher": t,
                                    "retention": round(q["score"] / teacher["score"], 6),
                                    "parameters": q.get("parameters")})
    return entries


def glue5(entries, run, model) -> dict:
    got = {e["task"]: e for e in entries if e["run"] == run and e["model"] == model}
    if set(got) != set(TASKS):
        return {"tasks": sorted(got)}
    score = sum(e["score"] for e in got.values()) / 5
    teacher = sum(e["teacher"] for e in got.values()) / 5
    out = {"tasks": list(TASKS), "glue5": round(score, 2), "teacher_glue5": round(teacher, 2),
           "retention": round(score / teacher, 6)}
    if all(e.get("size_bytes") for e in got.values()):   # what a mixed search kept FP32 shows here
        out["mean_size_mb"] = round(sum(e["size_bytes"] for e in got.values()) / 5 / 1e6, 1)
    return out


def main(root: str) -> dict:
    from compressor.core.results import row, write_results

    entries = collect(root) + collect_seeds(root)
    rows = [row(f"{e['run']}/{e['task']}/{e['model']}", e["task"], "score", e["score"], e["teacher"],
                parameters=e.get("parameters"), extra={"label": e["label"], "run": e["run"],
                                                      "selection": "none (last weights, one dev evaluation)"})
            for e in entries]
    # the best of what exists per task for a 6-layer kd student: this session's 6-epoch
    # students on the small tasks, the earlier session's 2-epoch SST-2 student
    mixed = [e for e in entries if e["model"] in ("6L-kd", "6L") and
             ((e["run"] == "students" and e["task"] != "sst2") or (e["run"] == "earlier session" and e["task"] == "sst2"))]
    kd5 = {"glue5": round(sum(e["score"] for e in mixed) / 5, 2),
           "teacher_glue5": round(sum(e["teacher"] for e in mixed) / 5, 2)} if len(mixed) == 5 else {}
    if kd5:
        kd5["retention"] = round(kd5["glue5"] / kd5["teacher_glue5"], 6)
        kd5["note"] = "retention per task against its own run's teacher; SST-2 from the earlier session"
    summary = {"teachers_students_run": glue5(entries, "students", "teacher"),
               "kd_6L_students": kd5, "pkd_6L_students_run": glue5(entries, "students", "6L-pkd"),
               **{f"{run}_{m}": glue5(entries, run, m) for run in ("pipeline3", "pipeline4")
                  for m in ("teacher", "6L-kd", "chain-hf", "chain", "chain-int8", "teacher-int8")}}
    recipes = sorted({e["model"] for e in entries if e["run"] == "seeds" and e["model"] not in TEACHER_LABELS})
    seeds5 = {r: glue5(entries, "seeds", r) for r in recipes}
    for r, g in seeds5.items():   # the GLUE-5 row's label (the report's too): tasks whose run differed named
        if "glue5" in g:
            g["label"] = _glue5_label([e for e in entries if e["run"] == "seeds" and e["model"] == r])
    summary.update({f"seeds_{r}": g for r, g in seeds5.items()})
    out = os.path.join(root, "summary.json")
    write_results(out, rows, command="python -m bench.experiments.mpnet_glue5_summary bench/results/mpnet-glue5",
                  fingerprint_info={"machine": "one NVIDIA H100 or H200 (device tool; each run's README line says which), bf16 autocast"},
                  what="MPNet-base GLUE-5: teachers, 6-layer students, Theseus and the chain (accuracy)",
                  glue5=summary)
    lines = ["| task | run | model | dev score | teacher | retention | parameters |", "|---|---|---|---:|---:|---:|---:|"]
    for e in entries:
        ret = f"{100 * e['retention']:.1f}%" if "retention" in e else ""
        params = f"{e['parameters'] / 1e6:.1f}M" if e.get("parameters") else ""
        lines.append(f"| {e['task']} | {e['run']} | {e['label']} | {e['score']:.2f} | {e['teacher']:.2f} | {ret} | {params} |")
    done5 = sorted(((r, g) for r, g in seeds5.items() if "glue5" in g), key=lambda x: -x[1]["retention"])
    if done5:
        lines += ["", "GLUE-5 of the seed recipes run on all five tasks (each task against its own run's teacher):", "",
                  "| recipe | GLUE-5 | teachers' GLUE-5 | retention | size (MB, mean of the five) |",
                  "|---|---:|---:|---:|---:|"]
        lines += [f"| {g['label']} | {g['glue5']:.2f} | {g['teacher_glue5']:.2f} | {100 * g['retention']:.1f}% | "
                  + (f"{g['mean_size_mb']:.1f} |" if g.get("mean_size_mb") else "|") for r, g in done5]
    lines += ["", "GLUE-5: " + json.dumps(summary)]
    with open(os.path.join(root, "summary.md.tmp"), "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(os.path.join(root, "summary.md.tmp"), os.path.join(root, "summary.md"))
    print("\n".join(lines))
    return summary


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bench/results/mpnet-glue5")
