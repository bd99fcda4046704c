"""One benchmark variant in its own process (``python -m compressor.bench.worker``).

The benchmark builds every variant in a worker of its own, once per thread count,
and drives the workers in rounds (``compressor.bench.harness``): a variant's idle
thread pools (onnxruntime's spinning workers, PyTorch's OpenMP team) then sit in
another process, asleep by the time the next variant is timed, instead of taking
its cores.

The protocol is JSON lines, never pickle: the parent writes one request per line
on the worker's stdin and reads one reply per line. Replies go out on a duplicate
of the original stdout; the worker's file descriptor 1 is pointed at stderr
before anything is imported, so what a library prints cannot corrupt them.

Requests (``op`` and its arguments) and replies (``ok``, then the op's fields, or
``error``):

- ``build`` ``spec`` (a ``Spec`` as a dict), ``threads``: build the variant;
- ``feeds`` ``key``, ``texts``, ``batch_size``, ``batching``: encode ``texts`` in batches of
  ``batch_size`` (not timed; ``padded``: consecutive texts, ``sorted``/``bucketed``: grouped
  by token count) and keep them under ``key``; replies each batch's ``rows``;
- ``warm`` ``key``, ``indices`` (or ``all``): run those feeds untimed;
- ``time`` ``key``, ``indices``, ``wake`` (``[key, index]``), ``outputs``: run that feed untimed,
  then time each of ``indices``; replies ``times`` (seconds) and with ``outputs`` each
  timed run's logits;
- ``logits`` ``texts``, ``batch_size``: the variant's logits (``logits``, rows in
  input order), for the dev score;
- ``memory`` ``texts``: run each text at batch 1 and all as one batch, then reply
  this process's peak resident memory (``peak_rss_mb``; on CUDA ``cuda_peak_mb``);
- ``quit``.
"""
from __future__ import annotations

import json
import os
import sys
import time

SPIN_OFF_ENV = {"OMP_WAIT_POLICY": "PASSIVE"}   # PyTorch's OpenMP threads sleep when idle


