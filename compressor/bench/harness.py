"""The benchmark harness: latency, throughput, memory, size and score of model variants.

A variant is a model run one way (``Spec``: a PyTorch checkpoint eager or
compiled, in FP32/FP16/BF16 or dynamic INT8; an ONNX file under onnxruntime).
``benchmark`` builds each variant once per thread count in a process of its own
(``compressor.bench.worker``) and times them interleaved, in rounds: each round,
every variant in turn (the order rotating) times a block of sentences (batch 1)
or one batch (throughput), after a pause that lets the previous variant's idle
thread pools fall asleep and one untimed run that wakes its own. Drift (thermal,
a neighbour's job) thus hits every variant alike, while no variant's spinning
threads (onnxruntime's, PyTorch's OpenMP team) take the cores from the one being
timed, as they did when all variants shared one process: at 2 threads that
doubled some latencies. Inputs are the task's real dev sentences at their real
lengths: batch 1 is never padded; a larger batch is padded to its longest
sentence only. Tokenisation is done beforehand and not timed.

``interleaved_latency`` and ``interleaved_throughput`` still time runners built
in the calling process (what the one-variant timers of the experiments use).
"""
from __future__ import annotations

import os
import platform
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from compressor.core.errors import CompressorError
from compressor.core.presets import cpu_flags, detect_preset
from compressor.core.results import shown_path

PT_ENGINES = ("pytorch", "pytorch-compile")
# engines that run an export folder through compressor.export.runtime.open_graph, without torch
GRAPH_ENGINES = ("onnxruntime", "openvino")
ENGINES = PT_ENGINES + GRAPH_ENGINES
PRECISIONS = ("fp32", "fp16", "bf16", "int8-dynamic")


@dataclass
class Spec:
    """How to build one variant; plain data, so a subprocess can rebuild it (memory probe)."""

    name: str
    path: str                          # checkpoint folder, export folder, or .onnx file
    engine: str = "pytorch"            # pytorch, pytorch-compile, onnxruntime, openvino (an IR folder)
    precision: str = "fp32"            # fp32, fp16, bf16 (CUDA), int8-dynamic (PyTorch CPU)
    device: str = "cpu"
    group: str = "ours"                # teacher, ours, peer
    source: Optional[str] = None       # the stage or peer recipe that made it
    parameters: Optional[int] = None
    size_bytes: Optional[int] = None
    tokenizer_path: Optional[str] = None
    extra: dict = field(default_factory=dict)
    # False: idle pool threads sleep at once (onnxruntime allow_spinning 0; a worker gets
    # OMP_WAIT_POLICY=PASSIVE for PyTorch); True: the libraries' defaults, which spin
    spinning: bool = True


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
    if spec.engine in GRAPH_ENGINES:   # open_graph runs an OpenVINO folder on OpenVINO
        return _build_ort(spec, threads)
    if spec.engine in PT_ENGINES:
        return _build_torch(spec)
    if spec.engine == "inc":
        return _build_inc(spec)
    raise CompressorError(f"unknown engine {spec.engine!r}; engines: {', '.join(ENGINES)}")


def graph_size(model_file: str) -> int:
    """Bytes of a graph on disk: the ONNX file, or an OpenVINO IR's model.xml with its weights
    (model.bin beside it)."""
    weights = os.path.splitext(model_file)[0] + ".bin"
    extra = os.path.getsize(weights) if model_file.endswith(".xml") and os.path.isfile(weights) else 0
    return os.path.getsize(model_file) + extra


def _ort_files(spec: Spec) -> tuple:
    """(export folder, graph file or None): an ONNX variant is an export folder, or a peer's
    .onnx file run with the tokenizer of the folder it was made from."""
    if spec.path.endswith(".onnx"):
        return spec.tokenizer_path or os.path.dirname(spec.path), os.path.abspath(spec.path)
    return spec.path, None


def _build_ort(spec: Spec, threads: Optional[int]) -> Runner:
    from compressor.export.runtime import open_graph

    folder, model_file = _ort_files(spec)
    # an early-exit export runs as its segment chain, each row stopping at its exit
    providers = ["CUDAExecutionProvider", "CPUExecutionProvider"] if spec.device.startswith("cuda") else None
    predictor = open_graph(folder, threads=threads, model_file=model_file, spinning=spec.spinning,
                           providers=providers)
    return Runner(spec, predictor.encode, predictor.run, model=predictor)


