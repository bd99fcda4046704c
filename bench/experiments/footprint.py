"""Install footprint and resident memory of the torch-free runtime beside the PyTorch path.

    python -m bench.experiments.footprint EXPORT_FOLDER CHECKPOINT --out bench/results/runtime-footprint.json

Each path runs in a fresh process that loads the model and labels one
sentence: the ONNX ``Predictor`` inside an environment holding only
onnxruntime, tokenizers and numpy (``compressor.export.edge``), the PyTorch path in this
environment through ``compressor.core.models.load_for_task``.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

# both children: the peak resident memory (VmHWM: ru_maxrss would count the
# parent's pages at fork time) and the clock from before the first import
_PREAMBLE = """
import json, sys, time
def peak():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
t = time.perf_counter()
"""

ONNX_SNIPPET = _PREAMBLE + """from compressor.export.runtime import Predictor
p = Predictor(sys.argv[1], threads=1)
label = p.predict(["a gripping, funny and touching film"])[0]
import importlib.util
print(json.dumps({"label": label, "cold_start_s": time.perf_counter() - t,
                  "peak_rss_mb": peak(),
                  "torch_importable": importlib.util.find_spec("torch") is not None}))
"""

TORCH_SNIPPET = _PREAMBLE + """import torch
torch.set_num_threads(1)
from compressor.core.models import load_for_task
net, tok = load_for_task(sys.argv[1])
net.eval()
with torch.inference_mode():
    logits = net(**tok(["a gripping, funny and touching film"], return_tensors="pt")).logits
label = net.config.id2label[int(logits.argmax(-1))]
print(json.dumps({"label": label, "cold_start_s": time.perf_counter() - t,
                  "peak_rss_mb": peak()}))
"""


def measure(export_dir: str, checkpoint: str) -> list:
    from compressor.core.models import count_parameters, load_for_task, size_on_disk
    from compressor.core.results import row
    from compressor.export.edge import RUNTIME_PACKAGES, build_runtime_env, distribution_closure, install_bytes
    from compressor.export.onnx import read_manifest

    manifest = read_manifest(export_dir)
    params = count_parameters(load_for_task(checkpoint)[0])
    runtime_min = install_bytes(RUNTIME_PACKAGES)
    runtime_all = install_bytes(distribution_closure(RUNTIME_PACKAGES))
    torch_pkgs = distribution_closure(["torch", "transformers"])
    torch_all = install_bytes(torch_pkgs)
    with tempfile.TemporaryDirectory() as tmp:
        python = build_runtime_env(os.path.join(tmp, "env"))
        onnx = json.loads(subprocess.run([python, "-c", ONNX_SNIPPET, os.path.abspath(export_dir)],
                                         capture_output=True, text=True, check=True, cwd=tmp).stdout)
    pt = json.loads(subprocess.run([sys.executable, "-c", TORCH_SNIPPET, checkpoint], capture_output=True,
                                   text=True, check=True).stdout.strip().splitlines()[-1])
    task = manifest["task"]
    return [
        row("onnx-predictor", task, "accuracy", None, parameters=params,
            size_bytes=os.path.getsize(os.path.join(export_dir, "model.onnx")), engine="onnxruntime",
            device="cpu", threads=1,
            extra={"install_bytes": sum(runtime_min.values()), "install_packages": runtime_min,
                   "install_bytes_with_declared_dependencies": sum(runtime_all.values()),
                   "peak_rss_mb": round(onnx["peak_rss_mb"], 1), "cold_start_s": round(onnx["cold_start_s"], 2),
                   "torch_importable": onnx["torch_importable"], "label": onnx["label"]}),
        row("pytorch", task, "accuracy", None, parameters=params, size_bytes=size_on_disk(checkpoint),
            engine="pytorch", device="cpu", threads=1,
            extra={"install_bytes": sum(torch_all.values()), "install_packages": torch_all,
                   "peak_rss_mb": round(pt["peak_rss_mb"], 1), "cold_start_s": round(pt["cold_start_s"], 2),
                   "label": pt["label"]}),
    ]


def main(argv=None) -> None:
    from compressor.core.results import command_line, write_results

    parser = argparse.ArgumentParser(prog="python -m bench.experiments.footprint")
    parser.add_argument("export_dir")
    parser.add_argument("checkpoint")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    rows = measure(args.export_dir, args.checkpoint)
    write_results(args.out, rows, command=command_line(["python", "-m", "bench.experiments.footprint"] + (argv or sys.argv[1:])))
    for r in rows:
        e = r["extra"]
        print(f"{r['name']:<16} install {e['install_bytes'] / 1e6:7.1f} MB  peak RSS {e['peak_rss_mb']:7.1f} MB  "
              f"cold start {e['cold_start_s']:.2f} s  label {e['label']}")


if __name__ == "__main__":
    main()
