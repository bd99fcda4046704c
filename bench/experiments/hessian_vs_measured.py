"""Q-BERT's Hessian sensitivity against the measured drop: which picks the units to keep FP32 better?

Issue 32, item 3. On a checkpoint fine-tuned with ``--holdout N``, the held-out rows are split in
two halves (seeded): both measures are taken on the *search* half (the measured drop: each unit
quantised alone with ONNX Runtime dynamic INT8 and scored; the Hessian: top eigenvalue by power
iteration and Hutchinson trace of the task loss per unit, ``compressor.quantize.hessian``), and
for k = 1, 2, 3 units kept FP32 in each measure's order the INT8 graph is scored on the search
half, on the *check* half (rows neither measure saw: the comparison) and on dev (reported only,
never used to choose). Also: Spearman's rank correlation per unit between each Hessian score and
the measured drop, and between the measured drops of the two halves (how reproducible the
measured order itself is).

    compressor finetune minilm-l6 --task sst2 --data-dir $GLUE_DIR --train-limit 6000 --holdout 1000 \\
        --epochs 1 --lr 1e-4 --max-length 64 --out runs/hessian/teacher
    python -m bench.experiments.hessian_vs_measured --teacher runs/hessian/teacher \\
        --out bench/results/hessian-vs-measured-minilm-l6-sst2.json
"""
from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import replace

MEASURES = {   # name -> (report, key ordering the units, largest first)
    "measured": ("measured", "drop"),
    "hessian-eigenvalue": ("hessian", "qbert"),
    "hessian-trace": ("hessian", "trace_per_weight"),
    "hessian-weighted-trace": ("hessian", "weighted_trace"),
}


