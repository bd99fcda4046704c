"""Early exit on this CPU: the chained INT8 segments at the calibrated threshold and along a sweep,
against the same model without exits as one INT8 ONNX graph, timed in one process.

    python -m bench.experiments.early_exit_bench --model EARLY_EXIT_CHECKPOINT \
        --data-dir $GLUE_DIR --out bench/results/early-exit-NAME.json [--sentences 872]

1. exports the checkpoint as fused segments with dynamic INT8 (``compressor.exit.export_segments``,
   parity against the PyTorch early-exit model on 200 dev rows);
2. exports the model without exits (the wrapped model) through ``compressor.export`` and
   quantises it the same way (same preset);
3. scores both on every dev row one sentence at a time: the segments once with no row leaving
   (every exit's logits), from which each threshold's predictions, exit histogram and FLOPs
   follow exactly as the chain decides (batch 1: a row's segments see only that row);
4. times, at batch 1 and one thread, each dev sentence through the model without exits and the
   chain at the calibrated threshold and at each sweep threshold, interleaved sentence by
   sentence (the order rotating), after a warm-up; mean, p50, p90.

The calibrated threshold was chosen on held-out training rows (``compressor early-exit``); the
sweep is a curve, not a choice. Writes a compressor-results/1 file (one row per variant: the
sweep's rows carry ``extra.curve`` so the report draws them as one line), a histogram PNG and the
curve PNG beside it.
"""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

