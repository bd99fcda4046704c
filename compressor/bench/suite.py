"""``compressor bench``: benchmark checkpoints, export folders and peers, side by side (each in a
process of its own, timed in rounds: ``compressor.bench.harness.benchmark``).

``run_benchmark`` is the public entry point; the recipe stage ``bench`` and the
command line both call it.
"""
from __future__ import annotations

import os
import sys
import time
from typing import List, Optional, Sequence

from compressor.core.errors import CompressorError

from compressor.bench.harness import (ENGINES, BenchConfig, Spec, benchmark, fingerprint, graph_size,
                                      timing_policy)
from compressor.bench.peers import DEFAULT_PEERS, peer_specs


def specs_for(path: str, name: Optional[str] = None, engines: Sequence[str] = ("pytorch",),
              precisions: Sequence[str] = ("fp32",), device: str = "cpu", group: str = "ours",
              source: Optional[str] = None, parameters: Optional[int] = None) -> List[Spec]:
    """The variants of one model: an export folder runs on onnxruntime, an OpenVINO IR folder on
    OpenVINO (the engine its kind's loader names), a checkpoint on each PyTorch engine and
    precision asked for."""
    from compressor.core.models import count_parameters, load_for_task, resolve_model, size_on_disk

    from compressor.export.onnx import is_export, read_manifest
    from compressor.export.runtime import is_segments

    name = name or os.path.basename(os.path.normpath(path))
    if is_segments(path):   # early exit: the segment chain, timed and scored as one model
        if device != "cpu":
            return []
        manifest = read_manifest(path)
        files = [os.path.join(path, seg["file"]) for seg in manifest["segments"]]

        def counted():   # read the graphs only when no count was given
            counts = [onnx_parameters(f) for f in files]
            return None if None in counts else sum(counts)

        return [Spec(name, path, "onnxruntime", manifest.get("precision", "fp32"), "cpu", group, source,
                     _first(parameters, manifest.get("parameters"), counted),
                     manifest.get("onnx_size_bytes") or sum(os.path.getsize(f) for f in files))]
    # a folder that runs on a graph engine (its kind's loader says which): an ONNX export on
    # onnxruntime, an OpenVINO IR folder on OpenVINO, as the peers of those engines run
    engine = "onnxruntime" if is_export(path) else _graph_engine(path)
    if engine is not None:
        if device != "cpu":
            return []  # this toolkit runs graphs on the CPU (onnxruntime's CPU provider, OpenVINO's CPU plugin)
        if engine == "openvino":   # its worker imports openvino: where it is missing, one line now
            from compressor.export.openvino_runtime import require

            require("openvino", f"{path} is an OpenVINO IR folder, which")
        manifest = read_manifest(path)
        model = os.path.join(path, manifest.get("model_file", "model.onnx"))
        return [Spec(name, path, engine, manifest.get("precision", "fp32"), "cpu", group, source,
                     _first(parameters, manifest.get("parameters"),
                            lambda: onnx_parameters(model) if engine == "onnxruntime" else None),
                     graph_size(model))]
    from compressor.bench.harness import _torch_quantized

    quantized = os.path.isdir(path) and _torch_quantized(path)
    if quantized:  # refuse a folder that cannot be loaded (a pickle where safetensors belong) up front
        from compressor.quantize.torch_int8 import check_quantized_folder

        check_quantized_folder(path)
    path = path if quantized else resolve_model(path)
    if parameters is None and not quantized:
        parameters = count_parameters(load_for_task(path)[0])
    size = size_on_disk(path)
    specs = []
    for engine in engines:
        if engine == "onnxruntime":
            continue
        if engine not in ENGINES:
            raise CompressorError(f"unknown engine {engine!r}; engines: {', '.join(ENGINES)}")
        for precision in ([_saved_precision(path)] if quantized else precisions):
            suffix = ("-compile" if engine == "pytorch-compile" else "") + \
                ("" if precision == "fp32" or quantized else f"-{precision}")
            specs.append(Spec(name + suffix, path, engine, precision, device, group, source,
                              parameters, size))
    return specs


