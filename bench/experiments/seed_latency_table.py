"""The seed systems' latency on the edge CPU beside their GLUE-5 scores (issue 14): the shapes timed
by ``bench/experiments/mpnet_seed_latency.sh`` (copies, untrained heads) joined with the seed runs'
GLUE-5 scores from ``summary.json`` (``bench/experiments/mpnet_glue5_summary.py``).

    python -m bench.experiments.seed_latency_table bench/results/mpnet-glue5

Writes ``seed-latency/summary.md`` and ``summary.json``, each to a temporary name and renamed.
A shape whose timing is missing is named as such; nothing is filled in.
"""
from __future__ import annotations

import argparse
import os
from typing import Optional, Sequence

from compressor.core.io import read_json, write_json, write_text
from compressor.core.results import read_results

# timed variant -> (the seed recipes of that shape, what the shape is)
SHAPES = (
    ("teacher", (), "the teacher, PyTorch FP32 (12 layers, hidden 768)"),
    ("ort-o2-int8", (), "optimum O2 + INT8 of the teacher (peer)"),
    ("teacher-int8", ("q8bert-qat", "q8bert-dynamic", "qbert-mixed-holdout"),
     "the teacher as fused INT8 (Q-BERT keeps some layers FP32: slower than this)"),
    ("albert-int8", ("albert-share",), "ALBERT-style sharing: 12 layers of compute, rank-128 embedding"),
    ("mobilebert12-int8", ("mobilebert-progressive",), "12 layers, hidden 384, FFN 1536"),
    ("student6-int8", ("distilbert-6l", "theseus-6l", "pkd-6l"), "6 of the teacher's layers"),
    ("minilm6-int8", ("minilm-6l",), "6 layers, hidden 384, FFN 1536"),
    ("pd-minilm-int8", ("pd-minilm-l6",), "the pre-trained MiniLM-L6 (BERT, 6 layers, hidden 384)"),
    ("tinybert4-int8", ("tinybert-4l",), "4 layers, hidden 312, FFN 1200"),
    ("chain-int8", (), "the headline's chain, SST-2's shape (pipeline7; its scores: the pipeline table)"),
)
TEACHER = "teacher"


def table(root: str) -> dict:
    bench = read_results(os.path.join(root, "seed-latency", "bench-sst2-cpu.json"))
    summary = read_json(os.path.join(root, "summary.json"))
    glue5 = summary.get("glue5") or {}
    timed = {(r["name"], r["threads"]): r for r in bench["rows"] if r.get("batch_size") == 1 and r.get("latency_ms")}
    threads = sorted({t for _, t in timed})
    teachers = []   # the GLUE-5 of the teachers each recipe's runs were scored against
    rows = []
    for name, recipes, what in SHAPES:
        scores = []
        for recipe in recipes:
            g = glue5.get(f"seeds_{recipe}")
            if g and g.get("glue5") is not None:
                scores.append({"recipe": recipe, "glue5": g["glue5"], "retention": g.get("retention")})
                teachers.append(g.get("teacher_glue5"))
        p50 = {t: timed[name, t]["latency_ms"]["p50"] for t in threads if (name, t) in timed}
        size = next((timed[name, t].get("size_bytes") for t in threads if (name, t) in timed), None)
        params = next((timed[name, t].get("parameters") for t in threads if (name, t) in timed), None)
        rows.append({"variant": name, "what": what, "recipes": scores, "p50_ms": p50,
                     "size_bytes": size, "parameters": params})
    base = next(r for r in rows if r["variant"] == TEACHER)["p50_ms"]
    for r in rows:
        r["speedup_teacher"] = {t: base[t] / p for t, p in r["p50_ms"].items() if t in base}
    teachers = [x for x in teachers if x is not None]
    return {"threads": threads, "rows": rows, "teacher_glue5": [min(teachers), max(teachers)] if teachers else None,
            "command": bench.get("command"), "fingerprint": bench.get("fingerprint") or {}}


def markdown(t: dict) -> str:
    th = t["threads"]
    lines = ["# The seed systems' shapes on the edge CPU", "",
             "Batch 1 over 100 SST-2 dev sentences, each variant in its own process, timed in rounds, on "
             "copies with each seed system's shape (heads trained 25 steps: latency only); GLUE-5 is the seed runs' dev score "
             "(`seeds/`, retention against their own teachers"
             + (", whose GLUE-5 is {:.2f}-{:.2f}".format(*t["teacher_glue5"]) if t["teacher_glue5"] else "") + ").", "",
             "| shape | parameters | size (MB) | " + " | ".join(f"p50 ms, {n} thread{'s' if n > 1 else ''}" for n in th)
             + f" | vs PyTorch teacher ({th[0]} thread{'s' if th[0] > 1 else ''}) | seed recipes: GLUE-5 (retention) |",
             "|---|---:|---:|" + "---:|" * len(th) + "---:|---|"]
    for r in t["rows"]:
        p50 = " | ".join(f"{r['p50_ms'][n]:.2f}" if n in r["p50_ms"] else "not timed" for n in th)
        speed = r["speedup_teacher"].get(th[0])
        recipes = "; ".join(f"`{s['recipe']}` {s['glue5']:.2f}"
                            + (f" ({100 * s['retention']:.1f}%)" if s.get("retention") else "") for s in r["recipes"])
        size = f"{r['size_bytes'] / 1e6:.1f}" if r["size_bytes"] else ""
        params = f"{r['parameters'] / 1e6:.1f}M" if r["parameters"] else ""
        lines.append(f"| {r['what']} | {params} | {size} | {p50} | {f'{speed:.1f}x' if speed else ''} | {recipes} |")
    fp = t["fingerprint"]
    lines += ["", f"Machine: {fp.get('processor', '?')}, {fp.get('cores', '?')} cores, preset "
              f"`{fp.get('cpu_preset', '?')}`.", "", f"Measured by: `{t['command']}`", ""]
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root")
    args = parser.parse_args(argv)
    t = table(args.root)
    out = os.path.join(args.root, "seed-latency")
    write_json(os.path.join(out, "summary.json"),
               {**t, "rows": [{**r, "p50_ms": {str(k): v for k, v in r["p50_ms"].items()},
                               "speedup_teacher": {str(k): v for k, v in r["speedup_teacher"].items()}}
                              for r in t["rows"]]})
    write_text(os.path.join(out, "summary.md"), markdown(t))
    print(f"written: {os.path.join(out, 'summary.md')}")
    return t


if __name__ == "__main__":
    main()