def score(runner: Runner, task, dev, batch_size: int = 64) -> dict:
    """A variant's metrics on the labelled ``dev`` rows.

    An ONNX graph is scored by ``compressor.export.onnx.score_onnx``, as the export and
    quantize stages and ``eval`` score it (one sentence at a time, the same
    session options), so one graph has one score; a PyTorch model in batches
    of ``batch_size``.
    """
    from compressor.core.metrics import compute_metrics

    if runner.spec.engine in GRAPH_ENGINES:
        from compressor.export.onnx import score_onnx

        folder, model_file = _ort_files(runner.spec)
        return score_onnx(folder, dev, model_file=model_file)
    logits = runner.logits([_text(ex) for ex in dev.examples], batch_size=batch_size)
    preds = logits[:, 0] if task.is_regression else logits.argmax(-1)
    return compute_metrics(task, preds, [ex.label for ex in dev.examples])


def _build_torch(spec: Spec) -> Runner:
    import torch

    from compressor.core.models import load_for_task

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

    from compressor.core.data import load_for_model
    from compressor.core.models import load_for_task, read_meta
    from compressor.engine.scoring import _task_for

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

    train = load_for_model(spec.path, task, "train", spec.extra.get("data_dir"), calibration_rows)
    calib = [_text(ex) for ex in train.examples]
    batch, seq = Dim("batch", min=1, max=1024), Dim("seq", min=2, max=read_meta(spec.path).get("max_length", 512))
    with torch.no_grad():
        wrapper = (LogitsWithTypes if "token_type_ids" in names else Logits)(net)
        graph = export(wrapper, enc(calib[:2]), dynamic_shapes=tuple({0: batch, 1: seq} for _ in names))
        prepared = prepare(graph, StaticQuantConfig())
        for i in range(0, len(calib), 8):
            prepared(*enc(calib[i:i + 8]))
        quantised = convert(prepared)
    # Inductor lowers the quantise/dequantise pairs around a Linear into its INT8 kernel (weight
    # prepack) only among its freezing passes: without freezing the graph runs FP32 matmuls
    # between the casts, slower than the FP32 model (MPNet-base, 1 thread: 196 ms against 52 ms).
    # Compiling happens at the first calls, so every call runs inside the patch (which leaves the
    # setting of other compiled models in this process alone).
    import torch._inductor.config as inductor_config

    compiled = torch.compile(quantised, dynamic=True)

    def run(feed):
        with torch.no_grad(), inductor_config.patch(freezing=True):
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
    from compressor.core.batches import collate, encode
    from compressor.core.data import Example

    pad = tokenizer.pad_token_id or 0

    def batch_of(texts):
        examples = [Example((t,) if isinstance(t, str) else tuple(t), None, str(i))
                    for i, t in enumerate(texts)]
        return collate(encode(tokenizer, examples, max_length, config), pad, False)

    return batch_of


def _max_length(path: str) -> int:
    from compressor.core.models import read_meta

    return read_meta(path).get("max_length", 128)


def logging_quiet() -> None:
    import logging

    for name in ("neural_compressor", "torch._dynamo", "torch._inductor"):
        logging.getLogger(name).setLevel(logging.ERROR)


def _uses_types(net) -> bool:
    from compressor.core.arch import uses_token_type_ids

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
    # how throughput batches are formed (export.runtime.batch_groups), each timed: padded (rows
    # as they come, each batch padded to its longest), sorted or bucketed (padding-free)
    batching: List[str] = field(default_factory=lambda: ["padded"])
    score: bool = True                 # the dev metric of every variant
    memory: bool = True                # peak resident memory of each variant's own process
    seed: int = 0
    block: int = 20                    # sentences a variant times per turn, in the rounds
    pause_s: float = 0.1               # before each turn: the previous variant's idle threads fall asleep


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


def _warm_every_shape(r) -> bool:
    """Whether a variant (a Runner or its Spec) pays once per input shape (CUDA graphs, kernel
    selection on the GPU, recompiles): those run every timed input once before timing, so
    steady state is measured."""
    spec = getattr(r, "spec", r)
    return spec.engine == "pytorch-compile" or spec.device.startswith("cuda")


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


# -- isolated variants, timed in rounds ------------------------------------------------

BATCH1 = "batch1"


def timing_policy(config: BenchConfig) -> dict:
    """How ``benchmark`` times variants, as recorded in its results."""
    return {"isolation": "process per variant and thread count (compressor.bench.worker)",
            "order": "rounds: every variant in turn, the order rotating each round",
            "block_sentences": config.block, "pause_s": config.pause_s, "wake_runs_per_turn": 1,
            "warmup": config.warmup,
            "spinning": "library defaults (onnxruntime allow_spinning on, OMP_WAIT_POLICY unset) "
                        "unless a row's extra.spinning is false"}


