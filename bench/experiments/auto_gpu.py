"""Helpers of auto_gpu.sh (issue 34): the same trials for the one- and two-worker runs, and their summary.

    python3 -m bench.experiments.auto_gpu enqueue SEARCH_OUT JOURNAL N
        the first N finished trials of the search in SEARCH_OUT (their settings) put first in the
        study of the journal file JOURNAL (made if new): a run on that storage works them before it
        samples any, so the runs with one and with two workers build the same candidates
    python3 -m bench.experiments.auto_gpu scaling OUT W1 W2
        OUT/scaling.json: each run's trials, the span from its first trial's start to its last
        trial's end (report.json's search_seconds), its command's wall time (OUT/logs/wall.txt)
        and the speed-up of the two-worker run over the one-worker run
"""
from __future__ import annotations

import json
import os
import sys


def enqueue(search_out: str, journal: str, count: int) -> int:
    from compressor.auto.study import DIRECTIONS, STATE, open_storage, open_study, require_optuna

    optuna = require_optuna()
    state = json.load(open(os.path.join(search_out, STATE)))
    source, _ = open_study(state)
    done = [t for t in source.get_trials(deepcopy=False) if t.state.name == "COMPLETE"
            and t.user_attrs.get("same_as") is None][:count]
    storage = open_storage(f"journal:{journal}", os.path.dirname(os.path.abspath(journal)))
    study = optuna.create_study(storage=storage, study_name="auto", directions=list(DIRECTIONS), load_if_exists=True)
    for t in done:
        study.enqueue_trial(dict(t.params))
    print(f"{len(done)} trials of {search_out} enqueued in {journal}")
    return len(done)


def scaling(out: str, one: str, two: str) -> dict:
    walls = {}
    wall_file = os.path.join(out, "logs", "wall.txt")
    if os.path.exists(wall_file):
        for line in open(wall_file):
            name, seconds = line.split()[:2]
            walls[name] = float(seconds)
    runs = {}
    for name in (one, two):
        path = os.path.join(out, name, "report.json")
        if not os.path.exists(path):
            runs[name] = {"missing": path}
            continue
        report = json.load(open(path))
        runs[name] = {"trials": report["counts"], "search_seconds": report.get("search_seconds"),
                      "wall_seconds": walls.get(name),
                      "trial_seconds": [r.get("seconds") for r in report["trials"]],
                      "workers": sorted({r.get("worker") for r in report["trials"] if r.get("worker") is not None})}
    record = {"runs": runs}
    a, b = runs.get(one, {}).get("search_seconds"), runs.get(two, {}).get("search_seconds")
    if a and b:
        record["speedup"] = round(a / b, 3)
        record["target"] = "two workers on two GPUs finish a fixed number of trials >= 1.7x faster than one"
    with open(os.path.join(out, "scaling.json"), "w") as f:
        json.dump(record, f, indent=2)
    print(json.dumps({k: v for k, v in record.items() if k != "runs"}))
    return record


if __name__ == "__main__":
    what, *args = sys.argv[1:]
    if what == "enqueue":
        enqueue(args[0], args[1], int(args[2]))
    elif what == "scaling":
        scaling(*args)
    else:
        sys.exit(f"unknown command {what}: enqueue or scaling")
