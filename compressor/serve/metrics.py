"""The server's counters in Prometheus' text exposition format (version 0.0.4).

Few and simple enough to write by hand: counters (with one label at most), gauges and
histograms with fixed buckets. One :class:`Metrics` per server process; the event loop is
the only writer (the model's thread hands its results back to the loop), so no locks.
"""
from __future__ import annotations

import bisect
import math
from typing import Dict, Sequence, Tuple

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class Histogram:
    def __init__(self, buckets: Sequence[float]):
        self.bounds = tuple(buckets)
        self.counts = [0] * (len(self.bounds) + 1)   # the last: above every bound (+Inf only)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def lines(self, name: str) -> list:
        out, running = [], 0
        for bound, n in zip(self.bounds, self.counts):
            running += n
            out.append(f'{name}_bucket{{le="{_number(bound)}"}} {running}')
        out.append(f'{name}_bucket{{le="+Inf"}} {self.count}')
        out.append(f"{name}_sum {_number(self.sum)}")
        out.append(f"{name}_count {self.count}")
        return out


class Metrics:
    """What ``/metrics`` shows: requests by path and status, errors by kind, request latency,
    texts, batch sizes, the queue and requests in flight."""

    def __init__(self):
        self.requests: Dict[Tuple[str, str], int] = {}
        self.errors: Dict[str, int] = {}
        self.texts = 0
        self.latency = Histogram(LATENCY_BUCKETS)
        self.batch_size = Histogram(BATCH_BUCKETS)
        self.batch_seconds = Histogram(LATENCY_BUCKETS)
        self.queue_depth = 0
        self.in_flight = 0

    def request(self, path: str, status: int, seconds: float) -> None:
        key = (path, str(status))
        self.requests[key] = self.requests.get(key, 0) + 1
        if path == "/predict":
            self.latency.observe(seconds)

    def error(self, kind: str) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1

    def batch(self, size: int, seconds: float) -> None:
        self.batch_size.observe(size)
        self.batch_seconds.observe(seconds)
        self.texts += size

    def render(self) -> str:
        lines = ["# HELP compressor_requests_total HTTP requests answered, by path and status code.",
                 "# TYPE compressor_requests_total counter"]
        lines += [f'compressor_requests_total{{path="{_label(p)}",code="{c}"}} {n}'
                  for (p, c), n in sorted(self.requests.items())]
        lines += ["# HELP compressor_errors_total Requests refused or failed, by kind.",
                  "# TYPE compressor_errors_total counter"]
        lines += [f'compressor_errors_total{{kind="{_label(k)}"}} {n}' for k, n in sorted(self.errors.items())]
        lines += ["# HELP compressor_request_duration_seconds Time from a /predict request to its answer.",
                  "# TYPE compressor_request_duration_seconds histogram"]
        lines += self.latency.lines("compressor_request_duration_seconds")
        lines += ["# HELP compressor_batch_size Texts per run of the model (dynamic batching).",
                  "# TYPE compressor_batch_size histogram"]
        lines += self.batch_size.lines("compressor_batch_size")
        lines += ["# HELP compressor_batch_duration_seconds Time of one run of the model.",
                  "# TYPE compressor_batch_duration_seconds histogram"]
        lines += self.batch_seconds.lines("compressor_batch_duration_seconds")
        lines += ["# HELP compressor_texts_total Texts classified.", "# TYPE compressor_texts_total counter",
                  f"compressor_texts_total {self.texts}",
                  "# HELP compressor_queue_depth Texts waiting for the model.", "# TYPE compressor_queue_depth gauge",
                  f"compressor_queue_depth {self.queue_depth}",
                  "# HELP compressor_requests_in_flight /predict requests being answered.",
                  "# TYPE compressor_requests_in_flight gauge",
                  f"compressor_requests_in_flight {self.in_flight}"]
        return "\n".join(lines) + "\n"


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