import numpy as np


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True, help="an early-exit checkpoint (compressor early-exit)")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--out", required=True, help="results JSON; PNGs are written beside it")
    parser.add_argument("--name", default=None, help="the variant's name in the rows")
    parser.add_argument("--teacher-score", type=float, default=None,
                        help="the FP32 teacher's dev score, for retention (default: the record's)")
    parser.add_argument("--sentences", type=int, default=0, help="dev sentences timed (0: all)")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--preset", default="auto")
    parser.add_argument("--thresholds", default="", help="sweep thresholds, comma-separated "
                        "(default: a spread for the rule)")
    parser.add_argument("--work", default=None, help="keep the exported folders here")
    args = parser.parse_args(argv)

    from compressor.core.data import load_split
    from compressor.export.onnx import example_texts, export_onnx, score_onnx
    from compressor.exit.configs import ExitExportConfig
    from compressor.exit.model import EarlyExitModel
    from compressor.exit.rules import exit_points, flops_saved
    from compressor.exit.runtime import SegmentChain
    from compressor.exit.segments import export_segments
    from compressor.exit.train import layer_widths
    from compressor.export.runtime import Predictor
    from compressor.core.io import read_json, write_bytes
    from compressor.core.metrics import compute_metrics, task_score
    from compressor.core.models import checkpoint_meta, load_for_task, save_checkpoint, read_meta
    from compressor.export.int8 import quantize_dynamic_onnx, write_export
    from compressor.core.presets import resolve_preset
    from compressor.core.results import command_line, row, write_results
    from compressor.engine.scoring import _task_for

    start = time.perf_counter()
    work = args.work or tempfile.mkdtemp(prefix="early-exit-bench-")
    os.makedirs(work, exist_ok=True)
    task, meta = _task_for(args.model, None)
    dev = load_split(task, "dev", data_dir=args.data_dir)
    model, tokenizer = load_for_task(args.model, task)
    assert isinstance(model, EarlyExitModel), "--model must be an early-exit checkpoint"
    record_file = os.path.join(args.model, "metrics.json")
    record = read_json(record_file) if os.path.isfile(record_file) else {}
    preset = resolve_preset(args.preset)

    # 1. segments, fused, INT8
    seg_dir = os.path.join(work, "segments-int8")
    shutil.rmtree(seg_dir, ignore_errors=True)
    manifest = export_segments(args.model, seg_dir, ExitExportConfig(int8=True, preset=preset.name,
                                                                     parity_rows=200),
                               examples=dev.examples)
    # 2. the model without exits, fused, INT8 (same preset)
    plain_ckpt, plain_fp32, plain_int8 = (os.path.join(work, n) for n in ("plain", "plain-onnx", "plain-int8"))
    for folder in (plain_ckpt, plain_fp32, plain_int8):
        shutil.rmtree(folder, ignore_errors=True)
    save_checkpoint(model.backbone, tokenizer, plain_ckpt,
                    checkpoint_meta(task, meta.get("max_length", 128), "early-exit-bench"))
    export_onnx(plain_ckpt, plain_fp32, examples=dev.examples[:200])
    write_export(plain_fp32, plain_int8,
                 lambda path: quantize_dynamic_onnx(os.path.join(plain_fp32, "model.onnx"), path, preset),
                 {"method": "dynamic", "preset": preset.to_dict()})

    # 3. scores: the model without exits; the chain's every exit for every dev row
    texts = example_texts(dev.examples)
    labels = [ex.label for ex in dev.examples]
    plain_metrics = score_onnx(plain_int8, dev, threads=1)
    plain_score = task_score(task, plain_metrics)
    chain = SegmentChain(seg_dir, threads=1)
    plain = Predictor(plain_int8, threads=1)
    feeds = [chain.encode([t]) for t in texts]
    every = [chain.run_all(feed) for feed in feeds]
    all_logits = [np.concatenate([e[k] for e in every]) for k in range(len(chain.exits))]
    lengths = [int(f["attention_mask"].sum()) for f in feeds]
    widths, hidden, gated = layer_widths(model)
    regression = chain.regression

    rule, calibrated = chain.rule, float(chain.threshold)
    sweep = [float(t) for t in args.thresholds.split(",") if t.strip()] or _spread(rule, calibrated,
                                                                                 len(chain.exits))
    thresholds = [calibrated] + [t for t in sweep if abs(t - calibrated) > 1e-9]

    def outcome(threshold):
        where, chosen = exit_points(all_logits, rule, threshold, regression, chain.tolerance)
        preds = chosen[:, 0] if regression else chosen.argmax(-1)
        metrics = compute_metrics(task, preds, labels)
        flops = flops_saved(lengths, where, widths, hidden, chain.exits, len(all_logits[0][0]), gated)
        hist = {str(layer): int((where == k).sum()) for k, layer in enumerate(chain.exits)}
        return {"metrics": metrics, "score": task_score(task, metrics), "exit_histogram": hist,
                "mean_exit_layer": round(float(np.mean([chain.exits[k] for k in where])), 4), **flops}

    outcomes = {t: outcome(t) for t in thresholds}

    # 4. timing, one process, interleaved sentence by sentence
    n = args.sentences or len(feeds)
    order = np.random.default_rng(0).permutation(len(feeds))[:n]
    variants = ["plain"] + [f"exit@{t:g}" for t in thresholds]
    times = {v: [] for v in variants}

    def run_variant(v, feed):
        if v == "plain":
            plain.run(feed)
        else:
            chain.set_rule(rule, float(v.split("@")[1]))
            chain.run(feed)

    for i in order[:args.warmup]:
        for v in variants:
            run_variant(v, feeds[i])
    for j, i in enumerate(order):
        rotated = variants[j % len(variants):] + variants[:j % len(variants)]
        for v in rotated:
            if v != "plain":
                chain.set_rule(rule, float(v.split("@")[1]))
            feed = feeds[i]
            t0 = time.perf_counter()
            if v == "plain":
                plain.run(feed)
            else:
                chain.run(feed)
            times[v].append((time.perf_counter() - t0) * 1000)

    def stats(values):
        a = np.array(values)
        return {"mean": round(float(a.mean()), 4), "p50": round(float(np.percentile(a, 50)), 4),
                "p90": round(float(np.percentile(a, 90)), 4), "p99": round(float(np.percentile(a, 99)), 4)}

    lat = {v: stats(times[v]) for v in variants}
    name = args.name or os.path.basename(os.path.normpath(args.model))
    teacher_score = args.teacher_score or record.get("score_before")
    metric = "+".join(plain_metrics)
    common = dict(engine="onnxruntime", device="cpu", threads=1, batch_size=1)
    seg_size = manifest["onnx_size_bytes"]
    plain_size = os.path.getsize(os.path.join(plain_int8, "model.onnx"))
    rows = [row(f"{name} without exits (INT8 ONNX)", task.name, metric, round(plain_score, 2),
                teacher_score, size_bytes=plain_size, latency_ms=lat["plain"],
                extra={"metrics": plain_metrics, "group": "ours"}, **common)]
    for t in thresholds:
        o, l = outcomes[t], lat[f"exit@{t:g}"]
        label = f"{name} exits {rule} {t:g}" + (" (calibrated)" if t == calibrated else "")
        rows.append(row(label, task.name, metric, round(o["score"], 2), teacher_score,
                        size_bytes=seg_size, latency_ms=l,
                        extra={**o, "threshold": t, "rule": rule, "calibrated": t == calibrated,
                               "curve": f"{name} early exit ({rule} sweep)",
                               "speedup_mean_vs_without_exits": round(lat["plain"]["mean"] / l["mean"], 3),
                               "retention_vs_without_exits_int8": round(o["score"] / plain_score, 4)},
                        **common))
    cal = outcomes[calibrated]
    summary = {
        "model": args.model, "task": task.name, "rule": rule, "calibrated_threshold": calibrated,
        "calibration": manifest.get("calibration"), "teacher_score_fp32": teacher_score,
        "without_exits_int8_score": round(plain_score, 2),
        "calibrated_int8_score": round(cal["score"], 2),
        "retention_vs_teacher_fp32": round(cal["score"] / teacher_score, 4) if teacher_score else None,
        "retention_vs_without_exits_int8": round(cal["score"] / plain_score, 4),
        "mean_latency_ms": {"without_exits": lat["plain"]["mean"], "early_exit": lat[f"exit@{calibrated:g}"]["mean"]},
        "mean_speedup": round(lat["plain"]["mean"] / lat[f"exit@{calibrated:g}"]["mean"], 3),
        "p50_speedup": round(lat["plain"]["p50"] / lat[f"exit@{calibrated:g}"]["p50"], 3),
        "flops_saved": cal["flops_saved"], "exit_histogram": cal["exit_histogram"],
        "mean_exit_layer": cal["mean_exit_layer"], "timed_sentences": int(n),
        "segment_parity": manifest.get("parity"),
        "fusions": [s["optimization"]["fusions"] for s in manifest["segments"]],
        "preset": preset.name, "wall_time_s": round(time.perf_counter() - start, 1),
    }
    base = os.path.splitext(args.out)[0]
    _plots(base, name, rows, cal, chain.exits, rule, calibrated, write_bytes)
    write_results(args.out, rows, command=command_line(), summary=summary,
                  training_record=_short(record))
    print({k: summary[k] for k in ("calibrated_threshold", "teacher_score_fp32", "without_exits_int8_score",
                                   "calibrated_int8_score", "mean_latency_ms", "mean_speedup",
                                   "flops_saved", "exit_histogram")})
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def _spread(rule, calibrated, exits):
    if rule == "entropy":
        return [0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6]
    if rule == "max_prob":
        return [0.999, 0.99, 0.97, 0.95, 0.9, 0.8, 0.7]
    return [float(t) for t in range(1, exits)]


