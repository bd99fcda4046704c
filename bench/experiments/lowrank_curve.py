"""Low-rank factorisation of a task model: rank against spectral energy, dev score and CPU latency.

For the FFN Linears (input and output) and for the attention Linears (query, key, value,
output) in turn, each Linear W becomes two, ``up(down(x))``, from its truncated SVD
(``compressor.lowrank.factorise_``), each Linear at the smallest rank keeping ``energy`` of its
squared singular values, energies 1.0, 0.95, 0.9, 0.8 and 0.6 (``only_if_smaller: false``:
every Linear is factorised, even where the two factors hold more weights than W, so the
cost of a high rank shows). Each point is scored on the dev rows as it is (no recovery) and
after a short distillation recovery from the unfactorised model (``RecoveryJob.recover``,
soft targets, ``--recover-steps`` steps), and exported to ONNX (the toolkit's export:
optimum, onnxruntime's fusions, parity on a few dev rows); batch-1 latency of every export
and the unfactorised model's export, each in a process of its own timed in rounds
(``compressor.bench.harness.isolated_latency``, as ``compressor bench`` times variants), over
real dev inputs, with the load average before and after. The unfactorised model's spectrum
(each Linear's retained energy against its rank) is in the results whatever else is run.

The model is ``--teacher``: a task checkpoint of any architecture the toolkit's loaders know
(BERT, MPNet, ...; a bare encoder gets a new, untrained head, seeded), for ``--task`` (any GLUE
task: sst2, mrpc, rte, cola, stsb, ...); ``--every-other-layer`` keeps its layers 0, 2, 4, ...
first (the layer-cut student before training). Without ``--teacher``, MiniLM-L6 is fine-tuned
briefly here on a slice of the task's training rows. ``--no-score`` skips every dev score (a
model with an untrained head: its scores mean nothing). Writes ``compressor.core.results``
JSON and a PNG.

    flock /tmp/compressor-cpu.lock .venv/bin/python -m bench.experiments.lowrank_curve \\
        --work /tmp/lowrank-curve --out bench/results/lowrank-curve-minilm-l6-sst2-cpu.json

MPNet-base cut to 6 layers with a random head (spectrum and latency only; later, ``--teacher``
a trained MPNet 6-layer student without ``--every-other-layer`` or ``--no-score``):

    flock -x /tmp/cpu.lock .venv/bin/python -m bench.experiments.lowrank_curve --teacher /tmp/mpnet \\
        --every-other-layer --task sst2 --no-score --no-recovery --work /tmp/lowrank-mpnet6 \\
        --out bench/results/lowrank-curve-mpnet6-sst2-cpu.json
"""
from __future__ import annotations

import argparse
import copy
import math
import os
import sys
import time

ENERGIES = (1.0, 0.95, 0.9, 0.8, 0.6)
TARGETS = ("ffn", "attention")
RANK_SHARES = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
SPECTRUM_ENERGIES = (0.6, 0.8, 0.9, 0.95, 0.99)


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def spectrum_summary(model) -> dict:
    """Per Linear role (query, key, value, attention_output, ffn_in, ffn_out), over the layers:
    the mean share of squared singular values kept at each share of the full rank, the mean
    rank share each energy needs, and the rank share where the two factors hold as many
    weights as the dense matrix (above it factorising adds weights)."""
    from compressor.core.lowrank import (
        ROLES,
        energy_kept,
        full_rank,
        linears_of,
        rank_for_energy,
        spectrum,
    )

    by_role: dict = {}
    for target in linears_of(model, ROLES):
        linear = target["module"]
        s = spectrum(linear)[1]
        kept, full = energy_kept(s), full_rank(linear)
        entry = by_role.setdefault(target["role"], {"linears": 0, "shape": [linear.out_features, linear.in_features],
                                                     "at": [[] for _ in RANK_SHARES],
                                                     "needs": [[] for _ in SPECTRUM_ENERGIES]})
        entry["linears"] += 1
        for i, share in enumerate(RANK_SHARES):
            entry["at"][i].append(float(kept[max(1, math.ceil(share * full)) - 1]))
        for i, energy in enumerate(SPECTRUM_ENERGIES):
            entry["needs"][i].append(rank_for_energy(s, energy) / full)
    out = {}
    for role, e in by_role.items():
        rows, cols = e["shape"]
        out[role] = {"linears": e["linears"], "shape": e["shape"],
                     "energy_at_rank_share": {str(r): round(sum(v) / len(v), 4) for r, v in zip(RANK_SHARES, e["at"])},
                     "rank_share_for_energy": {str(x): round(sum(v) / len(v), 4)
                                               for x, v in zip(SPECTRUM_ENERGIES, e["needs"])},
                     "break_even_rank_share": round(rows * cols / ((rows + cols) * min(rows, cols)), 4)}
    return out


