"""Issue 32 item 6: the ablation of the accuracy-first chain (recipes/mpnet/chain-augmented.yaml)
on CoLA, RTE and MRPC, one teacher per task (fine-tuned with rows held out) for every variant.

Each variant is the chain's recipe with one thing changed (:data:`VARIANTS`): augmentation off,
the intermediate stage off, more intermediate epochs, fewer copies, a longer recovery after
pruning, one INT8 method instead of the held-out choice. A variant that changes a late stage
starts from the chain's finished stages (its run folder is seeded with copies of them, and the
runner skips stages whose fingerprint is unchanged), so only what differs is trained again.

    python3 -m bench.experiments.accuracy_ablation deps VARIANT [LISTED...]  # what it waits for (shell)
    python3 -m bench.experiments.accuracy_ablation summary RESULTS    # summary.json + summary.md

bench/experiments/accuracy_ablation_gpu.sh runs them; ``summary`` reads the stage records it
brought back (RESULTS/TASK-VARIANT/NN-stage/record.json, RESULTS/TASK/teacher-holdout-metrics.json).
Every figure is a dev score taken once, at the end of a stage: nothing is chosen on dev.
"""
from __future__ import annotations

import json
import os
import sys

from bench.experiments.jsonfiles import last_stage, read_or_none

BASE = "recipes/mpnet/chain-augmented.yaml"


def _stage(doc: dict, name: str) -> dict:
    for stage in doc["stages"]:
        if name in stage:
            return stage[name]
    raise KeyError(name)


def _distill_only(doc: dict) -> None:
    doc["stages"] = [s for s in doc["stages"] if next(iter(s)) in ("augment", "distill")]


def _copies(n: int):
    def edit(doc):
        _stage(doc, "augment")["copies"] = n
    return edit


def _intermediate(epochs: int):
    def edit(doc):
        _stage(doc, "distill")["intermediate_epochs"] = epochs
    return edit


def _batch(size: int, lr_scale: float):
    """The distillation's batch size, its learning rates scaled by ``lr_scale``: a step costs about
    the same at batch 64 and 256 on an H200 (bench/results/group-by-length-h200)."""
    def edit(doc):
        distill = _stage(doc, "distill")
        distill["train"]["batch_size"] = size
        distill["train"]["group_by_length"] = True   # grouped pays at batch 256, not at 64, on an H200
        distill["train"]["lr"] = float(distill["train"]["lr"]) * lr_scale
        if distill.get("intermediate_lr"):
            distill["intermediate_lr"] = float(distill["intermediate_lr"]) * lr_scale
        prune = next((s["prune"] for s in doc["stages"] if "prune" in s), None)
        if prune and prune.get("recover", {}).get("train"):   # the recovery's soft targets as well
            train = prune["recover"]["train"]
            train["batch_size"] = size
            train["group_by_length"] = True
            train["lr"] = float(train["lr"]) * lr_scale
    return edit


def _task_loss(weight: float):
    """The labels of the training rows beside the soft targets in the prediction phase (augmented
    rows have none and are left out of that loss)."""
    def edit(doc):
        _stage(doc, "distill")["losses"]["task"] = weight
    return edit


def _recover_task(weight: float):
    """The training rows' labels beside the soft targets in the prune stage's recovery too."""
    def edit(doc):
        _stage(doc, "prune")["recover"]["losses"]["task"] = weight
    return edit


def _recover_hidden(doc: dict) -> None:
    """The recovery matches the teacher's hidden states (every other layer, as the distillation
    mapped them) beside its soft targets. (From the unpruned student instead, the augmented rows'
    logits would be another teacher's.)"""
    _stage(doc, "prune")["recover"]["losses"]["hidden"] = {"weight": 1, "mapping": "uniform"}


def _recover_lr(lr: float):
    def edit(doc):
        _stage(doc, "prune")["recover"]["train"]["lr"] = lr
    return edit


def _prune_steps(steps: int):
    """Heads and FFN removed in this many equal steps, recovering after each (the epochs per step
    divided so the recovery's total stays the same)."""
    def edit(doc):
        prune = _stage(doc, "prune")
        prune["iterations"] = steps
        train = prune["recover"]["train"]
        train["epochs"] = float(train["epochs"]) / steps
    return edit


