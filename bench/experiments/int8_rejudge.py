"""What the held-out INT8 choice (``quantize`` method ``auto``) would have picked under another
criterion, from the verdicts a run recorded: no graph is built or scored again.

Each ``RUN/NN-quantize/record.json`` lists every candidate it tried (``search.tried``) with its
score, drop and agreement with FP32 on the held-out rows and its measured latency. This applies
``--max-drop`` and ``--min-agreement`` to those figures (the measured drop, as ``confidence: 0``
does) and takes the fastest candidate that meets them, beside the recorded choice. The mixed
candidate is the one the run's own criterion built: a looser criterion could have kept fewer units
FP32, so where mixed is picked its unit count is an upper bound.

    python -m bench.experiments.int8_rejudge --records bench/results/accuracy-ablation-h200x1-int8 \\
        --run-name task2-iter2q0 --tasks cola,mrpc,rte --max-drop 0.3 --min-agreement 0.98 \\
        --out bench/results/accuracy-ablation-h200x1-int8/rejudge-agreement98.json
"""
from __future__ import annotations

import argparse
import os
import sys

from bench.experiments.jsonfiles import last_stage, read_or_none
from compressor.core.io import write_json


def rejudge(tried: list, max_drop: float, min_agreement: float, latency_margin: float = 0.0) -> dict:
    """The fastest of ``tried`` within ``max_drop`` and ``min_agreement`` (FP32 always meets); with
    ``latency_margin``, the one with the fewest FP32 units within that share of the fastest
    (``sensitivity.fastest_within``, as ``quantize`` method ``auto`` chooses since it has one)."""
    from compressor.quantize.sensitivity import fastest_within

    verdicts = []
    for cand in tried:
        why = []
        if cand["drop"] > max_drop + 1e-9:
            why.append(f"drop {cand['drop']:.2f} > {max_drop:g}")
        if cand["agreement"] < min_agreement:
            why.append(f"agreement {cand['agreement']:.4f} < {min_agreement:g}")
        verdicts.append({"name": cand["name"], "score": round(cand["score"], 4), "drop": round(cand["drop"], 4),
                         "agreement": cand["agreement"], "latency_ms": cand.get("latency_ms"),
                         "meets": not why or cand["name"] == "fp32", **({"why_not": "; ".join(why)} if why else {})})
    passed = [v for v in verdicts if v["meets"]]
    chosen = fastest_within(passed, latency_margin)
    return {"chosen": chosen["name"], "verdicts": verdicts}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", required=True, help="a results folder holding TASK-RUN/NN-quantize/record.json")
    parser.add_argument("--run-name", required=True)
    parser.add_argument("--tasks", default="cola,mrpc,rte")
    parser.add_argument("--max-drop", type=float, required=True)
    parser.add_argument("--min-agreement", type=float, required=True)
    parser.add_argument("--latency-margin", type=float, default=0.0,
                        help="fewer FP32 units first within this share of the fastest (auto's latency_margin); "
                             "0: the fastest, as auto chose before it had one")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    rows = {}
    for task in args.tasks.split(","):
        run = os.path.join(args.records, f"{task}-{args.run_name}")
        stage = last_stage(run, "quantize")
        record = read_or_none(os.path.join(run, stage, "record.json")) if stage else None
        tried = ((record or {}).get("search") or {}).get("tried")
        if not tried:
            print(f"{run}: no quantize record with the candidates it tried", file=sys.stderr)
            return 1
        rows[task] = {"recorded": record["search"]["chosen"], "recorded_criterion": record["search"]["criterion"],
                      **rejudge(tried, args.max_drop, args.min_agreement, args.latency_margin)}
    out = {"command": "python -m bench.experiments.int8_rejudge " + " ".join(argv if argv is not None else sys.argv[1:]),
           "criterion": {"max_drop": args.max_drop, "min_agreement": args.min_agreement, "confidence": 0,
                         "latency_margin": args.latency_margin},
           "tasks": rows}
    write_json(args.out, out)
    for task, row in rows.items():
        print(f"{task}: recorded {row['recorded']}, under this criterion {row['chosen']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