def plot(points: list, teacher: dict, spectra: dict, path: str, title: str, metric: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from compressor.core.io import save_figure

    scored = teacher["score"] is not None
    panels = 3 if scored else 2
    fig, axes = plt.subplots(1, panels, figsize=(5.5 * panels, 4.4))
    spec_ax, lat_ax = axes[0], axes[-1]
    for role, e in spectra.items():
        xs = [float(r) for r in e["energy_at_rank_share"]]
        line, = spec_ax.plot(xs, list(e["energy_at_rank_share"].values()), marker=".", label=role)
        spec_ax.axvline(e["break_even_rank_share"], color=line.get_color(), lw=0.6, ls=":")
    spec_ax.set_xlabel("rank / full rank (dotted: the factors as large as W)")
    spec_ax.set_ylabel("share of squared singular values kept (mean of layers)")
    for target, marker in zip(TARGETS, "os"):
        mine = [p for p in points if p["target"] == target]
        xs = [p["weights_kept"] for p in mine]
        lat_ax.plot(xs, [p["latency_p50_ms"] for p in mine], marker=marker, label=target)
        for p in mine:
            lat_ax.annotate(str(p["energy"]), (p["weights_kept"], p["latency_p50_ms"]), fontsize=7)
        if scored:
            axes[1].plot(xs, [p["score_no_recovery"] for p in mine], marker=marker, ls="--",
                         label=f"{target}, no recovery")
            done = [p for p in mine if p["score_recovered"] is not None]
            axes[1].plot([p["weights_kept"] for p in done], [p["score_recovered"] for p in done],
                         marker=marker, label=f"{target}, recovered")
    lat_ax.axhline(teacher["latency_p50_ms"], color="k", lw=1, ls=":", label="unfactorised")
    lat_ax.set_xlabel("weights of the factorised Linears / dense (labels: energy)")
    lat_ax.set_ylabel(f"p50 ms, batch 1, {teacher['threads']} thread(s), ONNX Runtime")
    if scored:
        axes[1].axhline(teacher["score"], color="k", lw=1, ls=":", label=f"unfactorised ({teacher['score']:.1f})")
        axes[1].set_xlabel("weights of the factorised Linears / dense")
        axes[1].set_ylabel(f"dev {metric}")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    save_figure(fig, path, dpi=120)


def teacher_folder(args, task, train, dev) -> tuple:
    """The unfactorised model's checkpoint folder, made here when needed, and how it was made."""
    import torch
    from torch import nn

    from compressor.core.arch import arch_of
    from compressor.core.models import (
        checkpoint_meta,
        load_for_task,
        resolve_model,
        save_checkpoint,
    )
    from compressor.engine.train import TrainConfig, fit, set_seed

    if args.teacher is None:
        folder = os.path.join(args.work, "teacher")
        if os.path.isfile(os.path.join(folder, "compressor.json")):
            return folder, None
        t = time.perf_counter()
        net, tok = load_for_task(resolve_model("minilm-l6"), task)
        set_seed(42)
        config = TrainConfig(epochs=1, lr=1e-4, batch_size=32, max_length=args.max_length, warmup=0.1,
                             device="cpu")
        result = fit(net, tok, train, dev, config, desc="finetune minilm-l6")
        save_checkpoint(net.cpu(), tok, folder, checkpoint_meta(task, args.max_length, "finetune"))
        made = {"model": "minilm-l6", "train_rows": len(train), "epochs": 1, "lr": 1e-4,
                "batch_size": 32, "max_length": args.max_length, "score": result["best"]["score"],
                "time_s": round(time.perf_counter() - t, 1)}
        log(f"fine-tuned minilm-l6 on {len(train)} rows: {result['best']['score']:.2f} ({made['time_s']} s)")
        return folder, made
    ready = os.path.isfile(os.path.join(args.teacher, "compressor.json"))
    if ready and not args.every_other_layer:
        return args.teacher, None   # a task checkpoint, used as it is
    folder = os.path.join(args.work, "teacher")
    torch.manual_seed(args.seed)   # a bare encoder's new head
    net, tok = load_for_task(args.teacher, task)
    made = {"from": args.teacher, "head": "the checkpoint's" if ready else f"new, untrained (seed {args.seed})"}
    arch = arch_of(net)
    layers = arch.get_layers(net)
    if args.every_other_layer:
        kept = list(range(0, len(layers), 2))
        arch.set_layers(net, nn.ModuleList(layers[i] for i in kept))
        made["layers_kept"] = kept
    save_checkpoint(net.eval(), tok, folder, checkpoint_meta(task, args.max_length, "lowrank-curve teacher"))
    log(f"teacher: {args.teacher} -> {folder} ({made})")
    return folder, made


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="results JSON to write (the plot beside it, .png)")
    ap.add_argument("--work", required=True, help="folder for the teacher, checkpoints and exports")
    ap.add_argument("--task", default="sst2", help="the GLUE task: rows, metric and head size [sst2]")
    ap.add_argument("--teacher", help="a task checkpoint or encoder folder of any architecture the loaders "
                                      "know (default: fine-tune minilm-l6 here)")
    ap.add_argument("--every-other-layer", action="store_true", help="keep the teacher's layers 0, 2, 4, ...")
    ap.add_argument("--seed", type=int, default=0, help="a bare encoder's new head")
    ap.add_argument("--data-dir", default=os.environ.get("GLUE_DIR") or "../shared/glue_data")
    ap.add_argument("--train-rows", type=int, default=2000, help="training rows to fine-tune on (no --teacher)")
    ap.add_argument("--recover-rows", type=int, default=512, help="training rows recovery sees")
    ap.add_argument("--recover-steps", type=int, default=16, help="recovery steps (batch 32)")
    ap.add_argument("--dev-limit", type=int, default=None, help="dev rows scored (default: all)")
    ap.add_argument("--energies", default=",".join(map(str, ENERGIES)))
    ap.add_argument("--targets", default=",".join(TARGETS))
    ap.add_argument("--sentences", type=int, default=200, help="dev inputs timed per variant")
    ap.add_argument("--threads", type=int, default=1, help="threads per timed variant")
    ap.add_argument("--max-length", type=int, default=None,
                    help="tokens per input (default: 64 for single sentences, 128 for pairs)")
    ap.add_argument("--recover-energies", help="energies that get a recovery (default: every one)")
    ap.add_argument("--no-recovery", action="store_true", help="score the factorised models only")
    ap.add_argument("--no-score", action="store_true",
                    help="no dev scores at all (an untrained head: spectrum and latency only)")
    args = ap.parse_args()

    import torch

    from compressor.bench.harness import (
        BenchConfig,
        Spec,
        fingerprint,
        isolated_latency,
        percentiles,
        sample_texts,
    )
    from compressor.core.data import get_task, load_split
    from compressor.core.models import (
        checkpoint_meta,
        count_parameters,
        load_for_task,
        save_checkpoint,
    )
    from compressor.core.results import command_line, row, shown_path, write_results
    from compressor.engine.job import RecoveryJob
    from compressor.engine.teacher import frozen_copy
    from compressor.engine.train import set_seed
    from compressor.export.onnx import export_onnx
    from compressor.lowrank import factorise_
    from compressor.lowrank.config import LowRankConfig

    torch.set_num_threads(2)
    start = time.perf_counter()
    task = get_task(args.task)
    if args.max_length is None:
        args.max_length = 64 if len(task.text_fields) == 1 else 128
    energies = [float(e) for e in args.energies.split(",")]
    targets = args.targets.split(",")
    recovery = not (args.no_recovery or args.no_score)
    recover_at = energies if not args.recover_energies else [float(e) for e in args.recover_energies.split(",")]
    os.makedirs(args.work, exist_ok=True)
    needs_train = recovery or args.teacher is None
    train = load_split(task, "train", data_dir=args.data_dir, limit=args.train_rows) if needs_train else None
    recover_rows = load_split(task, "train", data_dir=args.data_dir, limit=args.recover_rows) if needs_train else None
    dev = load_split(task, "dev", data_dir=args.data_dir, limit=args.dev_limit)
    device = torch.device("cpu")
    timings = {}

    teacher_dir, made = teacher_folder(args, task, train, dev)
    teacher, tokenizer = load_for_task(teacher_dir, task)
    teacher.eval()
    frozen = frozen_copy(teacher)
    spectra = spectrum_summary(teacher)
    for role, e in spectra.items():
        log(f"spectrum {role:16s} {e['shape']}: rank share for 0.9 energy {e['rank_share_for_energy']['0.9']}, "
            f"break-even {e['break_even_rank_share']}")

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

    unfactorised = None
    if not args.no_score:
        base = RecoveryJob(copy.deepcopy(teacher), tokenizer, recover_rows, dev, config_for("ffn", 1.0), device)
        unfactorised = round(base.evaluate(desc="score unfactorised")["score"], 2)
        log(f"unfactorised: {unfactorised:.2f}")
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
            no_recovery = None if args.no_score else job.evaluate(desc=f"score {target} {energy}")
            name = f"{target}-{energy}"
            folder = os.path.join(args.work, name)
            save_checkpoint(job.model.cpu(), tokenizer, folder, checkpoint_meta(task, args.max_length, "lowrank"))
            exported = export(folder, name)
            recovered = None
            if recovery and energy in recover_at:
                job.recover(desc=f"recover {name}")
                recovered = job.evaluate(desc=f"score recovered {name}")
            point = {"target": target, "energy": energy, "name": name,
                     "ranks": [r["rank"] for r in linears], "full_ranks": [r["full_rank"] for r in linears],
                     "roles": [r["role"] for r in linears],
                     "energies_kept": [r["energy"] for r in linears],
                     "mean_rank_share": round(sum(r["rank"] / r["full_rank"] for r in linears) / len(linears), 4),
                     "weights_kept": round(kept / dense, 4), "linear_weights_dense": dense,
                     "linear_weights_factorised": kept, "parameters": record["parameters_after"],
                     "score_no_recovery": round(no_recovery["score"], 2) if no_recovery else None,
                     "score_recovered": round(recovered["score"], 2) if recovered else None,
                     "time_s": round(time.perf_counter() - t, 1), **exported}
            points.append(point)
            log(f"{name}: ranks {min(point['ranks'])}-{max(point['ranks'])}, weights {point['weights_kept']:.2f} "
                f"of dense, score {point['score_no_recovery']} -> {point['score_recovered']} ({point['time_s']} s)")

    # latency: every export and the unfactorised one, batch 1, each in its own process, in rounds
    texts = sample_texts(dev.examples, args.sentences)
    specs = [Spec("teacher", teacher_export["onnx"], engine="onnxruntime")] + \
        [Spec(p["name"], p["onnx"], engine="onnxruntime") for p in points]
    bench = BenchConfig()
    t = time.perf_counter()
    load_before = os.getloadavg()
    times = isolated_latency(specs, texts, args.threads, bench)
    load_after = os.getloadavg()
    timings["latency"] = round(time.perf_counter() - t, 1)
    teacher_latency = percentiles(times["teacher"])
    for p in points:
        p["latency_ms"] = percentiles(times[p["name"]])
        p["latency_p50_ms"] = p["latency_ms"]["p50"]
        p["speedup_p50"] = round(teacher_latency["p50"] / p["latency_p50_ms"], 3)
        p["speedup_mean"] = round(teacher_latency["mean"] / p["latency_ms"]["mean"], 3)
    teacher_row = {"score": unfactorised, "latency_p50_ms": teacher_latency["p50"], "threads": args.threads}

    metric = "+".join(task.metrics)
    rows = [row("unfactorised", task.name, metric, unfactorised, unfactorised,
                parameters=count_parameters(teacher), size_bytes=None, engine="onnxruntime",
                threads=args.threads, batch_size=1, latency_ms=teacher_latency,
                extra={"fusions": teacher_export["fusions"],
                       "parity_max_abs_logit_diff": teacher_export["parity_max_abs_logit_diff"]})]
    for p in points:
        rows.append(row(p["name"], task.name, metric, p["score_no_recovery"], unfactorised,
                        parameters=p["parameters"], size_bytes=None, engine="onnxruntime", threads=args.threads,
                        batch_size=1, latency_ms=p["latency_ms"],
                        extra={k: v for k, v in p.items() if k not in ("latency_ms", "onnx")}))
        log(f"{p['name']:16s} weights {p['weights_kept']:.2f}  score {p['score_no_recovery']} / "
            f"{p['score_recovered']}  p50 {p['latency_p50_ms']:.2f} ms (unfactorised {teacher_latency['p50']:.2f}, "
            f"x{p['speedup_p50']})")
    image = os.path.splitext(args.out)[0] + ".png"
    name = shown_path(args.teacher) if args.teacher else "minilm-l6"
    if args.every_other_layer:
        name += ", every other layer"
    what = (f"{task.name} dev ({len(dev)} rows); recovery {args.recover_steps} steps of distillation" if recovery
            else f"{task.name} dev, no recovery" if not args.no_score
            else "no scores (untrained head): spectrum and latency only")
    plot(points, teacher_row, spectra, image, f"{name}: SVD factorisation by retained energy; {what}", metric)
    write_results(args.out, rows, command=command_line(), fingerprint_info=fingerprint(), config={
        "teacher": shown_path(args.teacher) if args.teacher else "minilm-l6 fine-tuned here",
        "teacher_made": made, "task": task.name,
        "scores": ("none: the head is untrained, so no score is claimed (spectrum and latency only)"
                   if args.no_score else "dev, as the rows say"),
        "method": "compressor.lowrank.factorise_ (by energy, only_if_smaller false)",
        "energies": energies, "targets": targets, "spectrum": spectra, "recover": {
            "mode": "distill (soft targets from the unfactorised model)", "rows": len(recover_rows),
            "steps": args.recover_steps, "batch_size": 32, "lr": 1e-4,
            "energies": recover_at} if recovery else None,
        "dev": f"{dev.source} ({len(dev)} rows)", "max_length": args.max_length,
        "latency": f"ONNX Runtime, fused export, batch 1, {args.threads} thread(s), {len(texts)} dev inputs; "
                   f"compressor.bench.harness.isolated_latency: a process per variant, rounds of {bench.block}, "
                   f"warm-up {bench.warmup}, pause {bench.pause_s} s",
        "load_average": {"before": [round(v, 2) for v in load_before], "after": [round(v, 2) for v in load_after]},
        "plot": shown_path(image), "timings_s": timings,
        "wall_time_s": round(time.perf_counter() - start, 1)})
    log(f"wrote {args.out} and {image} in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