def _prune_amount(heads: float, ffn: float):
    """The share of heads and of FFN neurons the prune stage removes."""
    def edit(doc):
        prune = _stage(doc, "prune")
        prune["heads"], prune["ffn"] = heads, ffn
    return edit


def _point_estimate(doc: dict) -> None:
    """The INT8 choice on the held-out rows' measured drop alone (confidence 0), agreement floor kept:
    at 0.95, the bootstrap bound of CoLA's MCC on 850 rows was 1.1-1.8 points for every all-INT8 graph
    (6-14 label flips), so the choice kept 4-6 units FP32, at 2.6-3x static INT8's latency."""
    _stage(doc, "quantize")["confidence"] = 0


def _granularity(unit: str):
    """What the INT8 choice's mixed candidate keeps FP32: whole layers or single products."""
    def edit(doc):
        _stage(doc, "quantize")["granularity"] = unit
    return edit


def _qat(doc: dict) -> None:
    """The pruned student trained with its matrix products fake-quantised to INT8 (Q8BERT), half on
    the 12-layer teacher's soft targets and half on the training rows' labels, one epoch in FP32
    (bf16 would round the rounding), then dynamic INT8 of its graph: the all-INT8 graph (today's
    latency) that post-training INT8 could not keep within the held-out bound."""
    doc["stages"] = [s for s in doc["stages"] if next(iter(s)) != "export"]
    q = _stage(doc, "quantize")
    q.clear()
    q.update({"method": "qat", "preset": "auto", "teacher": "recipe", "distill_alpha": 0.5,
              "train": {"epochs": 1, "lr": 2.0e-5, "batch_size": 32, "precision": "fp32", "eval_every": 1000000}})


def _agreement(share: float):
    """The held-out INT8 choice's agreement floor (``min_agreement``) at ``share``."""
    def edit(doc: dict) -> None:
        _stage(doc, "quantize")["min_agreement"] = share
    return edit


def _auto_with_qat(doc: dict) -> None:
    """QAT as one more candidate of the held-out INT8 choice (trained only when no post-training
    all-INT8 graph meets the criterion; the same training as _qat)."""
    q = _stage(doc, "quantize")
    q["candidates"] = ["static", "dynamic", "qat", "mixed", "fp32"]
    q.update({"qat_teacher": "recipe", "qat_distill_alpha": 0.5,
              "qat_train": {"epochs": 1, "lr": 2.0e-5, "batch_size": 32, "precision": "fp32"}})


def _redistill(doc: dict) -> None:
    """After pruning (no recovery of its own), the pruned student goes through the distillation's
    whole schedule again: its intermediate phase (hidden states and embeddings; the attention
    scores are left out, the heads no longer match the teacher's) and its prediction phase, with the
    labels, over the training rows and the copies."""
    distill = _stage(doc, "distill")
    prune = _stage(doc, "prune")
    prune["recover"] = {"mode": "none"}
    again = {k: v for k, v in distill.items() if k != "student"}
    again["student"] = {"kind": "input"}
    again["teacher"] = "recipe"
    again["losses"] = {k: v for k, v in distill["losses"].items() if k != "attention"}
    again["train"] = dict(distill["train"])
    at = next(i for i, st in enumerate(doc["stages"]) if "prune" in st)
    doc["stages"].insert(at + 1, {"distill": again})


def _replace_rate(rate: float):
    def edit(doc):
        _stage(doc, "augment")["replace_rate"] = rate
    return edit


def _keep_form(doc: dict) -> None:
    """Candidates of the word's own form class and not its stem (docs/augmentation.md)."""
    _stage(doc, "augment")["keep_form"] = True


def _no_augment(doc: dict) -> None:
    doc["stages"] = [s for s in doc["stages"] if "augment" not in s]
    _stage(doc, "distill").pop("augment", None)


def _no_intermediate(doc: dict) -> None:
    distill = _stage(doc, "distill")
    distill.pop("intermediate_epochs", None)
    distill.pop("intermediate_lr", None)
    distill["losses"] = {"kd": 1}


def _recovery(epochs: int):
    def edit(doc):
        _stage(doc, "prune")["recover"]["train"]["epochs"] = epochs
    return edit