def load_sentences(workers, texts: Sequence, warmup: int) -> None:
    """Give every worker the batch-1 inputs (encoded there, not timed) and warm it: ``warmup``
    sentences, or every one for a variant that pays per input shape."""
    for w in workers:
        w.call("feeds", key=BATCH1, texts=[_jsonable_text(t) for t in texts], batch_size=1)
    for w in workers:
        count = len(texts) if _warm_every_shape(w.spec) else min(warmup, len(texts))
        w.call("warm", key=BATCH1, indices=list(range(count)))


def rounds_latency(workers, sentences, block: int, pause_s: float) -> Dict[str, list]:
    """Batch-1 seconds of each worker on the loaded ``sentences`` (a count: the first that many;
    or their indices): in rounds of ``block`` sentences, every worker in turn (who goes first
    rotates), each turn after a ``pause_s`` pause and one untimed wake-up run."""
    order = list(range(sentences)) if isinstance(sentences, int) else list(sentences)
    block = max(1, block)
    times: Dict[str, list] = {w.name: [] for w in workers}
    n = len(workers)
    for r, start in enumerate(range(0, len(order), block)):
        idx = order[start:start + block]
        for k in range(n):
            w = workers[(r + k) % n]
            time.sleep(pause_s)
            times[w.name] += w.call("time", key=BATCH1, indices=idx, wake=[BATCH1, idx[0]])["times"]
    return times


def rounds_throughput(workers, texts: Sequence, batch_size: int, batches: int,
                      pause_s: float, batching: str = "padded",
                      padding: Optional[dict] = None) -> Dict[str, float]:
    """Sentences per second over ``batches`` real batches padded to their longest; round ``i``:
    every worker in turn runs batch ``i`` (after a pause and a batch-1 wake-up run).

    The rows are the first ``batches`` x ``batch_size`` of ``texts`` whatever ``batching`` says:
    ``padded`` takes them as they come; ``sorted`` and ``bucketed`` regroup those same rows by
    token count (``export.runtime.batch_groups``), so the ways are timed on one set of rows.
    ``padding``, when given, receives each worker's share of padded tokens computed."""
    groups = [list(texts[i:i + batch_size]) for i in range(0, len(texts), batch_size)]
    groups = [g for g in groups if len(g) == batch_size][:batches] or [list(texts[:batch_size])]
    key = f"batch{batch_size}" + ("" if batching == "padded" else f"-{batching}")
    flat = [_jsonable_text(t) for g in groups for t in g]
    for w in workers:
        fed = w.call("feeds", key=key, texts=flat, batch_size=len(groups[0]), batching=batching)
        if padding is not None and fed.get("padded_tokens"):
            padding[w.name] = round(1 - fed["tokens"] / fed["padded_tokens"], 4)
        w.call("warm", key=key, indices=list(range(len(groups) if _warm_every_shape(w.spec) else 1)))
    spent = {w.name: 0.0 for w in workers}
    n = len(workers)
    for i in range(len(groups)):
        for k in range(n):
            w = workers[(i + k) % n]
            time.sleep(pause_s)
            spent[w.name] += w.call("time", key=key, indices=[i], wake=[BATCH1, 0])["times"][0]
    done = sum(len(g) for g in groups)
    return {name: round(done / t, 2) for name, t in spent.items()}


class OtherLoad:
    """``with OtherLoad(pids) as load:`` measures ``load.share``: the share of the machine's CPU
    time that processes other than this one and ``pids`` used meanwhile (a neighbour's job on a
    shared machine; 0.5 on 2 cores is one core busy). None where /proc cannot tell (not Linux)."""

    def __init__(self, pids: Sequence[int] = ()):
        self.pids = [os.getpid(), *pids]
        self.share: Optional[float] = None

    @staticmethod
    def _machine():
        with open("/proc/stat") as f:
            lines = f.read().splitlines()
        fields = [int(v) for v in lines[0].split()[1:]]
        busy = sum(fields[:3]) + sum(fields[5:8])     # user nice system, irq softirq steal
        return busy, sum(1 for ln in lines if ln.startswith("cpu") and ln[3:4].isdigit())

    def _ours(self) -> int:
        total = 0
        for pid in self.pids:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    rest = f.read().rsplit(")", 1)[1].split()
                total += int(rest[11]) + int(rest[12])      # utime, stime
            except (OSError, IndexError, ValueError):
                pass
        return total

    def __enter__(self):
        try:
            self._start = (time.perf_counter(), self._machine()[0], self._ours())
        except (OSError, ValueError, IndexError):
            self._start = None
        return self

    def __exit__(self, *exc):
        if self._start is None:
            return False
        try:
            busy, cpus = self._machine()
            ours = self._ours()
        except (OSError, ValueError, IndexError):
            return False
        wall, busy0, ours0 = self._start
        ticks = os.sysconf("SC_CLK_TCK") * (time.perf_counter() - wall) * max(1, cpus)
        self.share = round(max(0.0, (busy - busy0) - (ours - ours0)) / ticks, 3) if ticks > 0 else None
        return False


