"""Record a finished demo run (time and scores per stage) as a benchmark result.

    compressor demo --out runs/demo      # or: make demo
    python -m bench.record_demo runs/demo bench/results/demo-cpu.json
"""
import json
import os
import sys

from compressor.io import write_json


def main(run_dir: str = "runs/demo", result: str = "bench/results/demo-cpu.json") -> None:
    with open(os.path.join(run_dir, "manifest.json")) as f:
        manifest = json.load(f)
    stages = []
    for entry in manifest["stages"]:
        with open(os.path.join(run_dir, entry["dir"], "record.json")) as f:
            record = json.load(f)
        stages.append({k: record.get(k) for k in (
            "dir", "stage", "metrics", "score", "retention", "parameters", "size_bytes",
            "wall_time_s", "config", "train_examples", "versions")})
    write_json(result, {
        "name": "demo", "task": manifest["task"],
        "command": f"compressor demo --out {run_dir} && python -m bench.record_demo {run_dir} {result}",
        "total_wall_time_s": round(sum(s["wall_time_s"] or 0 for s in stages), 1),
        "stages": stages})
    for s in stages:
        print(f"{s['dir']}: score {s['score']:.2f} in {s['wall_time_s']:.0f} s")


if __name__ == "__main__":
    main(*sys.argv[1:])
