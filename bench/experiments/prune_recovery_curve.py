"""The figures of ``bench/experiments/prune_recovery_curve.sh``: for each share removed, the
score before recovery (no choice made) and after (best of the recovery's dev evaluations),
as a results file and a plot beside it (same name, ``.png``). ``write_curve`` makes the same
file from other runs (bench/experiments/minilm_family_summary.py).

    python -m bench.experiments.prune_recovery_curve WORK OUT_JSON "COMMAND"
"""
import json
import os
import sys


def main(work: str, out: str, command: str) -> dict:
    records = {float(share): json.load(open(os.path.join(work, share, "metrics.json")))
               for share in os.listdir(work)}
    return write_curve(records, out, command, selection="best-of-dev", base_name="unpruned-student",
                       title="demo student: structured pruning with and without recovery",
                       what="the demo's 3-layer student: heads and FFN neurons removed (same share "
                            "of each), before and after half an epoch of distillation recovery")


def write_curve(records: dict, out: str, command: str, selection: str, base_name: str, title: str,
                what: str) -> dict:
    """One results file and its plot from ``{share removed: the prune run's metrics.json}``;
    ``selection`` says how the recovered figure was chosen ("best-of-dev" or "none")."""
    from compressor.core.results import fingerprint, row, write_results

    points = []
    for share in sorted(records):
        record = records[share]
        step = record["pruning"]["steps"][-1]
        points.append({"share": share, "before": record["score_before"],
                       "pruned": step["pruned"]["score"], "recovered": step["recovered"]["score"],
                       "best_step": step["recovered"]["best_step"], "heads": step["heads"],
                       "ffn": step["ffn"], "parameters": record["parameters"]})
    base = round(points[0]["before"], 2)
    rows = [row(base_name, "sst2", "accuracy", base, size_bytes=None)]
    for p in points:
        for kind in ("pruned", "recovered"):
            rows.append(row(f"heads-ffn-{p['share']:g}-{'before-recovery' if kind == 'pruned' else 'recovered'}",
                            "sst2", "accuracy", round(p[kind], 2), base,
                            parameters=p["parameters"], size_bytes=None,
                            extra={"share_removed": p["share"], "heads": p["heads"], "ffn": p["ffn"],
                                   "selection": selection if kind == "recovered" else "none",
                                   **({"best_step": p["best_step"]} if kind == "recovered" else {})}))
    _plot(points, base, os.path.splitext(out)[0] + ".png", title, base_name, selection)
    return write_results(out, rows, command=command, fingerprint_info=fingerprint(), what=what)


def _plot(points, base, path, title, base_name, selection):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from compressor.core.io import save_figure

    x = [p["share"] for p in points]
    fig, ax = plt.subplots(figsize=(6.5, 4))
    ax.plot(x, [p["pruned"] for p in points], "o-", label="before recovery")
    chosen = " (best of dev)" if selection == "best-of-dev" else ""
    ax.plot(x, [p["recovered"] for p in points], "s-", label=f"after recovery{chosen}")
    ax.axhline(base, linestyle="--", color="black", label=f"{base_name.replace('-', ' ')} ({base:.2f})")
    ax.set_xlabel("share of heads and FFN neurons removed")
    ax.set_ylabel("SST-2 dev accuracy")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)


if __name__ == "__main__":
    main(*sys.argv[1:4])