def isolated_latency(specs: Sequence[Spec], texts: Sequence, threads: int,
                     config: Optional[BenchConfig] = None) -> Dict[str, list]:
    """Batch-1 seconds of every variant on every text, each variant in a process of its own,
    timed in rounds (``rounds_latency``); ``config`` gives warm-up, block and pause."""
    from compressor.bench.worker import Workers

    config = config or BenchConfig()
    with Workers(specs, threads) as workers:
        load_sentences(workers, texts, config.warmup)
        return rounds_latency(workers, len(texts), config.block, config.pause_s)


def worker_score(worker, task, dev, batch_size: int = 64) -> dict:
    """A variant's metrics on the labelled ``dev`` rows, from the logits its worker returns:
    an ONNX graph one sentence at a time (as ``score_onnx`` scores it), a PyTorch model in
    batches of ``batch_size`` (as ``score``)."""
    from compressor.core.metrics import compute_metrics

    texts = [_jsonable_text(_text(ex)) for ex in dev.examples]
    bs = 1 if worker.spec.engine in GRAPH_ENGINES else batch_size
    logits = np.asarray(worker.call("logits", texts=texts, batch_size=bs)["logits"], dtype=np.float32)
    preds = logits[:, 0] if task.is_regression else logits.argmax(-1)
    return compute_metrics(task, preds, [ex.label for ex in dev.examples])


def _jsonable_text(t):
    return t if isinstance(t, str) else list(t)


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
    from compressor.core.results import fingerprint as base

    info = base()
    flags = cpu_flags()
    info["cpu_flags"] = sorted(f for f in flags if f.startswith(("avx", "amx", "sse4", "fma", "f16c")))
    info["cpu_preset"] = cpu_preset(flags)
    for pkg in ("onnxruntime", "onnx", "optimum", "optimum-onnx", "neural_compressor", "tokenizers", "openvino",
                "nncf"):
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
    """The hardware preset ``auto`` picks on this CPU (compressor.core.presets)."""
    return detect_preset(flags)


# -- one benchmark over many variants --------------------------------------------

NOISY_OTHER_SHARE = 0.1   # above this share of the CPU used by other processes, timings are noisy


def noisy(share: Optional[float]) -> bool:
    """Whether other processes took enough of the CPU while timing to make the figures noisy."""
    return share is not None and share > NOISY_OTHER_SHARE


def noisy_line(share: float) -> str:
    return (f"other processes used {100 * share:.0f}% of this machine's CPU while timing: "
            "these figures are noisy")


def sample_texts(examples: Sequence, n: int, seed: int = 0) -> list:
    """``n`` dev texts drawn at random (a fixed seed), at their real lengths."""
    rng = np.random.default_rng(seed)
    idx = rng.permutation(len(examples))[:n] if n < len(examples) else np.arange(len(examples))
    return [_text(examples[i]) for i in idx]


def _text(ex):
    return ex.texts[0] if len(ex.texts) == 1 else tuple(ex.texts)


