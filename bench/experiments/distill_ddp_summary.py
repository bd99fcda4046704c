"""The figures of ``bench/experiments/distill_ddp.sh`` as a results file: each distillation
run (1 or 2 GPUs at one global batch) is a row with its dev accuracy, and its training
throughput under ``extra``; the speed-ups and accuracy gaps are under ``comparisons``.

    python3 -m bench.experiments.distill_ddp_summary WORK_DIR OUT_DIR
        ->  OUT_DIR/distill-ddp-mpnet.json
"""
import glob
import json
import os
import re
import sys

WHAT = ("MPNet-base SST-2 teacher distilled into a 6-layer student (every other layer, soft "
        "targets, teacher run on every batch), 1 GPU vs 2 GPUs data parallel at the same global "
        "batch; train_rows_per_s = training rows / training-loop seconds (evaluation excluded); "
        "steady_rows_per_s = the same from the end of step steady_from_step on (the first "
        "steps' one-off costs left out)")


def run_summary(record: dict, batch: int) -> dict:
    """The figures of one run from its ``metrics.json``."""
    phase = record["phases"][-1]
    return {"gpus": phase["processes"], "global_batch": batch, "epochs": record["config"].get("train", record["config"])["epochs"],   # (flat before the train section)
            "steps": record["steps"], "train_rows": phase["train_rows"],
            "train_loop_s": phase["train_loop_s"], "train_rows_per_s": phase["samples_per_s"],
            "steady_rows_per_s": phase.get("steady_samples_per_s"),
            "steady_from_step": phase.get("steady_from_step"),
            "dev_accuracy": round(100 * record["metrics"]["accuracy"], 2),
            "best_step": record["best_step"],
            "history": [{"step": h["step"], "accuracy": round(100 * h["metrics"]["accuracy"], 2)}
                        for h in phase["history"]],
            "parameters": record["parameters"], "wall_time_s": record["wall_time_s"]}


def comparisons(runs: dict) -> dict:
    out = {}
    for key, one in runs.items():
        two = runs.get(key.replace("gpu1", "gpu2")) if "-gpu1" in key else None
        if two:
            out[key.replace("-gpu1", "")] = {
                "speedup": round(two["train_rows_per_s"] / one["train_rows_per_s"], 3),
                "accuracy_gap_points": round(two["dev_accuracy"] - one["dev_accuracy"], 2)}
            if one.get("steady_rows_per_s") and two.get("steady_rows_per_s"):
                out[key.replace("-gpu1", "")]["steady_speedup"] = round(
                    two["steady_rows_per_s"] / one["steady_rows_per_s"], 3)
    return out


def rows(teacher: dict, runs: dict) -> list:
    from compressor.core.results import row

    out = [row("mpnet-base-teacher", "sst2", "accuracy", teacher["dev_accuracy"],
               parameters=teacher.get("parameters"), size_bytes=None, device="cuda",
               extra={k: v for k, v in teacher.items() if k not in ("dev_accuracy", "parameters")})]
    for key, run in runs.items():
        out.append(row(f"student-6L-{key}", "sst2", "accuracy", run["dev_accuracy"],
                       teacher["dev_accuracy"], parameters=run["parameters"], size_bytes=None,
                       device="cuda", extra={k: v for k, v in run.items()
                                             if k not in ("dev_accuracy", "parameters")}))
    return out


def main(work: str, out: str) -> dict:
    import accelerate
    import torch

    from compressor.core.results import fingerprint, write_results

    teacher_record = json.load(open(os.path.join(work, "teacher", "metrics.json")))
    teacher = {"dev_accuracy": round(100 * teacher_record["metrics"]["accuracy"], 2),
               "parameters": teacher_record["parameters"],
               "wall_time_s": teacher_record["wall_time_s"],
               "train_rows_per_s": teacher_record.get("samples_per_s"),
               "epochs": teacher_record["config"]["epochs"], "lr": teacher_record["config"]["lr"],
               "batch_size": teacher_record["config"]["batch_size"]}
    runs = {}
    for folder in sorted(glob.glob(os.path.join(work, "student-b*-gpu*"))):
        batch, gpus, again = re.findall(r"b(\d+)-gpu(\d+)(-r\d+)?$", folder)[0]
        batch, gpus = int(batch), int(gpus)
        runs[f"b{batch}-gpu{gpus}{again}"] = run_summary(
            json.load(open(os.path.join(folder, "metrics.json"))), batch)
    # the work folder is named from the home folder on, as ~ (the same on any machine)
    home = os.path.expanduser("~")
    commands = [c.replace(home + "/", "~/") for c in
                open(os.path.join(out, "commands.txt")).read().splitlines()]
    gpus_file = os.path.join(out, "gpus.txt")
    gpus = open(gpus_file).read().splitlines()[1:] if os.path.exists(gpus_file) else []
    info = fingerprint()
    info["versions"]["accelerate"] = accelerate.__version__
    if torch.cuda.is_available():
        info["versions"]["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    compared = comparisons(runs)
    path = write_results(
        os.path.join(out, "distill-ddp-mpnet.json"), rows(teacher, runs),
        command=" && ".join(commands), fingerprint_info=info, what=WHAT, gpus=gpus,
        comparisons=compared,
        env={k: os.environ.get(k) for k in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST",
                                            "NVSHMEM_DISABLE_NVLS")})
    print(json.dumps({"teacher": teacher["dev_accuracy"], "comparisons": compared,
                      "runs": {k: {x: v[x] for x in ("train_rows_per_s", "steady_rows_per_s",
                                                     "dev_accuracy", "train_loop_s")}
                               for k, v in runs.items()}}, indent=1))
    return json.load(open(path))


if __name__ == "__main__":
    main(*sys.argv[1:3])
