"""Results files from the GPU runs of ``minilm_family_gpu.sh`` (PART=1, 2, 3) and
``mpnet_theseus_gpu.sh``, whose metrics.json files are kept as they came back under
``bench/results/minilm-family-h100/`` and ``bench/results/mpnet-theseus-h100/``.

Every run scored dev once, at its end (eval_every past the last step): no figure below was
chosen on dev, the teachers' included.

    python -m bench.experiments.minilm_family_summary [RESULTS_DIR]

writes, beside those folders: theseus-minilm-sst2-h100.json, theseus-mpnet-sst2-h100.json,
share-minilm-sst2-h100.json, embedding-rank-minilm-sst2-h100.json (+ .png),
prune-recovery-curve-minilm-h100.json (+ .png) and prune-magnitude-minilm-h100.json.
"""
import json
import os
import sys

FAMILY = "minilm-family-h100"
MPNET = "mpnet-theseus-h100"
GPU = "one NVIDIA H100, bf16 autocast, transformers 5.x (the device machine)"


def _load(folder: str, name: str) -> dict:
    return json.load(open(os.path.join(folder, f"{name}-metrics.json")))


def _command(results: str, folder: str) -> str:
    return f"see bench/results/{folder}/commands.txt; summary: python -m bench.experiments.minilm_family_summary"


def _model_row(name: str, record: dict, teacher: dict, **extra) -> dict:
    from compressor.core.results import row

    before = teacher["parameters"]
    return row(name, "sst2", "accuracy", round(record["score"], 2), round(teacher["score"], 2),
               parameters=record["parameters"], size_bytes=record.get("size_bytes"),
               extra={"parameters_fewer": round(1 - record["parameters"] / before, 4),
                      "selection": "none (last weights, one dev evaluation)", **extra})


def _teacher_row(name: str, teacher: dict) -> dict:
    from compressor.core.results import row

    return row(name, "sst2", "accuracy", round(teacher["score"], 2), parameters=teacher["parameters"],
               size_bytes=teacher.get("size_bytes"), extra={"selection": "none (last weights)"})


def theseus(results: str) -> None:
    from compressor.core.results import write_results

    fam = os.path.join(results, FAMILY)
    teacher = _load(fam, "teacher")
    rows = [_teacher_row("teacher-6L", teacher),
            _model_row("distilled-3L (kd, 3 epochs)", _load(fam, "student"), teacher,
                       wall_time_s=_load(fam, "student").get("wall_time_s"))]
    for sched in ("constant", "linear"):
        rec = _load(fam, f"theseus-{sched}")
        rows.append(_model_row(f"theseus-3L-{sched}", rec, teacher, schedule=sched,
                               rate=rec["config"]["rate"], b=rec["config"]["b"],
                               epochs="2 replacing + 1 successors alone", wall_time_s=rec.get("wall_time_s")))
    write_results(os.path.join(results, "theseus-minilm-sst2-h100.json"), rows,
                  command=_command(results, FAMILY), fingerprint_info={"machine": GPU},
                  what="BERT-of-Theseus, MiniLM-L6 SST-2 teacher (all of SST-2) to 3 layers, constant "
                       "p=0.5 and the linear curriculum from 0.3, beside the 3-layer student distilled "
                       "(soft targets, T=2) for the same 3 epochs; task loss alone for Theseus")
    mp = os.path.join(results, MPNET)
    teacher = _load(mp, "mpnet-teacher")
    rows = [_teacher_row("mpnet-base-12L", teacher)]
    for sched in ("constant", "linear"):
        rec = _load(mp, f"mpnet-theseus-{sched}")
        rows.append(_model_row(f"theseus-6L-{sched}", rec, teacher, schedule=sched, rate=rec["config"]["rate"],
                               b=rec["config"]["b"], epochs="2 replacing + 1 successors alone",
                               wall_time_s=rec.get("wall_time_s")))
    write_results(os.path.join(results, "theseus-mpnet-sst2-h100.json"), rows,
                  command=_command(results, MPNET), fingerprint_info={"machine": GPU},
                  what="BERT-of-Theseus, MPNet-base SST-2 teacher (one epoch, lr 2e-5) to 6 layers, "
                       "constant p=0.5 and the linear curriculum from 0.3, lr 5e-5, task loss alone")


SHARES = [("share-all-g2", "all layer weights, 3 groups of 2"),
          ("share-all", "all layer weights, one for the whole stack"),
          ("share-g2-e128", "all layer weights, 3 groups of 2; embedding rank 128"),
          ("share-all-g2-a32-e128", "all layer weights, 3 groups of 2, rank-32 adapters; embedding rank 128"),
          ("share-attention-g2-e128", "attention, 3 groups of 2; embedding rank 128"),
          ("share-ffn-g2-e128", "FFN, 3 groups of 2; embedding rank 128")]
