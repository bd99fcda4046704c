"""A latency table measured on the target: what one encoder layer costs at a given shape.

A candidate's latency is predicted, not measured: the sum over its layers of what a layer of
that shape (heads, FFN width) costs at that precision and sequence length (a token-pruned
layer sees fewer tokens), plus the model's overhead (embeddings, pooler, classifier, the
runtime's own cost) at that precision. Each entry is measured once on this machine by the
benchmark harness, every model in a process of its own (``compressor.bench.harness``): random
models of the teacher's family with one layer and with the teacher's depth of the shape (for the
teacher's own shape, per precision and length, their slope is a layer and their rest the
overhead), exported and quantised through the toolkit's own calls, timed at batch 1 on
sentences of exactly that many tokens. A shape costs more per layer in a deep model than in a
shallow one (one layer's weights stay in the cache): a candidate's layers are priced between the
two by its depth (:meth:`LatencyTable.layer_cost`). A token-pruned graph costs more than its layers at the
tokens they see: at every pruning point the importance, the TopK and the gathers of the hidden
states and the mask, and once per graph what it loses besides (the embeddings' and attention's
fusions, which onnxruntime's optimizer cannot apply to it). Both are measured per precision and
length, as an exit's cost is (:meth:`LatencyTable.token_cost`). The table is a JSON file per
CPU fingerprint (the processor, its flags, the core count, onnxruntime's version, the threads),
shared by every search on this machine and by processes working at once (a file lock); the
whole-model checks that measure a few candidates beside their prediction are kept in it with
their error.
"""
from __future__ import annotations

import copy
import fcntl
import hashlib
import json
import math
import os
import tempfile
from contextlib import contextmanager
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from compressor.core.errors import CompressorError
from compressor.core.io import read_json, write_json

SEQ_STEP = 8   # lengths are measured at multiples of this many tokens
# a keep share that drops no token at any length below 4096 (ceil(n * keep) == n), so a graph
# with every pruning point's operators computes its layers on as many tokens as a plain one
KEEP_EVERY_TOKEN = 1.0 - 2.0 ** -12


def seq_bucket(tokens: float) -> int:
    """The length a layer seeing ``tokens`` tokens is looked up at."""
    return max(SEQ_STEP, int(round(tokens / SEQ_STEP)) * SEQ_STEP)


def machine_key(target: str = "cpu", threads: int = 1) -> Tuple[str, dict]:
    """``(key, what it hashes)``: the CPU fingerprint a table belongs to."""
    from compressor.bench.harness import fingerprint

    info = fingerprint("cuda" if target == "gpu" else "cpu")
    what = {"processor": info.get("processor"), "machine": info.get("machine"), "cores": info.get("cores"),
            "cpu_flags": info.get("cpu_flags"), "cpu_preset": info.get("cpu_preset"),
            "onnxruntime": info.get("versions", {}).get("onnxruntime"), "target": target, "threads": threads}
    if target == "gpu":   # CPU tables keep the key they had
        what["gpu"], what["cuda"] = info.get("gpu"), info.get("cuda")
    key = hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:12]
    return key, what


