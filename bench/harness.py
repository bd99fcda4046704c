"""The benchmark harness: latency, throughput, memory, size and score of model variants.

A variant is a model run one way (``Spec``: a PyTorch checkpoint eager or
compiled, in FP32/FP16/BF16 or dynamic INT8; an ONNX file under onnxruntime).
All variants of one benchmark live in one process and are timed interleaved:
sentence by sentence (batch 1) and batch by batch (throughput), the order of
variants rotating each step, so drift (thermal, a neighbour's job) hits every
variant alike. Inputs are the task's real dev sentences at their real
lengths: batch 1 is never padded; a larger batch is padded to its longest
sentence only. Tokenisation is done beforehand and not timed.
"""
from __future__ import annotations

import os
import platform
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from compressor.errors import CompressorError
from compressor.quantize.presets import cpu_flags, detect_preset
from compressor.results import shown_path

PT_ENGINES = ("pytorch", "pytorch-compile")
ENGINES = PT_ENGINES + ("onnxruntime",)
PRECISIONS = ("fp32", "fp16", "bf16", "int8-dynamic")


@dataclass
class Spec:
    """How to build one variant; plain data, so a subprocess can rebuild it (memory probe)."""

    name: str
    path: str                          # checkpoint folder, export folder, or .onnx file
    engine: str = "pytorch"            # pytorch, pytorch-compile, onnxruntime
    precision: str = "fp32"            # fp32, fp16, bf16 (CUDA), int8-dynamic (PyTorch CPU)
    device: str = "cpu"
    group: str = "ours"                # teacher, ours, peer
    source: Optional[str] = None       # the stage or peer recipe that made it
    parameters: Optional[int] = None
    size_bytes: Optional[int] = None
    tokenizer_path: Optional[str] = None
    extra: dict = field(default_factory=dict)


class Runner:
    """A built variant: ``encode(texts)`` once, then ``run(feed)`` is what gets timed."""

    def __init__(self, spec: Spec, encode: Callable, run: Callable, sync: Callable = lambda: None,
                 model=None):
        self.spec, self.encode, self.run, self.sync, self.model = spec, encode, run, sync, model

    def logits(self, texts: Sequence, batch_size: int = 64) -> np.ndarray:
        order = sorted(range(len(texts)), key=lambda i: len(_flat(texts[i])))
        out = None
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            logits = _numpy(self.run(self.encode([texts[i] for i in idx])))
            if out is None:
                out = np.zeros((len(texts), logits.shape[-1]), np.float32)
            out[idx] = logits
        return out


def build(spec: Spec, threads: Optional[int] = None) -> Runner:
    if spec.engine == "onnxruntime":
        return _build_ort(spec, threads)
    if spec.engine in PT_ENGINES:
        return _build_torch(spec)
    if spec.engine == "inc":
        return _build_inc(spec)
    raise CompressorError(f"unknown engine {spec.engine!r}; engines: {', '.join(ENGINES)}")


def _ort_files(spec: Spec) -> tuple:
    """(export folder, graph file or None): an ONNX variant is an export folder, or a peer's
    .onnx file run with the tokenizer of the folder it was made from."""
    if spec.path.endswith(".onnx"):
        return spec.tokenizer_path or os.path.dirname(spec.path), os.path.abspath(spec.path)
    return spec.path, None


def _build_ort(spec: Spec, threads: Optional[int]) -> Runner:
    from compressor.export.runtime import Predictor

    folder, model_file = _ort_files(spec)
    predictor = Predictor(folder, threads=threads, model_file=model_file)
    return Runner(spec, predictor.encode, predictor.run)


def score(runner: Runner, task, dev, batch_size: int = 64) -> dict:
    """A variant's metrics on the labelled ``dev`` rows.

    An ONNX graph is scored by ``compressor.export.onnx.score_onnx``, as the export and
    quantize stages and ``eval`` score it (one sentence at a time, the same
    session options), so one graph has one score; a PyTorch model in batches
    of ``batch_size``.
    """
    from compressor.metrics import compute_metrics

    if runner.spec.engine == "onnxruntime":
        from compressor.export.onnx import score_onnx

        folder, model_file = _ort_files(runner.spec)
        return score_onnx(folder, dev, model_file=model_file)
    logits = runner.logits([_text(ex) for ex in dev.examples], batch_size=batch_size)
    preds = logits[:, 0] if task.is_regression else logits.argmax(-1)
    return compute_metrics(task, preds, [ex.label for ex in dev.examples])