class _Session:
    """The worker's state: one built variant and its encoded inputs."""

    def __init__(self):
        self.runner = None
        self.feeds = {}

    def build(self, spec: dict, threads: int) -> dict:
        from compressor.bench.harness import GRAPH_ENGINES, Spec, build

        spec = Spec(**spec)
        if spec.engine not in GRAPH_ENGINES:   # an onnxruntime or OpenVINO variant's worker never loads torch
            import torch

            torch.set_num_threads(threads)
        start = time.perf_counter()
        self.runner = build(spec, threads=threads)
        return {"build_s": round(time.perf_counter() - start, 3)}

    def _need(self):
        if self.runner is None:
            raise RuntimeError("no variant built yet")
        return self.runner

    def feeds_op(self, key: str, texts: list, batch_size: int = 1, batching: str = "padded") -> dict:
        """``batching`` ``padded``: consecutive texts make a batch; ``sorted``/``bucketed``: the
        texts are grouped by their token count first (``export.runtime.batch_groups``)."""
        from compressor.export.runtime import batch_groups

        r = self._need()
        texts = [t if isinstance(t, str) else tuple(t) for t in texts]
        lengths = [_width(r.encode([t])) for t in texts] if batch_size > 1 else [0] * len(texts)
        groups = batch_groups(lengths, batch_size, batching)
        self.feeds[key] = [r.encode([texts[i] for i in idx]) for idx in groups]
        return {"count": len(self.feeds[key]), "rows": groups,
                "padded_tokens": sum(len(idx) * max(lengths[i] for i in idx) for idx in groups) if any(lengths) else None,
                "tokens": sum(lengths) if any(lengths) else None}

    def warm(self, key: str, indices=None) -> dict:
        r, feeds = self._need(), self.feeds[key]
        for i in range(len(feeds)) if indices is None else indices:
            r.run(feeds[i])
        r.sync()
        return {}

    def time_op(self, key: str, indices: list, wake=None, outputs: bool = False) -> dict:
        r, feeds = self._need(), self.feeds[key]
        if wake is not None:   # wakes this worker's thread pools; not timed
            r.run(self.feeds[wake[0]][wake[1]])
            r.sync()
        times, kept = [], []
        for i in indices:
            feed = feeds[i]
            start = time.perf_counter()
            out = r.run(feed)
            r.sync()
            times.append(time.perf_counter() - start)
            if outputs:   # the timed run's logits, converted after the clock stopped
                kept.append(out)
        if outputs:
            from compressor.bench.harness import _numpy

            return {"times": times, "outputs": [_numpy(o).tolist() for o in kept]}
        return {"times": times}

    def logits(self, texts: list, batch_size: int) -> dict:
        texts = [t if isinstance(t, str) else tuple(t) for t in texts]
        return {"logits": self._need().logits(texts, batch_size=batch_size).tolist()}

    def memory(self, texts: list) -> dict:
        from compressor.bench.memprobe import peak_rss_mb

        r = self._need()
        texts = [t if isinstance(t, str) else tuple(t) for t in texts]
        for text in texts:
            r.run(r.encode([text]))
        r.run(r.encode(texts))
        r.sync()
        out = {"peak_rss_mb": round(peak_rss_mb(), 1)}
        if r.spec.device.startswith("cuda"):
            import torch

            out["cuda_peak_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
        return out


def _width(feed) -> int:
    """The padded width (tokens per row) of one encoded batch: a dict of inputs or a tuple."""
    first = feed["input_ids"] if isinstance(feed, dict) else feed[0]
    return int(first.shape[-1])


def serve(requests, reply) -> None:
    """Answer each request line until ``quit`` or the end of input."""
    from compressor.core.errors import CompressorError

    session = _Session()
    ops = {"build": session.build, "feeds": session.feeds_op, "warm": session.warm, "time": session.time_op,
           "logits": session.logits, "memory": session.memory}
    for line in requests:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
            op = request.pop("op")
            if op == "quit":
                reply({"ok": True})
                return
            if op not in ops:
                raise ValueError(f"unknown request {op!r}")
            answer = {"ok": True, **ops[op](**request)}
        except CompressorError as exc:
            answer = {"ok": False, "error": str(exc)}
        except Exception as exc:   # reported to the parent, which raises it as one line
            answer = {"ok": False, "error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:500]}"}
        reply(answer)


def main() -> None:
    from compressor.core.children import follow_parent

    follow_parent()   # a benchmark killed outright leaves no worker timing on alone
    # the replies keep the real stdout; fd 1 (and sys.stdout) now lead to stderr
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def reply(answer: dict) -> None:
        out.write(json.dumps(answer) + "\n")
        out.flush()

    serve(sys.stdin, reply)


if __name__ == "__main__":
    main()


# -- the parent's side -------------------------------------------------------------

class Worker:
    """The parent's handle on one worker process: ``call(op, **args)`` returns its reply.

    ``threads`` sizes the worker's thread pools (``OMP_NUM_THREADS`` too, so PyTorch's
    OpenMP team is that size from the start); a spec with ``spinning`` off also gets
    ``OMP_WAIT_POLICY=PASSIVE``. What the worker writes to stderr is kept in a
    temporary file; its last line explains a worker that dies.
    """

    def __init__(self, spec, threads: int):
        import subprocess
        import tempfile

        self.name, self.spec, self.threads = spec.name, spec, threads
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
        if not spec.spinning:
            env.update(SPIN_OFF_ENV)
        self._stderr = tempfile.TemporaryFile()
        from compressor.core import children

        self.proc = subprocess.Popen([sys.executable, "-m", "compressor.bench.worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._stderr, env=children.env(env), text=True,
                                     encoding="utf-8", bufsize=1)

    def send(self, op: str, **args) -> None:
        try:
            self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self._died()

    def receive(self) -> dict:
        from compressor.core.errors import CompressorError

        line = self.proc.stdout.readline()
        if not line:
            self._died()
        answer = json.loads(line)
        if not answer.pop("ok", False):
            raise CompressorError(f"{self.name}: {answer.get('error')}")
        return answer

    def call(self, op: str, **args) -> dict:
        self.send(op, **args)
        return self.receive()

    def _died(self):
        from compressor.core.errors import CompressorError

        code = self.proc.wait()
        self._stderr.seek(0)
        lines = [ln.strip() for ln in self._stderr.read().decode("utf-8", "replace").splitlines() if ln.strip()]
        last = f": {lines[-1][:300]}" if lines else ""
        raise CompressorError(f"{self.name}: its benchmark process stopped (exit code {code}){last}")

    def ask_to_quit(self) -> None:
        """Tell the process to finish (without waiting), so several can wind down at once."""
        if self.proc.poll() is None and not getattr(self, "_asked_to_quit", False):
            self._asked_to_quit = True
            try:
                self.send("quit")
            except Exception:
                pass

    def close(self) -> None:
        import subprocess

        if self.proc.poll() is None:
            self.ask_to_quit()
            try:
                self.proc.wait(timeout=10)
            except Exception:
                pass
        if self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        self._stderr.close()


class Workers:
    """Workers for ``specs`` at ``threads``, built side by side; ``with`` closes them all."""

    def __init__(self, specs, threads: int):
        self.items = []
        try:
            self.items = [Worker(s, threads) for s in specs]
            for w in self.items:
                w.send("build", spec=asdict_spec(w.spec), threads=threads)
            for w in self.items:
                w.receive()
        except BaseException:
            self.close()
            raise

    def __iter__(self):
        return iter(self.items)

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]

    def close(self) -> None:
        for w in self.items:   # all told first, then each waited for: they quit side by side
            w.ask_to_quit()
        for w in self.items:
            w.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def asdict_spec(spec) -> dict:
    from dataclasses import asdict

    return asdict(spec)
