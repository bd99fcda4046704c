"""Dynamic batching: texts from concurrent requests queue up and run through the model together.

One asyncio task takes the first waiting text and every text queued behind it (``max_batch``
at most), runs the model on them in a thread of its own (the event loop keeps taking requests
meanwhile) and hands each text's logits back to the request that sent it. While one batch runs
the next one gathers, so a busy server runs full batches back to back. A batch waits for more
texts (``max_wait_ms`` after its first at most) only while the server is busy, that is when the
previous batch held more than one text: a lone client's text runs at once, with no wait.

A batch runs in groups of at most ``bucket`` texts of like token count (the runtime sorts them),
each padded to its own longest text: one run padded to the batch's longest computes about
twice the tokens it holds on SST-2's sentences, which costs more than the batch saves. Each
group's texts are answered as soon as it has run.
"""
from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import List, Optional, Sequence

import numpy as np

_STOP = object()


@dataclass
class _Item:
    text: object
    future: asyncio.Future


class Batcher:
    """Queue texts for ``graph`` (a ``Predictor`` or an early-exit ``SegmentChain``).

    ``alone``: run each text of a batch by itself (a dynamic INT8 graph, whose activation
    ranges are taken over the whole batch: batched, one client's answer would depend on the
    texts of others). ``bucket``: most texts of one run of the model, grouped by token count.
    ``on_batch(size, seconds)`` is told of every batch, on the event loop.
    """

    def __init__(self, graph, max_batch: int = 32, max_wait_ms: float = 5.0, alone: bool = False,
                 on_batch=None, on_queue=None, bucket: int = 8):
        self.graph = graph
        self.max_batch = max_batch
        self.max_wait = max_wait_ms / 1000.0
        self.alone = alone
        self.bucket = max(1, bucket)
        self._last_size = 0   # texts in the previous batch: more than one, the server is busy
        self.on_batch = on_batch or (lambda size, seconds: None)
        self.on_queue = on_queue or (lambda depth: None)
        self._queue: Optional[asyncio.Queue] = None
        self._task: Optional[asyncio.Task] = None
        # one thread: the model runs one batch at a time, with all its onnxruntime threads
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="compressor-model")

    def start(self) -> None:
        self._queue = asyncio.Queue()
        self._task = asyncio.get_running_loop().create_task(self._serve(), name="compressor-batcher")

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def submit(self, texts: Sequence) -> np.ndarray:
        """The logits of ``texts`` (one row each, in order), once the batches holding them ran."""
        if not self.running:
            raise RuntimeError("the batcher is not running")
        loop = asyncio.get_running_loop()
        futures = [loop.create_future() for _ in texts]
        for text, future in zip(texts, futures):
            self._queue.put_nowait(_Item(text, future))
        self.on_queue(self._queue.qsize())
        rows = await asyncio.gather(*futures)
        return np.stack(rows)

    async def stop(self) -> None:
        """Run every text already queued, then end the batching task and its thread."""
        if self._task is None:
            return
        if not self._task.done():
            self._queue.put_nowait(_STOP)
            await self._task
        self._executor.shutdown(wait=True)
        self._task = None

    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()
        stopping = False
        while not stopping:
            first = await self._queue.get()
            if first is _STOP:
                break
            items: List[_Item] = [first]
            deadline = loop.time() + (self.max_wait if self._last_size > 1 else 0.0)
            while len(items) < self.max_batch:
                try:
                    item = self._queue.get_nowait()
                except asyncio.QueueEmpty:
                    left = deadline - loop.time()
                    if left <= 0:   # an idle server runs a lone text at once
                        break
                    try:
                        item = await asyncio.wait_for(self._queue.get(), left)
                    except (asyncio.TimeoutError, TimeoutError):
                        break
                if item is _STOP:
                    stopping = True
                    break
                items.append(item)
            self.on_queue(self._queue.qsize())
            self._last_size = len(items)
            await self._run([i for i in items if not i.future.done()])   # a cancelled request's texts drop out

    async def _run(self, items: List[_Item]) -> None:
        if not items:
            return
        loop = asyncio.get_running_loop()
        start = time.perf_counter()
        try:
            await loop.run_in_executor(self._executor, self._work, loop, items)
        except Exception as exc:   # the model failed: every request of this batch not answered gets the error
            for i in items:
                if not i.future.done():
                    i.future.set_exception(exc)
            return
        self.on_batch(len(items), time.perf_counter() - start)

    def _work(self, loop, items: List[_Item]) -> None:
        """In the model's thread: run the batch group by group and hand each group's rows back as
        soon as it has run, so its clients are answered (and send their next texts) while the rest
        of the batch computes, instead of every client of a batch waiting for its last group."""
        for rows, logits in self._groups([i.text for i in items]):
            loop.call_soon_threadsafe(_deliver, [items[r] for r in rows], logits)

    def _groups(self, texts: list):
        """``(rows, logits)`` per run of the model: one text each (``alone``), else groups of
        ``bucket`` texts of like token count, each padded to its own longest (the runtime's
        ``feeds``: one tokenizer call for the batch); a graph without ``feeds`` (an early-exit
        chain, whose rows leave at their exits) runs groups in arrival order."""
        size = 1 if self.alone else min(self.bucket, len(texts))
        feeds = getattr(self.graph, "feeds", None)
        if feeds is not None:
            for rows, feed in feeds(texts, size, "sorted"):
                yield rows, self.graph.run(feed)
            return
        for start in range(0, len(texts), size):
            rows = list(range(start, min(start + size, len(texts))))
            yield rows, self.graph.logits([texts[r] for r in rows], batch_size=len(rows))


def _deliver(items: List[_Item], logits: np.ndarray) -> None:
    for i, row in zip(items, logits):
        if not i.future.done():   # a request whose client went away is skipped
            i.future.set_result(row)