def _build_torch(spec: Spec) -> Runner:
    import torch

    from compressor.models import load_for_task

    quantized = _torch_quantized(spec.path)
    if quantized:
        # a folder the quantisation stage wrote with a PyTorch backend (torchao, INC, FP16/BF16),
        # run in the precision it was saved in
        from compressor.quantize import load_quantized

        net, tokenizer = load_quantized(spec.path)
    else:
        net, tokenizer = load_for_task(spec.path)
    net.eval()
    if quantized:
        pass
    elif spec.precision == "int8-dynamic":
        if spec.device != "cpu":
            raise CompressorError(f"{spec.name}: PyTorch dynamic INT8 runs on the CPU only")
        net = torch.ao.quantization.quantize_dynamic(net, {torch.nn.Linear}, dtype=torch.qint8)
    elif spec.precision in ("fp16", "bf16"):
        if spec.device == "cpu" and spec.precision == "fp16":
            raise CompressorError(f"{spec.name}: fp16 is for CUDA; use bf16 on the CPU")
        net = net.to(torch.float16 if spec.precision == "fp16" else torch.bfloat16)
    device = torch.device(spec.device)
    net.to(device)
    forward = net
    if spec.engine == "pytorch-compile":
        # dynamic shapes: real sentence lengths would otherwise recompile per length;
        # on CUDA, reduce-overhead adds CUDA graphs (what batch 1 needs)
        mode = "reduce-overhead" if device.type == "cuda" else None
        forward = torch.compile(net, dynamic=True, mode=mode)
    batch_of = _batcher(tokenizer, net.config, _max_length(spec.path))

    def enc(texts):
        return {k: v.to(device) for k, v in batch_of(texts).items()}

    def run(feed):
        with torch.inference_mode():
            return forward(**feed).logits

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    return Runner(spec, enc, run, sync, model=net)


def _build_inc(spec: Spec, calibration_rows: int = 64) -> Runner:
    """Intel Neural Compressor static INT8 (PT2E): export, calibrate on training sentences, convert.

    INC's PT2E graph holds quantise/dequantise pairs; ``torch.compile`` is what
    turns them into INT8 kernels, so the variant runs compiled, dynamic shapes.
    """
    import torch
    from torch.export import Dim

    from compressor.data import load_split
    from compressor.models import load_for_task, read_meta
    from compressor.scoring import _task_for

    from neural_compressor.torch.export import export
    from neural_compressor.torch.quantization import StaticQuantConfig, convert, prepare

    logging_quiet()  # after the import: INC sets its logger's level when it is first imported

    net, tokenizer = load_for_task(spec.path, attn_implementation="eager")
    net.eval()
    task, _ = _task_for(spec.path, None)
    names = ["input_ids", "attention_mask"] + (["token_type_ids"] if _uses_types(net) else [])

    # torch.export matches dynamic shapes to named parameters, so no *args here
    class Logits(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask):
            return self.inner(input_ids=input_ids, attention_mask=attention_mask).logits

    class LogitsWithTypes(Logits):
        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.inner(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).logits

    batch_of = _batcher(tokenizer, net.config, _max_length(spec.path))

    def enc(texts):
        batch = batch_of(texts)
        return tuple(batch[n] for n in names)

    train = load_split(task, "train", data_dir=spec.extra.get("data_dir"), limit=calibration_rows)
    calib = [_text(ex) for ex in train.examples]
    batch, seq = Dim("batch", min=1, max=1024), Dim("seq", min=2, max=read_meta(spec.path).get("max_length", 512))
    with torch.no_grad():
        wrapper = (LogitsWithTypes if "token_type_ids" in names else Logits)(net)
        graph = export(wrapper, enc(calib[:2]), dynamic_shapes=tuple({0: batch, 1: seq} for _ in names))
        prepared = prepare(graph, StaticQuantConfig())
        for i in range(0, len(calib), 8):
            prepared(*enc(calib[i:i + 8]))
        quantised = convert(prepared)
    compiled = torch.compile(quantised, dynamic=True)

    def run(feed):
        with torch.no_grad():
            return compiled(*feed)

    return Runner(spec, enc, run)


def _torch_quantized(path: str) -> bool:
    try:
        from compressor.quantize.torch_int8 import is_quantized_folder
    except ImportError:
        return False
    return os.path.isdir(path) and is_quantized_folder(path)


def _batcher(tokenizer, config, max_length: int) -> Callable:
    """texts (a string or a pair each) -> one padded batch of model inputs, as in training."""
    from compressor.batches import collate, encode
    from compressor.data import Example

    pad = tokenizer.pad_token_id or 0

    def batch_of(texts):
        examples = [Example((t,) if isinstance(t, str) else tuple(t), None, str(i))
                    for i, t in enumerate(texts)]
        return collate(encode(tokenizer, examples, max_length, config), pad, False)

    return batch_of