def _int8(method: str, granularity: str = ""):
    def edit(doc):
        q = _stage(doc, "quantize")
        keep = {"preset": q["preset"], "threads": q.get("threads", 4)}
        if method == "mixed":   # the sensitive units kept FP32 within the same bound, on the held-out rows
            keep.update({k: q[k] for k in ("max_drop", "min_agreement", "confidence", "search_on")})
            if granularity:     # "matrix": one product at a time instead of a whole layer
                keep["granularity"] = granularity
        q.clear()
        q.update({"method": method, **keep})
    return edit


# task2-b256's edits (batch 256, the labels in the distillation and the recovery), which every
# task2-* variant starts from, and the seed of those that change a stage after its student
_TASK2 = [_batch(256, 2.0), _task_loss(1.0), _recover_task(1.0)]
# (either parent: the first of them listed in the session; task2-b256q0 trains the same student)
_ON_TASK2_STUDENT = ("task2-b256|task2-b256q0", "02-distill", True)

# name -> (what it changes, edits of the chain's recipe, the variant its figure is compared with,
#          the stage kind whose dev score is the variant's figure, (parent, stage folder, seed?))
# A variant waits for the parent's stage folder (a parent "a|b": the first of them in the session);
# "seed" copies the parent's folders up to it into its own run (it trains only what comes after);
# without seed it only waits for the parent's augmented copies (the same digest: taken from the
# cache, not made again).
VARIANTS = {
    "chain": ("the chain: 20 copies, 5 + 3 epochs, heads/FFN halved, 2 recovery epochs, INT8 chosen on "
              "held-out rows", [], "", "distill", None),
    "c20-i5": ("20 copies, 5 intermediate + 3 prediction epochs (the chain's student)", [_distill_only],
               "", "distill", None),
    "c10-i5": ("10 copies, 5 + 3 epochs", [_copies(10), _distill_only], "c20-i5", "distill", None),
    "c10-i10": ("10 copies, 10 + 3 epochs", [_copies(10), _intermediate(10), _distill_only], "c10-i5",
                "distill", ("c10-i5", "01-augment", False)),
    "c20-i10": ("20 copies, 10 + 3 epochs (both levers of the one-H200 run together)",
                [_intermediate(10), _distill_only], "c20-i5", "distill", None),
    "chain-i10": ("the chain with 10 + 3 epochs of distillation (20 copies)", [_intermediate(10)], "chain",
                  "distill", None),
    "chain-i10-b256": ("the chain with 10 + 3 epochs of distillation at batch 256, grouped by length (learning rates x2; the recovery at batch 256 too)",
                       [_intermediate(10), _batch(256, 2.0)], "chain-i10", "distill", None),
    "chain-i15-b256": ("the chain with 15 + 3 epochs of distillation at batch 256, grouped by length (learning rates x2; "
                       "the recovery at batch 256 too)", [_intermediate(15), _batch(256, 2.0)], "chain-i10-b256", "distill", None),
    "i10-b256-lr1": ("the chain with 10 + 3 epochs at batch 256, grouped, learning rates as at batch 64 "
                     "(is the doubled rate what cancels the extra epochs?)", [_intermediate(10), _batch(256, 1.0)],
                     "chain-i10-b256", "distill", None),
    "i10-b256-task": ("chain-i10-b256 with the training rows' labels beside the soft targets (task loss 1)",
                      [_intermediate(10), _batch(256, 2.0), _task_loss(1.0)], "chain-i10-b256", "distill", None),
    "c40-i10-b256": ("chain-i10-b256 with 40 augmented copies instead of 20",
                     [_copies(40), _intermediate(10), _batch(256, 2.0)], "chain-i10-b256", "distill", None),
    "r01-i10-b256": ("chain-i10-b256 with a word replaced with probability 0.1 instead of 0.4 (CoLA's copies "
                     "stay nearer grammatical: most embedding neighbours are inflections of the word)",
                     [_replace_rate(0.1), _intermediate(10), _batch(256, 2.0)], "chain-i10-b256", "distill", None),
    "form-i10-b256": ("chain-i10-b256 with keep_form: a candidate has the word's form and not its stem (CoLA's "
                      "copies keep agreement: run loses runs, running, ran)",
                      [_keep_form, _intermediate(10), _batch(256, 2.0)], "chain-i10-b256", "distill", None),
    "b256": ("the chain at batch 256, grouped by length, learning rates x2 (distillation and recovery)",
             [_batch(256, 2.0)], "chain", "distill", None),
    "task2-b256": ("b256 with the training rows' labels beside the soft targets in the distillation's prediction "
                   "phase and in the prune stage's recovery (task loss 1 in both)",
                   _TASK2, "b256", "distill", None),
    # the prune stage's recovery on task2-b256's student (CoLA lost 6.2 MCC to pruning there)
    "task2-b256q0": ("task2-b256 with its INT8 chosen as task2-q0's (on the held-out rows' measured drop): one "
                     "run instead of task2-b256 and task2-q0 where the GPU machine's CPU is small",
                     [*_TASK2, _point_estimate], "task2-q0|task2-b256", "quantize", None),
    "task2-rlr": ("task2-b256's student pruned with its recovery's learning rate at 5e-5 (not doubled at batch 256)",
                  [*_TASK2, _recover_lr(5e-5)], "task2-b256", "prune", _ON_TASK2_STUDENT),
    "task2-rhid": ("task2-b256's student pruned, its recovery matching the teacher's hidden states (every other "
                   "layer) beside the soft targets and labels",
                   [*_TASK2, _recover_hidden], "task2-b256", "prune", _ON_TASK2_STUDENT),
    "task2-r4": ("task2-b256's student pruned, 4 recovery epochs instead of 2",
                 [*_TASK2, _recovery(4)], "task2-b256", "prune", _ON_TASK2_STUDENT),
    "task2-iter2": ("task2-b256's student pruned in 2 steps (a quarter, then the next quarter), recovering after each",
                    [*_TASK2, _prune_steps(2)], "task2-b256", "prune", _ON_TASK2_STUDENT),
    "task2-h25": ("task2-b256's student with a quarter of its heads pruned (not half), half its FFN neurons",
                  [*_TASK2, _prune_amount(0.25, 0.5)], "task2-b256", "prune", _ON_TASK2_STUDENT),
    "task2-f25": ("task2-b256's student with half its heads pruned, a quarter of its FFN neurons (not half)",
                  [*_TASK2, _prune_amount(0.5, 0.25)], "task2-b256", "prune", _ON_TASK2_STUDENT),
    "q0": ("the recipe as it is, INT8 chosen on the held-out rows' measured drop (confidence 0); also the "
           "token-pruning recipe's variant (TOKENS_RECIPE_VARIANT=q0)", [_point_estimate], "chain", "quantize", None),
    "task2-q0": ("task2-b256's FP32 graph, INT8 chosen on the held-out rows' measured drop (confidence 0; "
                 "agreement >= 0.99 kept)", [*_TASK2, _point_estimate], "task2-b256", "quantize",
                 ("task2-b256", "04-export", True)),
    "task2-iter2q0": ("task2-iter2 (pruning in two steps) with the INT8 choice of task2-q0",
                      [*_TASK2, _prune_steps(2), _point_estimate],
                      "task2-b256|task2-b256q0", "prune", _ON_TASK2_STUDENT),
    "task2-iter4q0": ("task2-iter2q0 in 4 steps (an eighth of the heads and FFN neurons each, half an epoch of "
                      "recovery after each: the same total): does a gentler path keep more than two steps?",
                      [*_TASK2, _prune_steps(4), _point_estimate],
                      "task2-iter2q0", "prune", _ON_TASK2_STUDENT),
    "task2-iter2q0m": ("task2-iter2q0's FP32 graph, its INT8 choice's mixed candidate keeping single products FP32 "
                       "instead of whole layers (the layer choice kept 1-2 units FP32 on CoLA, MRPC and RTE: "
                       "1.2-1.5x today's chain's latency)",
                       [*_TASK2, _prune_steps(2), _point_estimate, _granularity("matrix")],
                       "task2-iter2q0", "quantize", ("task2-iter2q0", "04-export", True)),
    "task2-iter2q0qat": ("task2-iter2q0's FP32 graph, its held-out INT8 choice with QAT as a candidate (trained "
                         "where static and dynamic INT8 fail the criterion; kept if it meets it, faster than mixed)",
                         [*_TASK2, _prune_steps(2), _point_estimate, _auto_with_qat], "task2-iter2q0", "quantize",
                         ("task2-iter2q0", "04-export", True)),
    "task2-iter2s": ("task2-iter2q0's FP32 graph, static INT8 whatever the held-out rows say (what all-INT8, "
                     "today's chain's latency, costs on dev)",
                     [*_TASK2, _prune_steps(2), _int8("static")], "task2-iter2q0", "quantize",
                     ("task2-iter2q0", "04-export", True)),
    "task2-iter2a98": ("task2-iter2q0's FP32 graph, its held-out INT8 choice with agreement >= 0.98 (0.99 refused "
                       "CoLA's static graph, 10 of its 11 flips to the right label, and RTE's at an equal score)",
                       [*_TASK2, _prune_steps(2), _point_estimate, _agreement(0.98)], "task2-iter2q0", "quantize",
                       ("task2-iter2q0", "04-export", True)),
    "task2-iter2a98r": ("task2-iter2a98 with the mixed candidate refined: whole layers, then single products inside "
                        "the layers kept FP32 (RTE's product-level mixed graph in the fourth run: 1.07x today's chain "
                        "where the layer choice's was 1.20-1.28x)",
                        [*_TASK2, _prune_steps(2), _point_estimate, _agreement(0.98), _granularity("refine")],
                        "task2-iter2q0", "quantize", ("task2-iter2q0", "04-export", True)),
    "task2-iter2f40a98": ("task2-iter2a98 (the committed steps recipe) removing 40% of the FFN neurons instead of "
                          "half, in the same two steps: the fifth run's chain timed 1.02x today's chain, and a "
                          "graph of this shape 1.08x on the 2-core CPU (chain-latency-h200x1/headroom-f40/); "
                          "pruning cost the student 1.3 points of GLUE-5 there",
                          [*_TASK2, _prune_amount(0.5, 0.4), _prune_steps(2), _point_estimate, _agreement(0.98)],
                          "task2-iter2a98", "quantize", _ON_TASK2_STUDENT),
    "task2-iter2qat": ("task2-iter2q0's pruned student through quantisation-aware training (one epoch, soft "
                       "targets from the teacher and labels), then dynamic INT8: all-INT8 without the held-out "
                       "choice's FP32 layers",
                       [*_TASK2, _prune_steps(2), _qat], "task2-iter2q0", "quantize",
                       ("task2-iter2q0", "03-prune", True)),
    "task2-p25q0": ("task2-b256's student with a quarter of its heads and of its FFN neurons pruned (not half), "
                    "INT8 as task2-q0: accuracy bought back by width, latency by the INT8 choice and tokens",
                    [*_TASK2, _prune_amount(0.25, 0.25), _point_estimate],
                    "task2-b256|task2-b256q0", "prune", _ON_TASK2_STUDENT),
    "task2-redistill": ("task2-b256's student pruned without recovery, then distilled again with the whole "
                        "schedule (5 + 3 epochs; hidden states, embeddings, soft targets and labels) into its new shape",
                        [_batch(256, 2.0), _task_loss(1.0), _redistill], "task2-b256", "distill",
                        _ON_TASK2_STUDENT),
    "noaug-i5": ("no augmentation, 5 + 3 epochs over the training rows", [_no_augment, _distill_only],
                 "c20-i5|chain", "distill", None),
    "no-intermediate": ("20 copies, no intermediate stage: soft targets for 3 epochs",
                        [_no_intermediate, _distill_only], "c20-i5|chain", "distill", ("chain", "01-augment", False)),
    "recover4": ("the chain's student pruned as the chain, 4 recovery epochs instead of 2", [_recovery(4)],
                 "chain", "prune", ("chain", "02-distill", True)),
    "int8-dynamic": ("the chain's FP32 graph, dynamic INT8", [_int8("dynamic")], "chain", "quantize",
                     ("chain", "04-export", True)),
    "int8-static": ("the chain's FP32 graph, static INT8 (calibrated on training rows)", [_int8("static")],
                    "chain", "quantize", ("chain", "04-export", True)),
    "int8-mixed": ("the chain's FP32 graph, mixed INT8 (sensitive units FP32, on the held-out rows)",
                   [_int8("mixed")], "chain", "quantize", ("chain", "04-export", True)),
    "int8-mixed-matrix": ("the chain's FP32 graph, mixed INT8 keeping single products FP32 instead of whole layers "
                          "(MRPC's layer choice kept 3 layers FP32: 1.84x today's chain's latency)",
                          [_int8("mixed", "matrix")], "int8-mixed", "quantize", ("chain", "04-export", True)),
}