def benchmark(specs: Sequence[Spec], task, dev, config: BenchConfig, teacher_value: Optional[float] = None,
              log: Callable = print, on_rows: Optional[Callable[[List[dict]], None]] = None) -> List[dict]:
    """Measure every variant; return one results row per variant, thread count and batch size.

    ``dev`` is the task's labelled dev dataset: its sentences are the timing
    inputs and its labels the score. ``teacher_value`` fills retention. Each
    variant is built once per thread count, in a process of its own, which also
    scores it and weighs its memory (at the first thread count); the variants are
    timed in rounds (``rounds_latency``, ``rounds_throughput``). ``on_rows`` receives the rows
    measured so far after each thread count, so a run stopped midway keeps what it finished.
    """
    from compressor.core.metrics import task_score

    from compressor.bench.worker import Workers

    if not specs:
        raise CompressorError("nothing to benchmark: no variants")
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise CompressorError(f"variant names must differ: {', '.join(names)}")
    if config.block < 1 or config.pause_s < 0:
        raise CompressorError(f"block must be at least 1 and pause_s not negative (got {config.block}, "
                              f"{config.pause_s})")
    texts = sample_texts(dev.examples, config.sentences, config.seed)
    # throughput batches come from the whole split (shuffled), so large batches have enough rows
    batch_texts = sample_texts(dev.examples, len(dev.examples), config.seed)
    scores: Dict[str, dict] = {}
    memory: Dict[str, dict] = {}
    results: Dict[tuple, dict] = {}
    other_load: Dict[int, Optional[float]] = {}   # share of the CPU other processes used while timing
    for t_i, threads in enumerate(config.threads):
        log(f"building {len(specs)} variant{'s' if len(specs) != 1 else ''}, each in its own process ({threads} thread{'s' if threads > 1 else ''})")
        with Workers(specs, threads) as workers:
            if t_i == 0 and config.memory:
                for w in workers:
                    log(f"peak memory of {w.name}")
                    memory[w.name] = w.call("memory", texts=[_jsonable_text(t) for t in texts[:16]])
            if t_i == 0 and config.score:
                for w in workers:
                    log(f"scoring {w.name} on {len(dev)} dev rows")
                    metrics = worker_score(w, task, dev)
                    scores[w.name] = {"metrics": metrics, "score": task_score(task, metrics), "rows": len(dev)}
            load_sentences(workers, texts, config.warmup)
            log(f"batch 1: {len(texts)} sentences x {len(specs)} variants, in rounds of {config.block}")
            with OtherLoad([w.proc.pid for w in workers]) as load:
                times = rounds_latency(workers, len(texts), config.block, config.pause_s)
            if noisy(load.share):
                log(noisy_line(load.share))
            for name, measured in times.items():
                results[(name, threads, 1)] = {"latency_ms": percentiles(measured), "sentences": len(measured)}
            other_load[threads] = load.share
            for bs in config.batch_sizes:
                by_way: Dict[str, Dict[str, float]] = {}
                padding: Dict[str, Dict[str, float]] = {}
                for way in config.batching:
                    log(f"batch {bs}: throughput, {way} batches, in rounds")
                    padding[way] = {}
                    by_way[way] = rounds_throughput(workers, batch_texts, bs, config.throughput_batches,
                                                    config.pause_s, batching=way, padding=padding[way])
                for name in by_way[config.batching[0]]:
                    results[(name, threads, bs)] = throughput_fields(
                        {way: rates[name] for way, rates in by_way.items()},
                        {way: share.get(name) for way, share in padding.items()})
        if on_rows:
            on_rows(_rows(specs, task, config, scores, memory, results, other_load, teacher_value))
    return _rows(specs, task, config, scores, memory, results, other_load, teacher_value)


def throughput_fields(rates: Dict[str, float], padding: Dict[str, Optional[float]]) -> dict:
    """A throughput row's measured fields: ``throughput`` (the first way timed) and its
    ``batching``; with more than one way, ``throughput_by_batching``, the share of computed tokens
    that were padding (``padding_share``) and ``padding_free_speedup`` (the best padding-free
    way against ``padded``)."""
    first = next(iter(rates))
    out = {"throughput": rates[first], "batching": first}
    if len(rates) > 1:
        out["throughput_by_batching"] = dict(rates)
        out["padding_share"] = dict(padding)
        free = [v for k, v in rates.items() if k != "padded"]
        if "padded" in rates and free and rates["padded"]:
            out["padding_free_speedup"] = round(max(free) / rates["padded"], 3)
    return out


def _rows(specs, task, config: BenchConfig, scores: dict, memory: dict, results: dict, other_load: dict,
          teacher_value: Optional[float]) -> List[dict]:
    """One results row per variant, thread count and batch size measured so far."""
    from compressor.core.results import row

    policy = timing_policy(config)
    rows = []
    for s in specs:
        sc = scores.get(s.name, {})
        for (name, threads, bs), measured in results.items():
            if name != s.name:
                continue
            extra = {"group": s.group, "precision": s.precision, "source": s.source, "path": shown_path(s.path) if s.path else s.path,
                     "metrics": sc.get("metrics"), **s.extra, "spinning": s.spinning, "timing": policy}
            extra.update(memory.get(s.name) or {})
            if sc.get("rows"):
                extra["scored_rows"] = sc["rows"]   # the score: every dev row, one sentence at a time (ONNX)
            if bs == 1:
                extra["other_cpu_share"] = other_load.get(threads)
                if noisy(other_load.get(threads)):
                    extra["warnings"] = [noisy_line(other_load[threads])]
            rows.append(row(s.name, task.name, "+".join(task.metrics), sc.get("score"), teacher_value,
                            parameters=s.parameters, size_bytes=s.size_bytes, engine=s.engine,
                            device=s.device, threads=threads, batch_size=bs, **measured, extra=extra))
    return rows