def _short(record: dict) -> dict:
    keep = ("score", "score_before", "threshold", "rule", "exit_layers", "train_rows",
            "calibration_rows", "train_time_s", "config")
    out = {k: record.get(k) for k in keep if k in record}
    if "calibration" in record:
        out["calibration"] = {k: v for k, v in record["calibration"].items() if k != "tried"}
    if "training" in record:
        out["training"] = {k: record["training"].get(k) for k in ("training", "cache_s", "cached_rows",
                                                                  "steps", "train_time_s")}
    return out


def _plots(base, name, rows, calibrated_outcome, exits, rule, threshold, write_bytes) -> None:
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hist = calibrated_outcome["exit_histogram"]
    fig, ax = plt.subplots(figsize=(6, 3.6), dpi=110)
    ax.bar([str(layer) for layer in exits], [hist[str(layer)] for layer in exits], color="#9467bd")
    ax.set_xlabel("exit after layer")
    ax.set_ylabel("dev sentences")
    ax.set_title(f"{name}: where dev sentences exit ({rule} < {threshold:g})" if rule == "entropy"
                 else f"{name}: where dev sentences exit ({rule} {threshold:g})", fontsize=9)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    write_bytes(base + "-histogram.png", buf.getvalue())

    plain = rows[0]
    # in threshold order: the cost falls monotonically along it, the timing only nearly so
    curve = sorted(rows[1:], key=lambda r: r["extra"]["threshold"], reverse=rule == "max_prob")
    fig, ax = plt.subplots(figsize=(6.4, 4), dpi=110)
    ax.plot([r["latency_ms"]["mean"] for r in curve], [r["value"] for r in curve], "o-", color="#9467bd",
            label=f"early exit ({rule} sweep)")
    for r in curve:
        ax.annotate(f"{r['extra']['threshold']:g}", (r["latency_ms"]["mean"], r["value"]),
                    textcoords="offset points", xytext=(4, 4), fontsize=7)
    cal = next(r for r in curve if r["extra"]["calibrated"])
    ax.scatter([cal["latency_ms"]["mean"]], [cal["value"]], s=160, facecolors="none",
               edgecolors="#2ca02c", linewidths=1.6, label="calibrated on training rows", zorder=4)
    ax.scatter([plain["latency_ms"]["mean"]], [plain["value"]], s=60, color="#1f77b4",
               label="without exits", zorder=3)
    if plain.get("teacher_value"):
        ax.axhline(0.99 * plain["teacher_value"], color="#999", ls="--", lw=1, label="99% of the teacher")
    ax.set_xlabel("mean latency per sentence, batch 1, 1 thread, INT8 ONNX (ms)")
    ax.set_ylabel("dev score (x100)")
    ax.set_title(name, fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    write_bytes(base + "-curve.png", buf.getvalue())


if __name__ == "__main__":
    raise SystemExit(main())