def default_path(target: str = "cpu", threads: int = 1) -> str:
    """``$COMPRESSOR_CACHE`` (or ``~/.cache/compressor``)``/latency/<fingerprint>.json``."""
    root = os.environ.get("COMPRESSOR_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "compressor")
    return os.path.join(root, "latency", f"{machine_key(target, threads)[0]}.json")


def timing_texts(seq: int, count: int) -> List[str]:
    """``count`` sentences of ``seq`` tokens with the specials ([CLS] ... [SEP]): a word each."""
    return [" ".join(["the"] * max(1, seq - 2))] * count


# the table's format and what its graphs are (the comment in LatencyTable.__init__)
FAMILY_VERSION = "v5"

class LatencyTable:
    """Layer and overhead latencies (p50, ms) of one model family on this machine.

    ``teacher`` is the task checkpoint whose family (architecture, width, head size, labels,
    tokenizer) is measured; ``rows`` a few labelled examples (static INT8 calibrates on them).
    """

    def __init__(self, path: str, teacher: str, task, rows, threads: int = 1, target: str = "cpu",
                 sentences: int = 30, log=None, read_only: bool = False, hint: str = "",
                 num_labels: Optional[int] = None, max_length: Optional[int] = None):
        from compressor.core.arch import arch_of
        from compressor.core.models import load_config, read_meta

        self.path, self.teacher, self.task, self.rows = path, teacher, task, rows
        self.threads, self.target, self.sentences = threads, target, sentences
        self.log = log or (lambda msg: None)
        # read_only: a table measured on another machine (the target): predictions only, never a
        # measurement here; an entry it lacks is an error that ends with ``hint`` (how to measure it)
        self.read_only, self.hint = read_only, hint
        self.config = load_config(teacher)
        if num_labels is not None:   # a model of the family that is not a task checkpoint
            self.config.num_labels = num_labels
        spec = arch_of(self.config)
        self.full = (spec.num_heads(self.config), spec.ffn_size(self.config))
        # a layer of the teacher's shape is timed as the slope between one layer and the teacher's
        # depth: a difference over many layers, not one, so one timing's noise is spread thin
        self.span = max(2, int(getattr(self.config, spec.num_layers_key, 2) or 2))
        self.max_length = read_meta(teacher).get("max_length", max_length or 128)
        # "v5": every shape timed at one layer and at the teacher's depth, its cost per layer taken
        # between the two by a candidate's depth, in graphs whose SkipLayerNormalization the export
        # writes back as Add + LayerNormalization, the teacher's shape kept as timed where the
        # overhead comes out below 0 (v4 priced it by the slope there; v3 timed the fused node;
        # v2 timed shapes at the teacher's depth alone, v1 as one layer; their entries are not used
        # and are measured again)
        self.family = (f"{FAMILY_VERSION}|{self.config.model_type}|d{spec.hidden_size(self.config)}|"
                       f"a{self.full[0]}|n{getattr(self.config, 'num_labels', 2)}|L{self.max_length}")
        if read_only:
            self.data = self._read()
            self.key, self.machine = self.data.get("machine_key"), self.data.get("machine") or {}
            measured_at = (self.machine.get("target", "cpu"), self.machine.get("threads", 1))
            if measured_at != (target, threads):
                raise CompressorError(f"the target table {path} was measured for --target {measured_at[0]} at "
                                      f"{measured_at[1]} thread(s); give --target {measured_at[0]} "
                                      f"--threads {measured_at[1]}")
        else:
            self.key, self.machine = machine_key(target, threads)
            self.data = self._read()

    # -- the file --------------------------------------------------------------
    def _read(self) -> dict:
        if self.read_only:
            if not os.path.isfile(self.path):
                raise CompressorError(f"the target table {self.path} does not exist; {self._how()}")
            data = read_json(self.path)
            if not isinstance(data, dict) or "layers" not in data:
                raise CompressorError(f"{self.path} is not a latency table (no layers)")
            return data
        if os.path.exists(self.path):
            data = read_json(self.path)
            if data.get("machine_key") != self.key:
                raise CompressorError(f"{self.path} is a latency table of another machine "
                                      f"({data.get('machine_key')}, this one is {self.key}); give another path")
            return data
        return {"machine_key": self.key, "machine": self.machine, "layers": {}, "shallow": {}, "overhead": {},
                "exits": {}, "tokens": {}, "measured": {}, "checks": []}

    def _fill(self, missing: Callable[[], list], measure: Callable[[list], None], kind: str = "layer") -> None:
        """Measure what ``missing()`` lists and keep it in the file; ``missing`` is asked again under
        the file lock, since another process may have measured it meanwhile. A read-only table
        measures nothing: what it lacks is one error naming the first entry (``kind``) and the hint."""
        lacking = missing()
        if not lacking:
            return
        if self.read_only:
            more = f" (and {len(lacking) - 1} more)" if len(lacking) > 1 else ""
            raise MissingEntry(f"the target table {self.path} lacks {describe_entry(kind, lacking[0])}{more}; "
                               f"{self._how()}")
        with self._locked():
            todo = missing()
            if todo:
                measure(todo)
                write_json(self.path, self.data)

    def _how(self) -> str:
        return self.hint or "measure it on the target machine: compressor auto MODEL --measure-table"

    @contextmanager
    def _locked(self):
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        with open(self.path + ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                self.data = self._read()
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _layer_key(self, precision: str, seq: int, heads: int, ffn: int) -> str:
        return f"{self.family}|{precision}|s{seq}|h{heads}|f{ffn}"

    def _overhead_key(self, precision: str, seq: int) -> str:
        return f"{self.family}|{precision}|s{seq}"

    # -- predicting ----------------------------------------------------------------
    def predict(self, layers: Sequence[Tuple[int, int]], precision, seqs: Sequence[int],
                overhead_precision: Optional[str] = None, reach: Optional[Sequence[float]] = None,
                prunes_tokens: bool = False) -> float:
        """p50 ms of a model whose layer ``i`` keeps ``layers[i] = (heads, ffn)`` and sees
        ``seqs[i]`` tokens, at ``precision`` (fp32, dynamic, static; or one per layer, as a mixed
        graph keeps some layers FP32; the rest of the model at ``overhead_precision``, default the
        first layer's). ``reach[i]``: the share of rows that compute layer ``i`` (early exit: the
        rest left before it), 1 for all by default. ``prunes_tokens``: the graph drops tokens after
        every layer but the last (token pruning), which adds :meth:`token_cost`'s point cost after
        each of those layers, at the tokens it sees, and its graph cost once. Measures what the
        table lacks."""
        seqs = [seq_bucket(s) for s in seqs]
        precisions = [precision] * len(layers) if isinstance(precision, str) else list(precision)
        rest = overhead_precision or precisions[0]
        needs = {(p, s, h, f) for (h, f), s, p in zip(layers, seqs, precisions)} | {(rest, seqs[0]) + self.full}
        self.ensure(needs)
        total = self.data["overhead"][self._overhead_key(rest, seqs[0])]
        for (h, f), s, p, share in zip(layers, seqs, precisions, reach or [1.0] * len(layers)):
            total += share * self.layer_cost(p, s, h, f, len(layers))
        if reach is not None:   # an exit after every layer but the last, asked by the rows that got there
            total += sum(reach[:-1]) * self.exit_cost(rest, seqs[0])
        if prunes_tokens and len(layers) > 1:
            self.ensure_tokens({(rest, s) for s in seqs[:-1]})
            total += self.token_cost(rest, seqs[0])["graph"]
            total += sum(self.token_cost(rest, s)["point"] for s in seqs[:-1])
        return round(total, 4)

    def layer_cost(self, precision: str, seq: int, heads: int, ffn: int, depth: int) -> float:
        """What a layer of ``(heads, ffn)`` costs in a model of ``depth`` layers: its cost at the
        teacher's depth (``layers``) and in a one-layer model (``shallow``: its weights stay in the
        cache) taken linearly between the two by ``depth`` (clipped to them), so a uniform model of
        either depth is predicted as it was timed. Without a ``shallow`` entry, the deep cost."""
        key = self._layer_key(precision, seq, heads, ffn)
        deep, shallow = self.data["layers"][key], self.data.get("shallow", {}).get(key)
        if shallow is None:
            return deep
        share = (min(max(depth, 1), self.span) - 1) / (self.span - 1)
        return shallow + (deep - shallow) * share

    def token_cost(self, precision: str, seq: int) -> dict:
        """What token pruning adds to a graph at ``precision`` and ``seq`` tokens, measured once:
        ``point``, one pruning point (the importance from the attention probabilities, the TopK,
        the gathers of the hidden states and the mask, and its layer run unfused), and ``graph``,
        once per graph (what else it loses: the embeddings' fusion, the last layer's attention
        fusion). Both not below 0."""
        key = self._overhead_key(precision, seq_bucket(seq))
        self.ensure_tokens({(precision, seq_bucket(seq))})
        return self.data["tokens"][key]

    def ensure_tokens(self, needs: Iterable[Tuple[str, int]]) -> None:
        """Measure the token costs of every ``(precision, seq)`` not in the table (a table written
        before they were kept has none: they are measured as they are asked)."""
        def missing():
            return sorted(n for n in set(needs) if self._overhead_key(*n) not in self.data.setdefault("tokens", {}))

        def measure(todo):
            for precision in sorted({p for p, _ in todo}):
                self._measure_tokens(precision, sorted({s for p, s in todo if p == precision}))

        self._fill(missing, measure, "tokens")

    def _measure_tokens(self, precision: str, seqs: List[int]) -> None:
        """Random models of the teacher's shape at two layers and at the teacher's depth (three at
        least), each plain and token-pruned with a keep share that drops nothing (every pruning
        point's operators, the layers on as many tokens as the plain graph's), timed together at
        each length: the extra time's slope over the layers is a pruning point, the rest the
        graph's own cost. The graphs take any length: they are exported once for all ``seqs``."""
        counts = (2, max(3, self.span))
        self.log(f"latency table: measuring token pruning's cost at {'/'.join(map(str, seqs))} tokens, "
                 f"{precision}, {self.threads} thread(s)")
        with tempfile.TemporaryDirectory(prefix=".auto-latency-") as work:
            models = {}
            for count in counts:
                models[("plain", count)] = self._as_precision(work, self._block_export(work, *self.full, count),
                                                              precision)
                models[("tokens", count)] = self._as_precision(work, self._token_export(work, count), precision)
            times = {seq: self._time(models, seq) for seq in seqs}
        low, high = counts
        for seq, t in times.items():
            extra = {n: t[("tokens", n)] - t[("plain", n)] for n in counts}
            # low layers hold low - 1 pruning points, high layers high - 1
            point = max((extra[high] - extra[low]) / (high - low), 0.0)
            graph = max(extra[low] - (low - 1) * point, 0.0)
            self.data.setdefault("tokens", {})[self._overhead_key(precision, seq)] = {
                "point": round(point, 4), "graph": round(graph, 4)}
            for (kind, n), ms in t.items():
                self.data["measured"][f"{self.family}|{precision}|s{seq}|{kind}|layers{n}"] = round(ms, 4)
        self._keep()

    def _token_export(self, work: str, count: int) -> str:
        """A random model of the teacher's family, ``count`` layers of its shape, that runs every
        pruning point but drops no token (token_prune by ratio, ``KEEP_EVERY_TOKEN``), exported."""
        from compressor.export.onnx import export_onnx
        from compressor.tokens import prune_tokens

        def pruned(model, tokenizer):
            return prune_tokens(model, {"by": "ratio", "keep": KEEP_EVERY_TOKEN, "learn": False}, tokenizer).eval()

        # eager attention: the pruning points read the layers' attention probabilities
        checkpoint = self._random_checkpoint(work, f"tokens-l{count}", *self.full, count, wrap=pruned,
                                             attn_implementation="eager")
        export_onnx(checkpoint, checkpoint + "-onnx", parity=False)
        return checkpoint + "-onnx"

    def exit_cost(self, precision: str, seq: int) -> float:
        """What one exit costs a row that reaches it (its head, the rule, the next segment's call),
        at ``precision`` (fp32 or INT8: the segments' precision) and ``seq`` tokens; measured once."""
        precision = "fp32" if precision == "fp32" else "dynamic"
        self.ensure_exits({(precision, seq_bucket(seq))})
        return self.data["exits"][self._overhead_key(precision, seq_bucket(seq))]

    def ensure_exits(self, needs: Iterable[Tuple[str, int]]) -> None:
        """Measure an exit's cost at every ``(precision, seq)`` (fp32 or dynamic) not in the table."""
        def missing():
            return sorted(n for n in set(needs) if self._overhead_key(*n) not in self.data.setdefault("exits", {}))

        def measure(todo):
            for precision, seq in todo:
                self._measure_exit(precision, seq)

        self._fill(missing, measure, "exit")

    def _measure_exit(self, precision: str, seq: int) -> None:
        """Two layers of the teacher's shape with an exit after the first that no row takes (every
        row asks it, then runs the second segment), against the same two layers without exits:
        the difference is one exit's cost."""
        self.log(f"latency table: measuring an exit's cost at {seq} tokens, {precision}, {self.threads} thread(s)")
        with tempfile.TemporaryDirectory(prefix=".auto-latency-") as work:
            plain = self._as_precision(work, self._block_export(work, *self.full, 2), precision)
            chained = self._exit_export(work, precision)
            times = self._time({"plain": plain, "exit": chained}, seq)
        self.data["exits"][self._overhead_key(precision, seq)] = round(max(times["exit"] - times["plain"], 0.0), 4)
        self.data["measured"][f"{self.family}|{precision}|s{seq}|exit"] = round(times["exit"], 4)
        self._keep()

    def _exit_export(self, work: str, precision: str) -> str:
        from compressor.core.settings import config_from_dict
        from compressor.exit import EarlyExitModel, ExitExportConfig, export_segments
        from compressor.exit.rules import never_exits

        checkpoint = self._random_checkpoint(
            work, "exit-l2", *self.full, 2,
            wrap=lambda model, _: EarlyExitModel(model, None, rule="entropy", threshold=never_exits("entropy", 2)))
        out = os.path.join(work, f"exit-l2-{precision}-onnx")
        export_segments(checkpoint, out, config_from_dict(ExitExportConfig, {
            "int8": precision != "fp32", "preset": "avx2", "parity": False}, what="early_exit_export"))
        return out

    def ensure(self, needs: Iterable[Tuple[str, int, int, int]]) -> None:
        """Measure every ``(precision, seq, heads, ffn)`` layer (and its overhead) not in the table."""
        def missing():
            return sorted(n for n in set(needs) if self._layer_key(*n) not in self.data["layers"]
                          or self._overhead_key(n[0], n[1]) not in self.data["overhead"])

        self._fill(missing, self._measure)

    def _measure(self, needs: List[Tuple[str, int, int, int]]) -> None:
        """Time the layers ``needs`` asks for: each model exported (and quantised) once, timed at
        every length that asks for it, the table written after each length (a stopped measurement
        keeps the lengths it finished)."""
        plan, wanted = {}, {}   # seq -> (precisions, fresh, shapes); model -> the lengths it is timed at
        for seq in sorted({n[1] for n in needs}):
            precisions = sorted({n[0] for n in needs if n[1] == seq})
            # the teacher's shape at one layer and at its depth gives the overhead and a layer, once per
            # precision and length
            fresh = any(self._overhead_key(p, seq) not in self.data["overhead"] for p in precisions)
            shapes = sorted({(n[2], n[3]) for n in needs if n[1] == seq} | ({self.full} if fresh else set()))
            plan[seq] = (precisions, fresh, shapes)
            for heads, ffn in shapes:
                # every shape at one layer and at the teacher's depth: one layer's weights stay in
                # the cache, a deep model's do not (a shape timed at one depth alone was priced too
                # cheap in deep candidates, or too dear in shallow ones)
                for count in (1, self.span):
                    for precision in precisions:
                        wanted.setdefault((precision, heads, ffn, count), set()).add(seq)
        shapes = sorted({k[1:3] for k in wanted})
        self.log(f"latency table: measuring {len(shapes)} layer shape(s) at {'/'.join(map(str, sorted(plan)))} "
                 f"tokens, {'/'.join(sorted({k[0] for k in wanted}))}, {self.threads} thread(s)")
        with tempfile.TemporaryDirectory(prefix=".auto-latency-") as work:
            models, exported = {}, {}
            for precision, heads, ffn, count in sorted(wanted):
                if (heads, ffn, count) not in exported:
                    exported[(heads, ffn, count)] = self._block_export(work, heads, ffn, count)
                models[(precision, heads, ffn, count)] = self._as_precision(work, exported[(heads, ffn, count)],
                                                                            precision)
            for seq, (precisions, fresh, shapes) in plan.items():
                times = self._time({k: v for k, v in models.items() if seq in wanted[k]}, seq)
                self._keep_layers(seq, precisions, fresh, shapes, times)
                self._keep()

    def _keep_layers(self, seq: int, precisions: List[str], fresh: bool, shapes: list, times: dict) -> None:
        for precision in precisions:
            if fresh:
                one, top = times[(precision,) + self.full + (1,)], times[(precision,) + self.full + (self.span,)]
                layer = max((top - one) / (self.span - 1), 1e-4)
                self.data["overhead"][self._overhead_key(precision, seq)] = round(max(one - layer, 0.0), 4)
            overhead = self.data["overhead"][self._overhead_key(precision, seq)]
            for heads, ffn in shapes:
                # the shape's share of a model of the teacher's depth and of a one-layer model, the
                # overhead taken out. For the teacher's shape both are the slope (the overhead is what
                # the slope leaves of one layer), unless one layer timed under the slope (its weights
                # in the cache): then the overhead is 0, and the two models are predicted as timed,
                # where the slope for both priced the teacher's depth 6% over its own timing
                key = self._layer_key(precision, seq, heads, ffn)
                deep = max((times[(precision, heads, ffn, self.span)] - overhead) / self.span, 1e-4)
                shallow = max(times[(precision, heads, ffn, 1)] - overhead, 1e-4)
                self.data["layers"][key] = round(deep, 4)
                self.data.setdefault("shallow", {})[key] = round(shallow, 4)
        for k, t in times.items():
            self.data["measured"][f"{self.family}|{k[0]}|s{seq}|h{k[1]}|f{k[2]}|layers{k[3]}"] = round(t, 4)

    def _keep(self) -> None:
        """Write the table as measured so far (under the file lock :meth:`_fill` holds)."""
        write_json(self.path, self.data)

    def _random_checkpoint(self, work: str, name: str, heads: int, ffn: int, count: int, wrap=None,
                           **build) -> str:
        """``work/name``: a random model of the teacher's family with ``count`` layers of ``(heads,
        ffn)`` (``build``: build_model's options), ``wrap(model, tokenizer)`` around it if given, saved."""
        from compressor.core.arch import arch_of
        from compressor.core.models import checkpoint_meta, load_tokenizer, save_checkpoint
        from compressor.core.shapes import build_model

        config = copy.deepcopy(self.config)
        setattr(config, arch_of(config).num_layers_key, count)
        model = build_model(config, {"layers": count, "heads": [heads] * count, "ffn": [ffn] * count}, **build).eval()
        tokenizer = load_tokenizer(self.teacher)
        if wrap is not None:
            model = wrap(model, tokenizer)
        checkpoint = os.path.join(work, name)
        save_checkpoint(model, tokenizer, checkpoint, checkpoint_meta(self.task, self.max_length, "auto:latency"))
        return checkpoint

    def _block_export(self, work: str, heads: int, ffn: int, count: int) -> str:
        """A random model of the teacher's family with ``count`` layers of ``(heads, ffn)``, exported."""
        from compressor.export.onnx import export_onnx

        checkpoint = self._random_checkpoint(work, f"h{heads}-f{ffn}-l{count}", heads, ffn, count)
        export_onnx(checkpoint, checkpoint + "-onnx", parity=False)
        return checkpoint + "-onnx"

    def _as_precision(self, work: str, fp32: str, precision: str) -> str:
        if precision == "fp32":
            return fp32
        from compressor.quantize import quantize, quantize_config

        out = f"{fp32}-{precision}"
        settings = {"calibration_samples": len(self.rows)} if precision == "static" else {}
        quantize(fp32, out, quantize_config(method=precision, **settings), dev_set=self.rows,
                 train_set=self.rows)
        return out

    def _time(self, models: Dict[tuple, str], seq: int) -> Dict[tuple, float]:
        return time_folders(models, seq, self.threads, self.sentences, self.target)

    # -- checking ----------------------------------------------------------------
    def missing(self, layers: Iterable[tuple] = (), tokens: Iterable[tuple] = (),
                exits: Iterable[tuple] = ()) -> List[Tuple[str, tuple]]:
        """``(kind, entry)`` of each entry asked for that the table lacks: ``layers`` as
        :meth:`ensure` takes them, ``tokens`` and ``exits`` as ``(precision, seq)``."""
        data = self.data
        lacking = [("layer", n) for n in sorted(set(layers)) if self._layer_key(*n) not in data["layers"]
                   or self._overhead_key(n[0], n[1]) not in data["overhead"]]
        lacking += [("tokens", n) for n in sorted(set(tokens)) if self._overhead_key(*n) not in data.get("tokens", {})]
        lacking += [("exit", n) for n in sorted(set(exits)) if self._overhead_key(*n) not in data.get("exits", {})]
        return lacking

    def describe(self) -> str:
        """The machine the table was measured on, in words (its ``machine`` block)."""
        return describe_machine(self.machine)

    def check(self, name: str, folder: str, predicted_ms: float, seq: int, texts: Optional[list] = None) -> dict:
        """Measure the whole model in ``folder`` at ``seq`` tokens beside its prediction; keep it.
        ``texts``: time on these sentences instead (an early-exit model's depth depends on them)."""
        if self.read_only:
            raise CompressorError(f"{self.path} is the target's table: whole models are measured on the target")
        measured = time_folders({name: folder}, seq_bucket(seq), self.threads, self.sentences, self.target,
                                texts=texts)[name]
        record = {"model": name, "seq": seq_bucket(seq), "predicted_ms": round(predicted_ms, 4),
                  **({"texts": "held-out rows"} if texts else {}),
                  "measured_ms": round(measured, 4),
                  "error": round(abs(predicted_ms - measured) / measured, 4) if measured > 0 else None}
        with self._locked():
            self.data["checks"].append({**record, "family": self.family})
            write_json(self.path, self.data)
        return record


class MissingEntry(CompressorError):
    """A read-only (target) table lacks an entry a prediction needs."""


def describe_entry(kind: str, entry: tuple) -> str:
    """An entry of the table in words: ``layer`` (precision, seq, heads, ffn), ``tokens`` or
    ``exit`` (precision, seq)."""
    if kind == "layer":
        precision, seq, heads, ffn = entry
        return f"the layer of {heads} heads and FFN {ffn} at {seq} tokens, {precision}"
    precision, seq = entry
    what = "token pruning's cost" if kind == "tokens" else "an exit's cost"
    return f"{what} at {seq} tokens, {precision}"


def describe_machine(machine: dict) -> str:
    """``AMD EPYC (x86_64, 2 cores, avx512_vnni), onnxruntime 1.32.0, 1 thread(s)`` from a table's
    ``machine`` block."""
    inside = ", ".join(str(v) for v in (machine.get("machine"),
                                        f"{machine['cores']} cores" if machine.get("cores") else None,
                                        machine.get("cpu_preset")) if v)
    text = f"{machine.get('processor') or 'an unnamed processor'}" + (f" ({inside})" if inside else "")
    if machine.get("target") == "gpu" and machine.get("gpu"):
        text = f"{machine['gpu']} on {text}"
    if machine.get("onnxruntime"):
        text += f", onnxruntime {machine['onnxruntime']}"
    return text + f", {machine.get('threads', 1)} thread(s)"


def time_folders(models: Dict[object, str], seq: int, threads: int, sentences: int, target: str = "cpu",
                 texts: Optional[list] = None) -> Dict[object, float]:
    """p50 ms at batch 1 of each ONNX folder on sentences of ``seq`` tokens (or ``texts``), each in a
    process of its own, timed in rounds by the benchmark harness; ``target`` gpu runs them with
    onnxruntime's CUDA provider."""
    from compressor.bench.harness import BenchConfig, Spec, isolated_latency, percentiles

    device = "cuda" if target == "gpu" else "cpu"
    names = {f"m{i}": key for i, key in enumerate(models)}
    specs = [Spec(name=n, path=models[key], engine="onnxruntime", device=device) for n, key in names.items()]
    texts = list(texts)[:sentences] if texts else timing_texts(seq, sentences)
    times = isolated_latency(specs, texts, threads,
                             BenchConfig(warmup=5, block=10, pause_s=0.02, memory=False, score=False))
    return {names[n]: percentiles(t)["p50"] for n, t in times.items()}


def gpu_providers() -> List[str]:
    """onnxruntime's providers for ``--target gpu``, or one line saying why there is none here."""
    import onnxruntime

    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        return ["CUDAExecutionProvider", "CPUExecutionProvider"]
    hint = ""
    try:
        import torch

        if torch.cuda.is_available():
            hint = " (torch sees a GPU: install onnxruntime-gpu)"
    except ImportError:
        pass
    raise CompressorError("auto: --target gpu needs a GPU that onnxruntime runs on (its CUDAExecutionProvider); "
                          f"none is present on this machine{hint}; use --target cpu")


def layer_seqs(seq: int, layers: int, keep: float) -> List[int]:
    """The length each layer is looked up at when every layer but the last passes on ``keep`` of
    its tokens, from ``seq`` tokens in. The count starts at ``seq``'s bucket, the length the table
    times and a model is checked at, and is rounded up at each layer as token pruning rounds it."""
    seqs, count = [], seq_bucket(seq)
    for _ in range(layers):
        seqs.append(seq_bucket(count))
        count = math.ceil(count * keep - 1e-9)   # (a product like 10 x 0.8 is 8, not a hair above)
    return seqs


def default_table(config, teacher: str, task, rows, log=None, seq_len: int = 0) -> "LatencyTable":
    """The search's table: ``config.target_table`` read only (another machine's; ``seq_len`` goes into
    the command its errors give), else this machine's (``latency_table`` or the cache's)."""
    if config.target_table:
        from compressor.auto.target import target_table

        return target_table(config, teacher, task, rows, seq_len, log)
    path = config.latency_table or default_path(config.target, config.threads)
    return LatencyTable(path, teacher, task, rows, threads=config.threads, target=config.target,
                        sentences=config.sentences, log=log)


