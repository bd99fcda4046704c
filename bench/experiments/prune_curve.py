"""How much accuracy does one-shot structured pruning cost before any recovery? Dev accuracy
against the share of heads, of FFN neurons, or of both removed from a task checkpoint.

Each point is the real method (``compressor.prune.structured.prune_structured`` on a
``RecoveryJob``, ``recover.mode none``, one iteration, global scope, head importance
``gradient``, FFN importance ``taylor``, on ``importance_rows`` training rows) applied to a
fresh copy of the unpruned model: heads only, FFN only, and the same share of both, at
0.1 .. 0.9. As in Michel et al. (2019, fig. 2), every point prunes from the same scores of
the unpruned model, so the importance pass runs once and is handed to each call (the
method's ``importance`` is swapped for the cached scores, checked to be asked of an unpruned
model with the same importance kinds); selection, resizing and scoring are the method's
own. Every point is scored on all dev rows. Writes ``compressor.core.results`` JSON and a PNG.

    flock /tmp/compressor-cpu.lock .venv/bin/python -m bench.experiments.prune_curve \\
        --teacher runs/demo-teacher --out bench/results/prune-curve-demo-teacher.json
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import os
import sys
import time

FRACTIONS = [round(0.1 * i, 1) for i in range(1, 10)]
KINDS = ("heads", "ffn", "both")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


@contextlib.contextmanager
def cached_importance(module, scores, shape):
    """``module.importance`` returns ``scores`` (computed once on the unpruned model) while inside."""
    from compressor.core.shapes import shape_of

    real = module.importance
    kinds = (scores["head_importance"], scores["ffn_importance"])

    def importance(job, model, config):
        now = shape_of(model)
        assert (now["heads"], now["ffn"]) == (shape["heads"], shape["ffn"]), "scores are of the unpruned model"
        assert (config.head_importance, config.ffn_importance) == kinds, "scores of other importance kinds"
        return {"heads": [s.copy() for s in scores["heads"]], "ffn": [s.copy() for s in scores["ffn"]]}

    module.importance = importance
    try:
        yield
    finally:
        module.importance = real


def plot(points: dict, teacher: float, majority: float, path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from compressor.core.io import save_figure

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    labels = {"heads": "heads only (gradient)", "ffn": "FFN neurons only (Taylor)",
              "both": "heads and FFN, same share"}
    for kind, marker in zip(KINDS, "osD"):
        xs = [0.0] + [p["fraction"] for p in points[kind]]
        ys = [teacher] + [p["value"] for p in points[kind]]
        ax.plot(xs, ys, marker=marker, ms=4, label=labels[kind])
    ax.axhline(teacher, color="k", lw=1, ls="--", label=f"unpruned teacher ({teacher:.1f})")
    ax.axhline(majority, color="grey", lw=1, ls=":", label=f"majority class ({majority:.1f})")
    ax.set_xlabel("share removed (one-shot, no recovery)")
    ax.set_ylabel("SST-2 dev accuracy")
    ax.set_xlim(-0.02, 0.92)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    save_figure(fig, path, dpi=120)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--teacher", default="runs/demo-teacher", help="the unpruned task checkpoint")
    ap.add_argument("--out", required=True, help="results JSON to write (the plot beside it, .png)")
    ap.add_argument("--data-dir", default=os.environ.get("GLUE_DIR") or "../shared/glue_data")
    ap.add_argument("--importance-rows", type=int, default=512)
    ap.add_argument("--fractions", default=",".join(str(f) for f in FRACTIONS))
    ap.add_argument("--max-length", type=int, help="default: the teacher's")
    args = ap.parse_args()

    import numpy as np
    import torch

    import compressor.prune.structured as structured
    from compressor.bench.harness import fingerprint
    from compressor.core.data import load_split
    from compressor.core.loaders import read_meta
    from compressor.core.models import count_parameters, load_for_task
    from compressor.prune.configs import RecoverSettings, StructuredPruneConfig
    from compressor.engine.job import RecoveryJob
    from compressor.core.results import command_line, row, shown_path, write_results
    from compressor.core.shapes import shape_of
    from compressor.engine.train import set_seed

    start = time.perf_counter()
    fractions = [float(f) for f in args.fractions.split(",")]
    max_length = args.max_length or read_meta(args.teacher).get("max_length", 128)
    teacher, tokenizer = load_for_task(args.teacher)
    teacher.eval()
    task = load_split("sst2", "dev", data_dir=args.data_dir).task
    train = load_split(task, "train", data_dir=args.data_dir)
    dev = load_split(task, "dev", data_dir=args.data_dir)
    original = shape_of(teacher)
    device = torch.device("cpu")

    def config_for(heads: float, ffn: float) -> StructuredPruneConfig:
        config = StructuredPruneConfig(heads=heads, ffn=ffn, head_importance="gradient",
                                       ffn_importance="taylor", scope="global", iterations=1,
                                       importance_rows=args.importance_rows, max_length=max_length,
                                       recover=RecoverSettings(mode="none"), device="cpu")
        config.check()
        return config

    base = config_for(0.5, 0.5)
    set_seed(base.seed)
    job = RecoveryJob(copy.deepcopy(teacher), tokenizer, train, dev, base, device)
    unpruned = job.evaluate(desc="score unpruned")
    log(f"unpruned: {unpruned['score']:.2f}")
    t = time.perf_counter()
    scores = structured.importance(job, job.model, base)
    importance_s = time.perf_counter() - t
    scores.update(head_importance=base.head_importance, ffn_importance=base.ffn_importance)
    log(f"importance on {args.importance_rows} rows: {importance_s:.1f} s")
    labels = [ex.label for ex in dev.examples]
    majority = 100 * max(labels.count(v) for v in set(labels)) / len(labels)

    rows = [row("teacher", task.name, "accuracy", round(unpruned["score"], 2), round(unpruned["score"], 2),
                parameters=count_parameters(teacher), size_bytes=None, extra={
                    "kind": "none", "fraction": 0.0, "heads": original["heads"], "ffn": original["ffn"],
                    "heads_kept": sum(original["heads"]), "ffn_kept": sum(original["ffn"])})]
    points = {k: [] for k in KINDS}
    with cached_importance(structured, scores, original):
        for kind in KINDS:
            for f in fractions:
                config = config_for(f if kind in ("heads", "both") else 0.0,
                                    f if kind in ("ffn", "both") else 0.0)
                set_seed(config.seed)
                job = RecoveryJob(copy.deepcopy(teacher), tokenizer, train, dev, config, device)
                t = time.perf_counter()
                record = structured.prune_structured(job, config)
                step = record["steps"][-1]
                value = round(step["pruned"]["score"], 2)
                extra = {"kind": kind, "fraction": f, "heads": step["heads"], "ffn": step["ffn"],
                         "heads_kept": sum(step["heads"]), "ffn_kept": sum(step["ffn"]),
                         "heads_removed": round(step["heads_removed"], 4),
                         "ffn_removed": round(step["ffn_removed"], 4),
                         "metrics": step["pruned"]["metrics"], "recovery": "none",
                         "time_s": round(time.perf_counter() - t, 1)}
                rows.append(row(f"{kind}-{f}", task.name, "accuracy", value, round(unpruned["score"], 2),
                                parameters=count_parameters(job.model), size_bytes=None, extra=extra))
                points[kind].append({"fraction": f, "value": value})
                log(f"{kind:5s} {f:.1f}: {value:6.2f}  heads {step['heads']}  ffn {step['ffn']}  "
                    f"{rows[-1]['parameters']:,} params ({extra['time_s']} s)")
    image = os.path.splitext(args.out)[0] + ".png"
    plot(points, unpruned["score"], majority, image,
         f"{shown_path(args.teacher)}: one-shot structured pruning, no recovery\n"
         f"global scope, {args.importance_rows} importance rows, SST-2 dev ({len(dev)} rows)")
    write_results(args.out, rows, command=command_line(), fingerprint_info=fingerprint(), config={
        "teacher": shown_path(args.teacher), "method": "structured (compressor.prune.structured.prune_structured)",
        "recover": "none", "iterations": 1, "scope": "global", "head_importance": base.head_importance,
        "ffn_importance": base.ffn_importance, "importance_rows": args.importance_rows,
        "importance": "computed once on the unpruned model and reused for every point (Michel et al. 2019)",
        "importance_time_s": round(importance_s, 1), "min_heads": base.min_heads, "min_ffn": base.min_ffn,
        "max_length": max_length, "seed": base.seed, "device": "cpu",
        "dev": f"{dev.source} ({len(dev)} rows)", "majority_class": round(majority, 2),
        "plot": shown_path(image), "fractions": fractions,
        "normalised_head_scores": [np.round(s, 4).tolist() for s in structured.normalise(scores["heads"])],
        "wall_time_s": round(time.perf_counter() - start, 1)})
    log(f"wrote {args.out} and {image} in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