def run_benchmark(models: Sequence[str] = (), teacher: Optional[str] = None,
                  peers: Sequence[str] = DEFAULT_PEERS, task: Optional[str] = None,
                  data_dir: Optional[str] = None, config: Optional[BenchConfig] = None,
                  engines: Sequence[str] = ("pytorch",), precisions: Sequence[str] = ("fp32",),
                  device: str = "cpu", work_dir: Optional[str] = None, out: Optional[str] = None,
                  preset: str = "auto", command: Optional[str] = None, dev=None,
                  specs: Optional[List[Spec]] = None, log=None, user_data=None) -> dict:
    """Benchmark ``models`` (folders; ``name=path`` names one), the ``teacher`` and its ``peers``.

    Returns the results document (``compressor.core.results`` format) and writes it
    to ``out`` when given. ``dev`` (a labelled dataset) replaces the task's dev split; a model
    trained on the user's files is scored on the dev file its ``compressor.json`` records, or on
    ``user_data``'s.
    """
    from compressor.core.data import load_for_model
    from compressor.core.results import write_results
    from compressor.engine.scoring import _task_for

    if log is None:   # each step with the seconds since the start: where a long run's time went
        started = time.monotonic()
        log = lambda msg: print(f"[{time.monotonic() - started:6.0f} s] {msg}", file=sys.stderr)  # noqa: E731
    config = config or BenchConfig()
    if device not in ("cpu", "cuda"):
        raise CompressorError(f"device must be cpu or cuda, got {device!r}")
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise CompressorError("device cuda asked for, but no CUDA device is available")
    if teacher and peers:
        from compressor.bench.peers import check_peers

        check_peers(peers, preset)
    specs = list(specs or [])
    if teacher:
        specs += specs_for(teacher, "teacher", engines, precisions, device, group="teacher",
                           source="teacher")
    for item in models:
        name, _, path = item.rpartition("=") if "=" in item else (None, "", item)
        if not os.path.exists(path):
            raise CompressorError(f"model not found: {path}")
        found = specs_for(path, name or None, engines, precisions, device)
        if not found:   # a graph folder: this toolkit runs graphs on the CPU only
            log(f"{path} is a graph folder (ONNX or OpenVINO), run on the CPU only: left out of this "
                f"--device {device} run (bench it with --device cpu)")
        specs += found
    if teacher and "pytorch-fp32" in peers and any(s.group == "teacher" and s.engine == "pytorch"
                                                   and s.precision == "fp32" for s in specs):
        # the teacher in eager FP32 is that peer: time it once
        peers = [p for p in peers if p != "pytorch-fp32"]
    if not specs:
        raise CompressorError("nothing to benchmark: give model folders, --teacher, or both")
    first = specs[0].tokenizer_path or specs[0].path
    task_spec = dev.task if dev is not None and task is None else _task_for(_model_folder(first), task)[0]
    if dev is None:   # before the peers are made: a dev file that is not there is one line at once
        dev = load_for_model(_model_folder(first), task_spec, "dev", data_dir, None, user_data)
    if teacher and peers and device != "cpu":
        log(f"the peers ({', '.join(peers)}) run on the CPU only: left out of this --device {device} run")
    if teacher and peers and device == "cpu":
        work_dir = work_dir or os.path.join(os.path.dirname(os.path.abspath(out or "bench")), "peers")
        log(f"preparing peers ({', '.join(peers)}) under {work_dir}")
        specs += peer_specs(teacher, work_dir, peers, preset=preset, data_dir=data_dir)
    info = fingerprint(device)
    settings = {"sentences": config.sentences, "threads": config.threads, "batch_sizes": config.batch_sizes,
                "throughput_batches": config.throughput_batches, "batching": config.batching, "device": device, "data": dev.source,
                "dev_examples": len(dev), "interleaved": True, "timing": timing_policy(config)}

    def save(rows: List[dict], complete: bool) -> None:
        # written after every thread count too: a run stopped midway keeps what it finished,
        # marked incomplete (config.complete false) until the last thread count is in
        write_results(out, rows, command=command, fingerprint_info=info, config={**settings, "complete": complete})

    rows = _with_retention(benchmark(specs, task_spec, dev, config, log=log,
                                     on_rows=(lambda part: save(_with_retention(part), False)) if out else None))
    if out:
        save(rows, True)
    return {"rows": rows, "fingerprint": info, "config": {**settings, "complete": True}}


def _with_retention(rows: List[dict]) -> List[dict]:
    """Each row's teacher value (the teacher's own score) and retention against it."""
    teacher_rows = [r for r in rows if r["extra"].get("group") == "teacher" and r["value"] is not None]
    teacher_value = teacher_rows[0]["value"] if teacher_rows else None
    for r in rows:
        r["teacher_value"] = teacher_value
        r["retention"] = round(r["value"] / teacher_value, 4) if teacher_value and r["value"] is not None \
            else None
    return rows


def _graph_engine(path: str) -> Optional[str]:
    """The graph engine a folder's kind runs on (``compressor.core.loaders``), None for a
    checkpoint; an unknown kind is the loader registry's one line."""
    from compressor.core.loaders import loader_of

    if not os.path.isdir(path):
        return None   # a hub id: a checkpoint
    return loader_of(path).engine


def _first(*values):
    """The first value that is not None (a callable is called only when reached)."""
    for v in values:
        v = v() if callable(v) else v
        if v is not None:
            return v
    return None


QUANT_PARAM_SUFFIXES = ("_scale", "_zero_point")


def onnx_parameters(path: str) -> Optional[int]:
    """Parameters of an ONNX graph: the elements of its initializers, each once (a weight that
    several nodes share is one initializer), leaving out the scales and zero points that
    onnxruntime's quantiser adds (named ``<weight>_scale``, ``<weight>_zero_point``), so a
    quantised graph counts what its source model does. For export folders that predate the
    manifest's ``parameters``; the export merges initializers of equal value, so an untrained
    model's identical LayerNorm tensors count once. None if the file cannot be read."""
    import onnx

    try:
        model = onnx.load(path, load_external_data=False)
    except Exception:
        return None
    count = 0
    for init in model.graph.initializer:
        if init.name.endswith(QUANT_PARAM_SUFFIXES):
            continue
        n = 1
        for d in init.dims:
            n *= d
        count += n
    return count


def _saved_precision(path: str) -> str:
    """How a quantisation stage's PyTorch folder stores its model (its quantization.json)."""
    from compressor.core.io import read_json

    info = read_json(os.path.join(path, "quantization.json"))
    method = str(info.get("method", "int8"))
    return method if method in ("fp16", "bf16") else f"int8-{method}"


def _model_folder(path: str) -> str:
    return os.path.dirname(path) if path.endswith(".onnx") else path
