"""Low-rank factorisation of a fine-tuned encoder: rank against dev score and CPU latency.

For the FFN Linears (input and output) and for the attention Linears (query, key, value,
output) in turn, each Linear W becomes two, ``up(down(x))``, from its truncated SVD
(``compressor.lowrank.factorise_``), each Linear at the smallest rank keeping ``energy`` of its
squared singular values, energies 1.0, 0.95, 0.9, 0.8 and 0.6 (``only_if_smaller: false``:
every Linear is factorised, even where the two factors hold more weights than W, so the
cost of a high rank shows). Each point is scored on the dev rows as it is (no recovery) and
after a short distillation recovery from the unfactorised model (``RecoveryJob.recover``,
soft targets, ``--recover-steps`` steps), and exported to ONNX (the toolkit's export:
optimum, onnxruntime's fusions, parity on a few dev rows); batch-1 latency of every export
and the unfactorised model's export at one thread, interleaved over real dev sentences.

The model is MiniLM-L6 (alias ``minilm-l6``) fine-tuned briefly here on an SST-2 training
slice (or ``--teacher``, a task checkpoint). Writes ``compressor.core.results`` JSON and a PNG.

    flock /tmp/compressor-cpu.lock .venv/bin/python -m bench.experiments.lowrank_curve \\
        --work /tmp/lowrank-curve --out bench/results/lowrank-curve-minilm-l6-sst2-cpu.json
"""
from __future__ import annotations

import argparse
import copy
import os
import sys
import time

