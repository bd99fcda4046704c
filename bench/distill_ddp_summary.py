"""The figures of ``bench/distill_ddp.sh``: training throughput and dev accuracy of each
distillation run (1 and 2 GPUs at the same global batch), the speed-up, and where they ran.

    python3 bench/distill_ddp_summary.py WORK_DIR OUT_DIR   ->  OUT_DIR/distill-ddp-mpnet.json
"""
import glob
import json
import os
import re
import sys


def main(work: str, out: str) -> dict:
    import accelerate
    import torch

    teacher = json.load(open(os.path.join(work, "teacher", "metrics.json")))
    runs = {}
    for folder in sorted(glob.glob(os.path.join(work, "student-b*-gpu*"))):
        record = json.load(open(os.path.join(folder, "metrics.json")))
        batch, gpus = map(int, re.findall(r"b(\d+)-gpu(\d+)", folder)[0])
        phase = record["phases"][-1]
        runs[f"b{batch}-gpu{gpus}"] = {
            "gpus": phase["processes"], "global_batch": batch, "epochs": record["config"]["epochs"],
            "steps": record["steps"], "train_rows": phase["train_rows"],
            "train_loop_s": phase["train_loop_s"], "samples_per_s": phase["samples_per_s"],
            "dev_accuracy": round(100 * record["metrics"]["accuracy"], 2),
            "best_step": record["best_step"],
            "history": [{"step": h["step"], "accuracy": round(100 * h["metrics"]["accuracy"], 2)}
                        for h in phase["history"]],
            "parameters": record["parameters"], "wall_time_s": record["wall_time_s"]}
    comparisons = {}
    for key, one in runs.items():
        two = runs.get(key.replace("gpu1", "gpu2")) if key.endswith("gpu1") else None
        if two:
            comparisons[key.split("-")[0]] = {
                "speedup": round(two["samples_per_s"] / one["samples_per_s"], 3),
                "accuracy_gap_points": round(two["dev_accuracy"] - one["dev_accuracy"], 2)}
    commands = open(os.path.join(out, "commands.txt")).read().splitlines()
    gpus = open(os.path.join(out, "gpus.txt")).read().splitlines()[1:] \
        if os.path.exists(os.path.join(out, "gpus.txt")) else []
    result = {
        "what": "MPNet-base SST-2 teacher distilled into a 6-layer student (every other layer, "
                "soft targets, teacher run on every batch), 1 GPU vs 2 GPUs data parallel at the "
                "same global batch; throughput = training rows / training-loop seconds "
                "(evaluation excluded)",
        "teacher": {"dev_accuracy": round(100 * teacher["metrics"]["accuracy"], 2),
                    "wall_time_s": teacher["wall_time_s"], "samples_per_s": teacher.get("samples_per_s"),
                    "epochs": teacher["config"]["epochs"], "lr": teacher["config"]["lr"],
                    "batch_size": teacher["config"]["batch_size"]},
        "runs": runs, "comparisons": comparisons, "commands": commands, "gpus": gpus,
        "versions": {**teacher["versions"], "accelerate": accelerate.__version__,
                     "nccl": ".".join(map(str, torch.cuda.nccl.version()))
                     if torch.cuda.is_available() else None},
        "env": {k: os.environ.get(k) for k in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST",
                                               "NVSHMEM_DISABLE_NVLS")},
    }
    with open(os.path.join(out, "distill-ddp-mpnet.json"), "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps({"teacher": result["teacher"], "comparisons": comparisons,
                      "runs": {k: {x: v[x] for x in ("samples_per_s", "dev_accuracy", "train_loop_s")}
                               for k, v in runs.items()}}, indent=1))
    return result


if __name__ == "__main__":
    main(*sys.argv[1:3])