def apply_variant(doc: dict, name: str) -> None:
    if name not in VARIANTS:
        raise SystemExit(f"unknown variant {name}; one of {', '.join(VARIANTS)}")
    for edit in VARIANTS[name][1]:
        edit(doc)


def deps(name: str, listed=()) -> str:
    """``PARENT STAGE_FOLDER seed|wait`` for the shell, or nothing. A parent written ``a|b`` is the
    first of them among ``listed`` (the session's variants of the task), else ``a``."""
    dep = VARIANTS[name][4]
    if dep is None:
        return ""
    choices = dep[0].split("|")
    parent = next((c for c in choices if c in listed), choices[0])
    return f"{parent} {dep[1]} {'seed' if dep[2] else 'wait'}"


def _stage_record(run: str, kind: str):
    name = last_stage(run, kind)
    return read_or_none(os.path.join(run, name, "record.json")) if name else None


def _share(score: float, teacher: float):
    """The score as a share of the teacher's (%), None for a teacher at 0 (an MCC at chance)."""
    return round(100 * score / teacher, 1) if teacher else None


def _pct(value) -> str:
    return "-" if value is None else f"{value:.1f}%"


CHAIN_STAGES = ("distill", "prune", "quantize")   # the student, the pruned student, the graph a user ships
GLUE5 = ("cola", "mrpc", "rte", "sst2", "stsb")


