"""The figures of ``bench/experiments/theseus_cpu.sh`` as a results file: the predecessor, and
each Theseus run (its final score is the best of its fine-tuning phase's dev evaluations,
a best-of-dev figure; every evaluation is under ``extra.history``).

    python -m bench.experiments.theseus_summary WORK OUT_JSON "COMMAND"
"""
import json
import os
import sys


def main(work: str, out: str, command: str) -> dict:
    from compressor.core.results import fingerprint, row, write_results

    rows = []
    for name in ("constant", "linear"):
        record = json.load(open(os.path.join(work, name, "metrics.json")))
        before = round(record["score_before"], 2)
        if not rows:
            rows.append(row("predecessor-6L", record["task"], "accuracy", before,
                            parameters=record["parameters_before"], size_bytes=None))
        history = [{"phase": p["phase"], "step": h["step"], "score": round(h["score"], 2)}
                   for p in record["phases"] for h in p["history"]]
        rows.append(row(f"theseus-3L-{name}", record["task"], "accuracy", round(record["score"], 2),
                        before, parameters=record["parameters"], size_bytes=record.get("size_bytes"),
                        extra={"schedule": record["config"]["schedule"],
                               "rate": record["config"]["rate"], "b": record["config"]["b"],
                               "replacing": record["phases"][0].get("replacing"),
                               "history": history, "selection": "best-of-dev (fine-tuning phase)",
                               "wall_time_s": record["wall_time_s"]}))
    return write_results(out, rows, command=command, fingerprint_info=fingerprint(),
                         what="BERT-of-Theseus, the demo's teacher (6 layers) to 3 layers on one "
                              "epoch of the packaged 16,000 SST-2 rows (half replacing, half "
                              "fine-tuning), task loss alone; constant p=0.5 and linear 0.3 -> 1")


if __name__ == "__main__":
    main(*sys.argv[1:4])