def _max_length(path: str) -> int:
    from compressor.models import read_meta

    return read_meta(path).get("max_length", 128)


def logging_quiet() -> None:
    import logging

    for name in ("neural_compressor", "torch._dynamo", "torch._inductor"):
        logging.getLogger(name).setLevel(logging.ERROR)


def _uses_types(net) -> bool:
    from compressor.arch import uses_token_type_ids

    try:
        return uses_token_type_ids(net.config)
    except CompressorError:
        return False


def _numpy(x) -> np.ndarray:
    if isinstance(x, np.ndarray):
        return x
    return x.float().cpu().numpy()


def _flat(t) -> str:
    return t if isinstance(t, str) else " ".join(t)


# -- measuring ----------------------------------------------------------------

@dataclass
class BenchConfig:
    sentences: int = 200               # dev sentences timed at batch 1 (real lengths)
    warmup: int = 10
    threads: List[int] = field(default_factory=lambda: [1])
    batch_sizes: List[int] = field(default_factory=lambda: [32])   # throughput, besides batch 1
    throughput_batches: int = 4        # batches per batch size and variant
    score: bool = True                 # the dev metric of every variant
    memory: bool = True                # peak resident memory, one subprocess per variant
    seed: int = 0


def percentiles(times_s: Sequence[float]) -> dict:
    ms = np.asarray(times_s) * 1000.0
    return {"p50": round(float(np.percentile(ms, 50)), 3), "p90": round(float(np.percentile(ms, 90)), 3),
            "p99": round(float(np.percentile(ms, 99)), 3), "mean": round(float(ms.mean()), 3)}


def interleaved_latency(runners: Sequence[Runner], texts: Sequence, warmup: int) -> Dict[str, list]:
    """Batch-1 latency of every runner on every text, the runners' order rotating per text."""
    feeds = {r.spec.name: [r.encode([t]) for t in texts] for r in runners}
    for r in runners:
        count = len(texts) if _warm_every_shape(r) else warmup
        for feed in feeds[r.spec.name][:count]:
            r.run(feed)
        r.sync()
    times: Dict[str, list] = {r.spec.name: [] for r in runners}
    n = len(runners)
    for i in range(len(texts)):
        for k in range(n):
            r = runners[(i + k) % n]
            feed = feeds[r.spec.name][i]
            start = time.perf_counter()
            r.run(feed)
            r.sync()
            times[r.spec.name].append(time.perf_counter() - start)
    return times


def _warm_every_shape(r: Runner) -> bool:
    """Whether a variant pays once per input shape (CUDA graphs, kernel selection on the GPU,
    recompiles): those run every timed input once before timing, so steady state is measured."""
    return r.spec.engine == "pytorch-compile" or r.spec.device.startswith("cuda")


def interleaved_throughput(runners: Sequence[Runner], texts: Sequence, batch_size: int,
                           batches: int) -> Dict[str, float]:
    """Sentences per second over ``batches`` consecutive real batches, padded to their longest."""
    groups = [list(texts[i:i + batch_size]) for i in range(0, len(texts), batch_size)]
    groups = [g for g in groups if len(g) == batch_size][:batches] or [list(texts[:batch_size])]
    feeds = {r.spec.name: [r.encode(g) for g in groups] for r in runners}
    for r in runners:
        for feed in feeds[r.spec.name] if _warm_every_shape(r) else feeds[r.spec.name][:1]:
            r.run(feed)
        r.sync()
    spent = {r.spec.name: 0.0 for r in runners}
    n = len(runners)
    for i in range(len(groups)):
        for k in range(n):
            r = runners[(i + k) % n]
            start = time.perf_counter()
            r.run(feeds[r.spec.name][i])
            r.sync()
            spent[r.spec.name] += time.perf_counter() - start
    done = sum(len(g) for g in groups)
    return {name: round(done / s, 2) for name, s in spent.items()}