def _chain_stages(run: str, teacher_score: float) -> dict:
    """The dev (and held-out) score of a run's last distill, prune and quantize stages."""
    found = {}
    for kind in CHAIN_STAGES:
        record = _stage_record(run, kind)
        if not record or record.get("score") is None:
            continue
        holdout, share = _held(record)
        found[kind] = {"score": round(record["score"], 2), "retention": _share(record["score"], teacher_score),
                       "holdout": holdout, "holdout_retention": share}
    return found


def _held(record: dict) -> tuple:
    """A stage's score on the teacher's held-out rows and its share of the teacher's there (%),
    each None where the record has none (runs before the runner scored those rows)."""
    held = record.get("holdout") or {}
    score = round(held["score"], 2) if held.get("score") is not None else None
    return score, round(100 * held["retention"], 1) if held.get("retention") else None


def chain_tables(tasks: dict) -> str:
    """Per variant that ran on two tasks or more: each chain stage's dev score (share of the
    teacher) per task, and on all five GLUE tasks their mean against the teachers' mean."""
    order = [t for t in GLUE5 if t in tasks] + [t for t in tasks if t not in GLUE5]
    out = []
    for name in VARIANTS:
        ran = [t for t in order if (tasks[t]["variants"].get(name) or {}).get("stages")]
        if len(ran) < 2:
            continue
        glue5 = all(t in ran for t in GLUE5)
        lines = [f"### {name}: each stage", "",
                 "| stage | " + " | ".join(ran) + (" | GLUE-5 |" if glue5 else " |"),
                 "|---|" + "---:|" * (len(ran) + glue5),
                 "| held-out teacher | " + " | ".join(f"{tasks[t]['teacher']:.2f}" for t in ran)
                 + (f" | {sum(tasks[t]['teacher'] for t in GLUE5) / 5:.2f} |" if glue5 else " |")]
        for kind in CHAIN_STAGES:
            cells, scores = [], []
            for t in ran:
                stage = tasks[t]["variants"][name]["stages"].get(kind)
                if stage is None:
                    cells.append("-")
                    continue
                scores.append(stage["score"])
                cell = f"{stage['score']:.2f} ({_pct(stage['retention'])})"
                if stage.get("holdout") is not None:
                    cell += f"; held-out {_pct(stage.get('holdout_retention'))}"
                cells.append(cell)
            mean = ""
            if glue5:
                if len(scores) == 5:
                    teachers = sum(tasks[t]["teacher"] for t in GLUE5) / 5
                    mean = f" | {sum(scores) / 5:.2f} ({_pct(_share(sum(scores) / 5, teachers))})"
                else:
                    mean = " | -"
            lines.append(f"| {kind} | " + " | ".join(cells) + mean + " |")
        out += lines + [""]
    return "\n".join(out)