def ranks(values):
    """Ranks from 1, ties sharing their mean rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for m in range(i, j + 1):
            out[order[m]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(a, b):
    """Spearman's rho (Pearson's r of the tie-averaged ranks); None where one side is constant."""
    ra, rb = ranks(a), ranks(b)
    n = len(ra)
    ma, mb = sum(ra) / n, sum(rb) / n
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    va, vb = sum((x - ma) ** 2 for x in ra), sum((y - mb) ** 2 for y in rb)
    return round(cov / (va * vb) ** 0.5, 4) if va and vb else None


def main():
    from compressor.core.data import get_task, holdout, load_data
    from compressor.core.models import load_for_task, read_meta
    from compressor.core.presets import resolve_preset
    from compressor.core.results import command_line, row, write_results
    from compressor.export import export_onnx
    from compressor.export.int8 import onnx_file, quantizable_units, quantize_dynamic_onnx
    from compressor.quantize import hessian
    from compressor.quantize import sensitivity as sens

    ap = argparse.ArgumentParser()
    ap.add_argument("--teacher", required=True, help="checkpoint fine-tuned with --holdout N")
    ap.add_argument("--data-dir", default=os.environ.get("GLUE_DIR"))
    ap.add_argument("--work", default="runs/hessian/study")
    ap.add_argument("--out", required=True)
    ap.add_argument("--granularity", default="matrix", choices=("matrix", "layer"))
    ap.add_argument("--preset", default="avx2")
    ap.add_argument("--per-channel", action="store_true",
                    help="per-channel weights (default per tensor: where all-INT8 loses accuracy on this model)")
    ap.add_argument("--ks", default="1,2,3")
    ap.add_argument("--seed", type=int, default=42, help="the halves, the Hessian's rows and vectors")
    ap.add_argument("--hessian-rows", type=int, default=64)
    ap.add_argument("--hessian-batch-size", type=int, default=16)
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--tol", type=float, default=1e-3)
    ap.add_argument("--trace-samples", type=int, default=4)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    ks = [int(k) for k in args.ks.split(",")]
    args.work = os.path.abspath(args.work)   # graphs are opened relative to the export folder otherwise
    started = time.perf_counter()

    meta = read_meta(args.teacher)
    task = get_task(meta["task"])
    max_length = meta.get("max_length", 128)
    export = os.path.join(args.work, "onnx")
    if not os.path.isfile(os.path.join(export, "model.onnx")):
        export_onnx(args.teacher, export, parity=False)
    held = holdout.held_rows(args.teacher, task, args.data_dir, needs="this study")
    check, search = held.partition(len(held) // 2, args.seed, "holdout (search half)")
    check = replace(check, split="holdout (check half)")
    dev = load_data(task, "dev", args.data_dir)
    preset = resolve_preset(args.preset, per_channel=args.per_channel)
    units = quantizable_units(onnx_file(export), args.granularity)
    os.makedirs(args.work, exist_ok=True)
    timings = {}

    t = time.perf_counter()
    measured = sens.measure_sensitivity(export, search, preset, args.work, args.granularity, args.threads)
    timings["measured_search_s"] = round(time.perf_counter() - t, 1)
    t = time.perf_counter()
    measured_check = sens.measure_sensitivity(export, check, preset, args.work, args.granularity, args.threads)
    timings["measured_check_s"] = round(time.perf_counter() - t, 1)

    net, tokenizer = load_for_task(args.teacher, task, attn_implementation="eager")
    t = time.perf_counter()
    report = hessian.hessian_sensitivity(net, tokenizer, search, list(units), preset, rows=args.hessian_rows,
                                         batch_size=args.hessian_batch_size, iterations=args.iterations,
                                         tol=args.tol, trace_samples=args.trace_samples, seed=args.seed,
                                         max_length=max_length, score="eigenvalue",
                                         granularity=args.granularity)
    timings["hessian_s"] = round(time.perf_counter() - t, 1)

    by_unit = {u: {"unit": u, "nodes": units[u]} for u in units}
    for r in measured["units"]:
        by_unit[r["unit"]].update(drop=r["drop"], score_alone=r["score"])
    for r in measured_check["units"]:
        by_unit[r["unit"]].update(drop_check=r["drop"])
    for r in report["units"]:
        by_unit[r["unit"]].update({k: r[k] for k in ("eigenvalues", "iterations", "converged", "eigenvalue_mean",
                                                      "eigenvalue_std", "qbert", "trace", "trace_per_weight",
                                                      "int8_error", "weighted_trace", "parameters")})
    names = list(units)
    orders = {m: sorted(names, key=lambda u: (-by_unit[u][key], u)) for m, (_, key) in MEASURES.items()}

    sets = {"search": search, "check": check, "dev": dev}
    cache = {}

    def scores(kept):
        key = frozenset(kept)
        if key not in cache:
            path = os.path.join(args.work, "study.onnx")
            nodes = [n for u in kept for n in units[u]]
            quantize_dynamic_onnx(onnx_file(export), path, preset, nodes_to_exclude=nodes)
            cache[key] = {s: round(sens.dev_score(export, rows, path, args.threads), 4) for s, rows in sets.items()}
        return cache[key]

    fp32 = {s: round(sens.dev_score(export, rows, threads=args.threads), 4) for s, rows in sets.items()}
    all_int8 = scores([])
    metric = task.main_metric
    rows = [row("fp32", task.name, metric, fp32["check"], fp32["check"], extra={"scores": fp32}),
            row("all-int8", task.name, metric, all_int8["check"], fp32["check"],
                extra={"scores": all_int8, "fp32_units": []})]
    choices = []
    for m in MEASURES:
        for k in ks:
            kept = orders[m][:k]
            s = scores(kept)
            choices.append({"measure": m, "k": k, "fp32_units": kept, "scores": s,
                            "drop": {x: round(fp32[x] - s[x], 4) for x in s}})
            rows.append(row(f"{m} k={k}", task.name, metric, s["check"], fp32["check"],
                            extra={"measure": m, "k": k, "fp32_units": kept, "scores": s}))
    drops = [by_unit[u]["drop"] for u in names]
    correlation = {f"{m} vs measured drop (search)": spearman([by_unit[u][key] for u in names], drops)
                   for m, (_, key) in MEASURES.items() if m != "measured"}
    correlation.update({f"{m} vs measured drop (check)": spearman([by_unit[u][key] for u in names],
                                                                  [by_unit[u]["drop_check"] for u in names])
                        for m, (_, key) in MEASURES.items() if m != "measured"})
    correlation["measured drop: search vs check half"] = spearman(drops, [by_unit[u]["drop_check"] for u in names])
    timings["total_s"] = round(time.perf_counter() - started, 1)
    with open(os.path.join(args.work, "raw.json"), "w") as f:   # kept whatever happens below
        json.dump({"fp32": fp32, "all_int8": all_int8, "choices": choices, "spearman": correlation,
                   "units": [by_unit[u] for u in names], "timings": timings}, f, indent=1)
    write_results(args.out, rows, command=command_line(), task=task.name, metric=metric,
                  teacher=meta.get("made_by"), granularity=args.granularity, preset=preset.to_dict(),
                  row_counts={s: len(r) for s, r in sets.items()}, hessian_settings={
                      "rows": report["examples"], "batches": report["batches"], "batch_size": report["batch_size"],
                      "iterations": args.iterations, "tol": args.tol, "trace_samples": args.trace_samples,
                      "seed": args.seed, "split": report["split"], "mean_loss": report["mean_loss"]},
                  fp32=fp32, all_int8=all_int8, orders=orders, choices=choices, spearman=correlation,
                  units=[by_unit[u] for u in names], timings=timings)
    with open(os.path.splitext(args.out)[0] + ".md", "w") as f:
        f.write(markdown(fp32, all_int8, choices, correlation, by_unit, names, metric, sets))
    print(markdown(fp32, all_int8, choices, correlation, by_unit, names, metric, sets))
    print(timings)


def markdown(fp32, all_int8, choices, correlation, by_unit, names, metric, sets) -> str:
    lines = [f"{metric} on {', '.join(f'{s} ({len(r)} rows)' for s, r in sets.items())}; "
             "the measures are taken on the search half", "",
             "| FP32 units chosen by | k | units | search | check | dev |", "|---|---:|---|---:|---:|---:|",
             f"| (FP32) | | | {fp32['search']:.2f} | {fp32['check']:.2f} | {fp32['dev']:.2f} |",
             f"| (all INT8) | 0 | | {all_int8['search']:.2f} | {all_int8['check']:.2f} | {all_int8['dev']:.2f} |"]
    for c in choices:
        s = c["scores"]
        lines.append(f"| {c['measure']} | {c['k']} | {', '.join(c['fp32_units'])} | {s['search']:.2f} | "
                     f"{s['check']:.2f} | {s['dev']:.2f} |")
    lines += ["", "| Spearman | rho |", "|---|---:|"]
    lines += [f"| {k} | {v} |" for k, v in correlation.items()]
    lines += ["", "| unit | drop (search) | drop (check) | eigenvalue: abs(mean) + std | trace / weight | "
              "weighted trace |", "|---|---:|---:|---:|---:|---:|"]
    for u in names:
        r = by_unit[u]
        lines.append(f"| {u} | {r['drop']:+.2f} | {r['drop_check']:+.2f} | {r['qbert']:.4g} | "
                     f"{r['trace_per_weight']:.4g} | {r['weighted_trace']:.4g} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
