"""Peak memory of one variant, measured in a fresh process (``python -m compressor.bench.memprobe``).

Reads ``{"spec": {...}, "texts": [...], "threads": N}`` on stdin, builds the
variant, runs each text at batch 1 and all of them as one batch, and prints
``{"peak_rss_mb": ..., "cuda_peak_mb": ...}``.
"""
import json
import resource
import sys


def peak_rss_mb() -> float:
    """This process's peak resident memory since its exec (``VmHWM``; ``ru_maxrss`` would count
    the parent's pages at fork time)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    job = json.load(sys.stdin)
    from compressor.bench.harness import GRAPH_ENGINES, Spec, build

    spec = Spec(**job["spec"])
    if spec.engine not in GRAPH_ENGINES:  # an onnxruntime or OpenVINO variant's process never loads torch
        import torch

        torch.set_num_threads(job["threads"])
    runner = build(spec, threads=job["threads"])
    for text in job["texts"]:
        runner.run(runner.encode([text]))
    runner.run(runner.encode(job["texts"]))
    runner.sync()
    out = {"peak_rss_mb": round(peak_rss_mb(), 1)}
    if spec.device.startswith("cuda"):
        import torch

        out["cuda_peak_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