ENERGIES = (1.0, 0.95, 0.9, 0.8, 0.6)
TARGETS = ("ffn", "attention")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def plot(points: list, teacher: dict, path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from compressor.core.io import save_figure

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.2))
    for target, marker in zip(TARGETS, "os"):
        mine = [p for p in points if p["target"] == target]
        xs = [p["weights_kept"] for p in mine]
        left.plot(xs, [p["score_no_recovery"] for p in mine], marker=marker, ls="--",
                  label=f"{target}, no recovery")
        done = [p for p in mine if p["score_recovered"] is not None]
        left.plot([p["weights_kept"] for p in done], [p["score_recovered"] for p in done], marker=marker,
                  label=f"{target}, recovered")
        right.plot(xs, [p["latency_p50_ms"] for p in mine], marker=marker, label=target)
        for p in mine:
            left.annotate(str(p["energy"]), (p["weights_kept"], p["score_no_recovery"]), fontsize=7)
    left.axhline(teacher["score"], color="k", lw=1, ls=":", label=f"unfactorised ({teacher['score']:.1f})")
    right.axhline(teacher["latency_p50_ms"], color="k", lw=1, ls=":", label="unfactorised")
    left.set_xlabel("weights of the factorised Linears, share of dense")
    left.set_ylabel("SST-2 dev accuracy")
    right.set_xlabel("weights of the factorised Linears, share of dense")
    right.set_ylabel("p50 latency, batch 1, 1 thread (ms, ONNX Runtime)")
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    save_figure(fig, path, dpi=120)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="results JSON to write (the plot beside it, .png)")
    ap.add_argument("--work", required=True, help="folder for the teacher, checkpoints and exports")
    ap.add_argument("--teacher", help="a fine-tuned task checkpoint (default: fine-tune minilm-l6 here)")
    ap.add_argument("--data-dir", default=os.environ.get("GLUE_DIR") or "../shared/glue_data")
    ap.add_argument("--train-rows", type=int, default=2000, help="SST-2 training rows to fine-tune on")
    ap.add_argument("--recover-rows", type=int, default=512, help="training rows recovery sees")
    ap.add_argument("--recover-steps", type=int, default=16, help="recovery steps (batch 32)")
    ap.add_argument("--dev-limit", type=int, default=None, help="dev rows scored (default: all 872)")
    ap.add_argument("--energies", default=",".join(map(str, ENERGIES)))
    ap.add_argument("--targets", default=",".join(TARGETS))
    ap.add_argument("--sentences", type=int, default=200, help="dev sentences timed per variant")
    ap.add_argument("--max-length", type=int, default=64)
    ap.add_argument("--recover-energies", help="energies that get a recovery (default: every one)")
    ap.add_argument("--no-recovery", action="store_true", help="score the factorised models only")
    args = ap.parse_args()

    import torch

    from compressor.bench.harness import Spec, build, fingerprint, interleaved_latency, percentiles, sample_texts
    from compressor.core.data import get_task, load_split
    from compressor.core.models import checkpoint_meta, count_parameters, load_for_task, resolve_model, save_checkpoint
    from compressor.core.results import command_line, row, shown_path, write_results
    from compressor.engine.job import RecoveryJob
    from compressor.engine.teacher import frozen_copy
    from compressor.engine.train import TrainConfig, fit, set_seed
    from compressor.export.onnx import export_onnx
    from compressor.lowrank import factorise_
    from compressor.lowrank.config import LowRankConfig

    torch.set_num_threads(2)
    start = time.perf_counter()
    task = get_task("sst2")
    energies = [float(e) for e in args.energies.split(",")]
    targets = args.targets.split(",")
    recover_at = energies if not args.recover_energies else [float(e) for e in args.recover_energies.split(",")]
    os.makedirs(args.work, exist_ok=True)
    train = load_split(task, "train", data_dir=args.data_dir, limit=args.train_rows)
    recover_rows = load_split(task, "train", data_dir=args.data_dir, limit=args.recover_rows)
    dev = load_split(task, "dev", data_dir=args.data_dir, limit=args.dev_limit)
    device = torch.device("cpu")
    timings = {}

    teacher_dir = args.teacher or os.path.join(args.work, "teacher")
    finetune = None
    if not os.path.isfile(os.path.join(teacher_dir, "compressor.json")):
        t = time.perf_counter()
        net, tok = load_for_task(resolve_model("minilm-l6"), task)
        set_seed(42)
        config = TrainConfig(epochs=1, lr=1e-4, batch_size=32, max_length=args.max_length, warmup=0.1,
                             device="cpu")
        result = fit(net, tok, train, dev, config, desc="finetune minilm-l6")
        save_checkpoint(net.cpu(), tok, teacher_dir, checkpoint_meta(task, args.max_length, "finetune"))
        finetune = {"model": "minilm-l6", "train_rows": len(train), "epochs": 1, "lr": 1e-4,
                    "batch_size": 32, "max_length": args.max_length, "score": result["best"]["score"],
                    "time_s": round(time.perf_counter() - t, 1)}
        log(f"fine-tuned minilm-l6 on {len(train)} rows: {result['best']['score']:.2f} "
            f"({finetune['time_s']} s)")
    teacher, tokenizer = load_for_task(teacher_dir, task)
    teacher.eval()
    frozen = frozen_copy(teacher)

    def config_for(target: str, energy: float) -> LowRankConfig:
        config = LowRankConfig(linears=target, energy=energy, only_if_smaller=False, min_rank=1,
                               max_length=args.max_length, device="cpu",
                               recover={"mode": "distill", "train": {
                                   "epochs": 1, "max_steps": args.recover_steps, "batch_size": 32,
                                   "lr": 1e-4, "warmup": 0.1}})
        config.check()
        return config

    def export(folder: str, name: str) -> dict:
        t = time.perf_counter()
        out = os.path.join(args.work, "onnx-" + name)
        manifest = export_onnx(folder, out, examples=dev.examples[:32], overwrite=True)
        timings[f"export {name}"] = round(time.perf_counter() - t, 1)
        return {"onnx": out, "parity_max_abs_logit_diff": manifest["parity"]["max_abs_logit_diff"],
                "fusions": manifest["optimization"]["fusions"]}

    base = RecoveryJob(copy.deepcopy(teacher), tokenizer, recover_rows, dev, config_for("ffn", 1.0), device)
    unfactorised = base.evaluate(desc="score unfactorised")
    log(f"unfactorised: {unfactorised['score']:.2f}")
    teacher_export = export(teacher_dir, "teacher")
    points = []
    for target in targets:
        for energy in energies:
            t = time.perf_counter()
            config = config_for(target, energy)
            set_seed(config.seed)
            job = RecoveryJob(copy.deepcopy(teacher), tokenizer, recover_rows, dev, config, device,
                              teacher=frozen, teacher_tokenizer=tokenizer)
            record = factorise_(job.model, config)
            linears = record["linears"]
            dense = sum(r["weights_dense"] for r in linears)
            kept = sum(r["weights_factorised"] for r in linears)
            no_recovery = job.evaluate(desc=f"score {target} {energy}")
            name = f"{target}-{energy}"
            folder = os.path.join(args.work, name)
            save_checkpoint(job.model.cpu(), tokenizer, folder, checkpoint_meta(task, args.max_length, "lowrank"))
            exported = export(folder, name)
            recovered = None
            if not args.no_recovery and energy in recover_at:
                job.recover(desc=f"recover {name}")
                recovered = job.evaluate(desc=f"score recovered {name}")
            point = {"target": target, "energy": energy, "name": name,
                     "ranks": [r["rank"] for r in linears], "full_ranks": [r["full_rank"] for r in linears],
                     "roles": [r["role"] for r in linears],
                     "mean_rank_share": round(sum(r["rank"] / r["full_rank"] for r in linears) / len(linears), 4),
                     "weights_kept": round(kept / dense, 4), "linear_weights_dense": dense,
                     "linear_weights_factorised": kept, "parameters": record["parameters_after"],
                     "score_no_recovery": round(no_recovery["score"], 2),
                     "score_recovered": round(recovered["score"], 2) if recovered else None,
                     "time_s": round(time.perf_counter() - t, 1), **exported}
            points.append(point)
            log(f"{name}: ranks {min(point['ranks'])}-{max(point['ranks'])}, weights {point['weights_kept']:.2f} "
                f"of dense, {point['score_no_recovery']:.2f} -> {point['score_recovered']} "
                f"({point['time_s']} s)")

    # latency: every export and the unfactorised one, batch 1, one thread, interleaved
    texts = sample_texts(dev.examples, args.sentences)
    specs = [Spec("teacher", teacher_export["onnx"], engine="onnxruntime", spinning=False)] + \
        [Spec(p["name"], p["onnx"], engine="onnxruntime", spinning=False) for p in points]
    runners = [build(s, threads=1) for s in specs]
    t = time.perf_counter()
    times = interleaved_latency(runners, texts, warmup=20)
    timings["latency"] = round(time.perf_counter() - t, 1)
    teacher_latency = percentiles(times["teacher"])
    for p in points:
        p["latency_ms"] = percentiles(times[p["name"]])
        p["latency_p50_ms"] = p["latency_ms"]["p50"]
    teacher_row = {"score": round(unfactorised["score"], 2), "latency_p50_ms": teacher_latency["p50"]}

    rows = [row("unfactorised", task.name, "accuracy", teacher_row["score"], teacher_row["score"],
                parameters=count_parameters(teacher), size_bytes=None, engine="onnxruntime", threads=1,
                batch_size=1, latency_ms=teacher_latency,
                extra={"fusions": teacher_export["fusions"],
                       "parity_max_abs_logit_diff": teacher_export["parity_max_abs_logit_diff"]})]
    for p in points:
        rows.append(row(p["name"], task.name, "accuracy", p["score_no_recovery"], teacher_row["score"],
                        parameters=p["parameters"], size_bytes=None, engine="onnxruntime", threads=1,
                        batch_size=1, latency_ms=p["latency_ms"],
                        extra={k: v for k, v in p.items() if k not in ("latency_ms", "onnx")}))
        log(f"{p['name']:16s} weights {p['weights_kept']:.2f}  acc {p['score_no_recovery']:6.2f} / "
            f"{p['score_recovered']}  p50 {p['latency_p50_ms']:.2f} ms (unfactorised {teacher_latency['p50']:.2f})")
    image = os.path.splitext(args.out)[0] + ".png"
    plot(points, teacher_row, image, f"{'minilm-l6' if not args.teacher else shown_path(args.teacher)}: "
         f"SVD factorisation by retained energy, SST-2 dev ({len(dev)} rows); "
         f"recovery {args.recover_steps} steps of distillation")
    write_results(args.out, rows, command=command_line(), fingerprint_info=fingerprint(), config={
        "teacher": shown_path(args.teacher) if args.teacher else "minilm-l6 fine-tuned here",
        "finetune": finetune, "method": "compressor.lowrank.factorise_ (by energy, only_if_smaller false)",
        "energies": energies, "targets": targets, "recover": {
            "mode": "distill (soft targets from the unfactorised model)", "rows": len(recover_rows),
            "steps": args.recover_steps, "batch_size": 32, "lr": 1e-4,
            "energies": recover_at} if not args.no_recovery else None,
        "dev": f"{dev.source} ({len(dev)} rows)", "max_length": args.max_length,
        "latency": f"ONNX Runtime, fused export, batch 1, 1 thread, {len(texts)} dev sentences interleaved",
        "plot": shown_path(image), "timings_s": timings,
        "wall_time_s": round(time.perf_counter() - start, 1)})
    log(f"wrote {args.out} and {image} in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
