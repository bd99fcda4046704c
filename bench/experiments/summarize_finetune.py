"""Print the fine-tuning results in bench/results as a markdown table (mean over seeds).

    python -m bench.experiments.summarize_finetune [bench/results]
"""
import glob
import json
import os
import statistics
import sys


def main(folder: str = "bench/results") -> None:
    runs = {}
    for path in sorted(glob.glob(os.path.join(folder, "finetune-*-seed*.json"))):
        with open(path) as f:
            for row in json.load(f)["rows"]:  # compressor-results/1: the record is the row's extra
                runs.setdefault(row["task"], []).append(row["extra"]["record"])
    print("| task | metric(s) | seeds | per seed | mean score |")
    print("|---|---|---|---|---:|")
    for task, records in runs.items():
        records.sort(key=lambda r: r["seed"])
        names = list(records[0]["metrics"])
        per_seed = "; ".join(
            f"{r['seed']}: " + "/".join(f"{100 * r['metrics'][n]:.2f}" for n in names) for r in records)
        mean = statistics.mean(r["score"] for r in records)
        print(f"| {task} | {'/'.join(names)} | {len(records)} | {per_seed} | {mean:.2f} |")


if __name__ == "__main__":
    main(*sys.argv[1:])
