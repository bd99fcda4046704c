"""A ``compressor prune`` run's ``metrics.json`` as a results file: the model before pruning
and after (its score and parameters), the method's record under ``extra``.

    python -m bench.experiments.prune_record RUN_FOLDER OUT_JSON "COMMAND THAT MADE IT"
"""
import json
import os
import sys


def main(folder: str, out: str, command: str) -> dict:
    from compressor.core.results import fingerprint, row, write_results

    record = json.load(open(os.path.join(folder, "metrics.json")))
    before = round(record["score_before"], 2)
    pruning = record["pruning"]
    summary = {k: v for k, v in pruning.items() if not isinstance(v, (list, dict))}
    rows = [row("before-pruning", record["task"], "accuracy", before,
                parameters=record["parameters_before"], size_bytes=None),
            row(f"{record['method']}-pruned", record["task"], "accuracy", round(record["score"], 2),
                before, parameters=record["parameters"], size_bytes=record.get("size_bytes"),
                extra={**summary, "recovery": pruning.get("recovery"),
                       "selection": "best-of-dev" if record["config"]["recover"]["mode"] != "none"
                       else "none"})]
    return write_results(out, rows, command=command, fingerprint_info=fingerprint(),
                         what=f"compressor prune --method {record['method']} of {record['model']}",
                         pruning=pruning, config=record["config"],
                         wall_time_s=record.get("wall_time_s"))


if __name__ == "__main__":
    main(*sys.argv[1:4])