RANKS = [32, 64, 80, 128, 256]


def sharing(results: str) -> None:
    from compressor.core.results import write_results

    fam = os.path.join(results, FAMILY)
    teacher = _load(fam, "teacher")
    rows = [_teacher_row("teacher", teacher)]
    for name, what in SHARES:
        rec = _load(fam, name)
        rows.append(_model_row(name, rec, teacher, shared=what, recovery="distill kd T=2 + hidden, 3 epochs",
                               wall_time_s=rec.get("wall_time_s")))
    write_results(os.path.join(results, "share-minilm-sst2-h100.json"), rows, command=_command(results, FAMILY),
                  fingerprint_info={"machine": GPU},
                  what="ALBERT-style sharing of the MiniLM-L6 SST-2 teacher, recovered by 3 epochs of "
                       "distillation from the unshared teacher; parameters and checkpoint bytes count "
                       "each shared tensor once")
    rows = [_teacher_row("teacher (rank 384, not factorised)", teacher)]
    for rank in RANKS:
        rec = _load(fam, f"embed-r{rank}")
        rows.append(_model_row(f"embedding-rank-{rank}", rec, teacher, rank=rank,
                               recovery="distill kd T=2, 1 epoch", wall_time_s=rec.get("wall_time_s")))
    out = os.path.join(results, "embedding-rank-minilm-sst2-h100.json")
    write_results(out, rows, command=_command(results, FAMILY), fingerprint_info={"machine": GPU},
                  what="the MiniLM-L6 SST-2 teacher's word embedding (30,522 x 384) factorised as "
                       "E1 (30,522 x r) E2 (r x 384) by truncated SVD, then one epoch of distillation")
    _rank_plot(rows, teacher, os.path.splitext(out)[0] + ".png")


def _rank_plot(rows, teacher, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from compressor.core.io import save_figure

    pts = [(r["extra"]["rank"], r["value"], r["parameters"]) for r in rows[1:]]
    fig, ax = plt.subplots(figsize=(6.5, 4))
    ax.plot([p[2] / 1e6 for p in pts], [p[1] for p in pts], "o-", label="factorised, 1 epoch of distillation")
    for rank, score, params in pts:
        ax.annotate(f"r={rank}", (params / 1e6, score), textcoords="offset points", xytext=(4, -10), fontsize=8)
    ax.axhline(teacher["score"], linestyle="--", color="black", label=f"teacher ({teacher['score']:.2f})")
    ax.axhline(0.98 * teacher["score"], linestyle=":", color="grey", label="98% of the teacher")
    ax.set_xlabel("parameters (millions)")
    ax.set_ylabel("SST-2 dev accuracy")
    ax.set_title("MiniLM-L6 SST-2: factorised embedding rank against accuracy", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)


def pruning(results: str) -> None:
    from bench.experiments.prune_recovery_curve import write_curve
    from compressor.core.results import write_results

    fam = os.path.join(results, FAMILY)
    records = {share: _load(fam, f"prune-{share:g}") for share in (0.25, 0.5, 0.75)}
    write_curve(records, os.path.join(results, "prune-recovery-curve-minilm-h100.json"),
                _command(results, FAMILY), selection="none", base_name="teacher",
                title="MiniLM-L6 SST-2 teacher: heads and FFN removed, before and after recovery",
                what="the MiniLM-L6 SST-2 teacher: the same share of heads (gradient importance) and FFN "
                     "neurons (Taylor) removed in one step, before and after one epoch of distillation "
                     "(kd T=2 + hidden states) from the unpruned teacher; one dev evaluation each")
    teacher = _load(fam, "teacher")
    rec = _load(fam, "magnitude90")
    write_results(os.path.join(results, "prune-magnitude-minilm-h100.json"),
                  [_teacher_row("teacher", teacher),
                   _model_row("magnitude-90%", rec, teacher, sparsity=rec.get("pruning", {}).get("sparsity"),
                              recovery="gradual (cubic) to 90% while distilling, kd T=2, 2 epochs",
                              wall_time_s=rec.get("wall_time_s"))],
                  command=_command(results, FAMILY), fingerprint_info={"machine": GPU},
                  what="90% of the MiniLM-L6 SST-2 teacher's encoder weights set to zero by magnitude "
                       "(global), ramped up on a cubic schedule over 2 epochs of distillation from the "
                       "dense teacher; the zeros stay in dense matrices")


def main(results: str = "bench/results") -> None:
    theseus(results)
    sharing(results)
    pruning(results)


if __name__ == "__main__":
    main(*sys.argv[1:2])