def summarise(root: str) -> dict:
    tasks = {}
    for task in sorted(os.listdir(root)):
        teacher = read_or_none(os.path.join(root, task, "teacher-holdout-metrics.json"))
        if not teacher:
            continue
        rows = {}
        for name, (what, _, reference, kind, _) in VARIANTS.items():
            record = _stage_record(os.path.join(root, f"{task}-{name}"), kind)
            if not record or record.get("score") is None:
                continue
            row = {"what": what, "stage": kind, "score": round(record["score"], 2),
                   "retention": _share(record["score"], teacher["score"]),
                   "wall_time_s": record.get("wall_time_s")}
            holdout, share = _held(record)
            if holdout is not None:   # runs since the runner scores the held-out rows too
                row["holdout"], row["holdout_retention"] = holdout, share
            row["stages"] = _chain_stages(os.path.join(root, f"{task}-{name}"), teacher["score"])
            if kind == "quantize":
                row["method"] = record.get("method") or (record.get("config") or {}).get("method")
            rows[name] = row
        for name, row in rows.items():   # the difference from the variant it is compared with
            for ref in filter(None, VARIANTS[name][2].split("|")):
                if ref in rows and ref != name:
                    kind = VARIANTS[name][3]
                    ref_record = _stage_record(os.path.join(root, f"{task}-{ref}"), kind)
                    if ref_record and ref_record.get("score") is not None:
                        row["vs"] = ref
                        row["delta"] = round(row["score"] - ref_record["score"], 2)
                        break
        tasks[task] = {"teacher": round(teacher["score"], 2), "variants": rows}
    return tasks


