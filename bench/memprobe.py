"""Peak memory of one variant, measured in a fresh process (``python -m bench.memprobe``).

Reads ``{"spec": {...}, "texts": [...], "threads": N}`` on stdin, builds the
variant, runs each text at batch 1 and all of them as one batch, and prints
``{"peak_rss_mb": ..., "cuda_peak_mb": ...}``.
"""
import json
import resource
import sys


def main() -> None:
    job = json.load(sys.stdin)
    import torch

    from .harness import Spec, build

    torch.set_num_threads(job["threads"])
    spec = Spec(**job["spec"])
    runner = build(spec, threads=job["threads"])
    for text in job["texts"]:
        runner.run(runner.encode([text]))
    runner.run(runner.encode(job["texts"]))
    runner.sync()
    out = {"peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
    if spec.device.startswith("cuda"):
        out["cuda_peak_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