def peak_memory(spec: Spec, texts: Sequence, threads: int) -> dict:
    """Peak resident memory (and, on CUDA, peak allocated GPU memory) of a fresh process that
    builds ``spec`` and runs a few sentences: ``{"peak_rss_mb", "cuda_peak_mb"}`` or {}."""
    import json
    import subprocess
    import sys

    payload = json.dumps({"spec": asdict(spec), "texts": list(texts[:16]), "threads": threads})
    try:
        out = subprocess.run([sys.executable, "-m", "compressor.bench.memprobe"], input=payload, text=True,
                             capture_output=True, timeout=600, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (subprocess.SubprocessError, ValueError, IndexError):
        return {}


def fingerprint(device: str = "cpu") -> dict:
    """The machine and software a measurement ran on."""
    from compressor.results import fingerprint as base

    info = base()
    flags = cpu_flags()
    info["cpu_flags"] = sorted(f for f in flags if f.startswith(("avx", "amx", "sse4", "fma", "f16c")))
    info["cpu_preset"] = cpu_preset(flags)
    for pkg in ("onnxruntime", "onnx", "optimum", "optimum-onnx", "neural_compressor", "tokenizers"):
        try:
            import importlib.metadata as md

            info["versions"][pkg] = md.version(pkg)
        except Exception:
            pass
    try:
        import torch

        info["torch_threads"] = torch.get_num_threads()
        if device.startswith("cuda") and torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
            info["cuda"] = torch.version.cuda
    except ImportError:
        pass
    info["hostname_hash"] = abs(hash(platform.node())) % 10**8
    return info


def cpu_preset(flags: Optional[set] = None) -> str:
    """The hardware preset ``auto`` picks on this CPU (compressor.quantize.presets)."""
    return detect_preset(flags)


# -- one benchmark over many variants --------------------------------------------

def sample_texts(examples: Sequence, n: int, seed: int = 0) -> list:
    """``n`` dev texts drawn at random (a fixed seed), at their real lengths."""
    rng = np.random.default_rng(seed)
    idx = rng.permutation(len(examples))[:n] if n < len(examples) else np.arange(len(examples))
    return [_text(examples[i]) for i in idx]


def _text(ex):
    return ex.texts[0] if len(ex.texts) == 1 else tuple(ex.texts)


def benchmark(specs: Sequence[Spec], task, dev, config: BenchConfig, teacher_value: Optional[float] = None,
              log: Callable = print) -> List[dict]:
    """Measure every variant; return one results row per variant, thread count and batch size.

    ``dev`` is the task's labelled dev dataset: its sentences are the timing
    inputs and its labels the score. ``teacher_value`` fills retention.
    """
    import torch

    from compressor.metrics import task_score
    from compressor.results import row

    if not specs:
        raise CompressorError("nothing to benchmark: no variants")
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise CompressorError(f"variant names must differ: {', '.join(names)}")
    texts = sample_texts(dev.examples, config.sentences, config.seed)
    # throughput batches come from the whole split (shuffled), so large batches have enough rows
    batch_texts = sample_texts(dev.examples, len(dev.examples), config.seed)
    scores: Dict[str, dict] = {}
    results: Dict[tuple, dict] = {}
    for threads in config.threads:
        torch.set_num_threads(threads)
        log(f"building {len(specs)} variants ({threads} thread{'s' if threads > 1 else ''})")
        runners = [build(s, threads=threads) for s in specs]
        if config.score and not scores:
            for r in runners:
                log(f"scoring {r.spec.name} on {len(dev)} dev rows")
                metrics = score(r, task, dev)
                scores[r.spec.name] = {"metrics": metrics, "score": task_score(task, metrics)}
        log(f"batch 1: {len(texts)} sentences x {len(runners)} variants, interleaved")
        times = interleaved_latency(runners, texts, config.warmup)
        for r in runners:
            results[(r.spec.name, threads, 1)] = {"latency_ms": percentiles(times[r.spec.name]),
                                                   "sentences": len(times[r.spec.name])}
        for bs in config.batch_sizes:
            log(f"batch {bs}: throughput, interleaved")
            rates = interleaved_throughput(runners, batch_texts, bs, config.throughput_batches)
            for name, rate in rates.items():
                results[(name, threads, bs)] = {"throughput": rate}
        del runners
    memory = {}
    if config.memory:
        for s in specs:
            log(f"peak memory of {s.name} (own process)")
            memory[s.name] = peak_memory(s, texts, config.threads[0])
    rows = []
    for s in specs:
        sc = scores.get(s.name, {})
        for (name, threads, bs), measured in results.items():
            if name != s.name:
                continue
            extra = {"group": s.group, "precision": s.precision, "source": s.source, "path": shown_path(s.path) if s.path else s.path,
                     "metrics": sc.get("metrics"), **s.extra}
            extra.update(memory.get(s.name) or {})
            rows.append(row(s.name, task.name, "+".join(task.metrics), sc.get("score"), teacher_value,
                            parameters=s.parameters, size_bytes=s.size_bytes, engine=s.engine,
                            device=s.device, threads=threads, batch_size=bs, **measured, extra=extra))
    return rows