def table(tasks: dict) -> str:
    names = [n for n in VARIANTS if any(n in t["variants"] for t in tasks.values())]
    order = list(tasks)
    lines = ["| variant | stage scored | " + " | ".join(order) + " |", "|---|---|" + "---:|" * len(order),
             "| held-out teacher | | " + " | ".join(f"{tasks[t]['teacher']:.2f}" for t in order) + " |"]
    for name in names:
        cells = []
        for t in order:
            row = tasks[t]["variants"].get(name)
            if row is None:
                cells.append("-")
                continue
            cell = f"{row['score']:.2f} ({_pct(row['retention'])})"
            if "delta" in row:
                cell += f", {row['delta']:+.2f} vs {row['vs']}"
            if "holdout" in row:
                cell += f"; held-out {row['holdout']:.2f} ({_pct(row.get('holdout_retention'))})"
            cells.append(cell)
        kind = VARIANTS[name][3]
        lines.append(f"| {name}: {VARIANTS[name][0]} | {kind} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> None:
    argv = argv if argv is not None else sys.argv[1:]
    if len(argv) >= 2 and argv[0] == "deps":
        print(deps(argv[1], argv[2:]))
        return
    if len(argv) != 2 or argv[0] != "summary":
        raise SystemExit(__doc__)
    root = argv[1]
    tasks = summarise(root)
    doc = {"command": "python3 -m bench.experiments.accuracy_ablation summary " + root, "tasks": tasks}
    with open(os.path.join(root, "summary.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    text = table(tasks)
    stages = chain_tables(tasks)
    if stages:
        text += "\n\n## The chain's stages\n\n" + stages
    with open(os.path.join(root, "summary.md"), "w") as f:
        f.write("# Issue 32 ablation (dev scores, each taken once; share of the held-out teacher; where "
                "recorded, the score on the teacher's held-out rows, on which a choice between variants is made)\n\n"
                + text + "\n")
    print(text)


if __name__ == "__main__":
    main()
