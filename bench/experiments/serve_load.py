"""Load test of ``compressor serve`` on loopback: dynamic batching against one text per call.

The demo's student (``compressor run compressor/recipe/demo.yaml --out RUN``: MiniLM-L6 distilled
to 3 layers, half its heads and FFN pruned, fine-tuned on SST-2) is served by the real command in
subprocesses, one per graph and mode, all at ``--threads 1``:

- ``int8-dynamic``: the demo's INT8 (``RUN/04-quantize``). Its activation ranges span the batch,
  so ``--rows auto`` runs its texts alone even in a batch (exact); ``int8-dynamic-together``
  (``--rows together``) batches it anyway and counts how far the answers move;
- ``int8-static``: the same student quantised with fixed activation ranges (``compressor quantize
  RUN/03-export --method static``, made in ``--work``): it batches exactly;
- ``fp32``: the demo's FP32 export (``RUN/03-export``).

Each graph runs ``batched`` (``--max-batch 32 --max-wait-ms 5``, groups of ``--bucket 8``) and
``one-per-call`` (``--max-batch 1``); the INT8 graphs also ``batched-wait-0`` (``--max-wait-ms 0``:
a batch is whatever queued while the previous one ran). The model alone (in this process, no
server) is timed per text run alone, in sorted groups of 8 and in one run of 32 padded to its
longest, which says what batching can save on this CPU before any server is involved. A lean asyncio client (raw HTTP/1.1 on kept-alive
connections, so the client costs the shared CPU little) sends SST-2 dev sentences, one per
request, from 1, 8, 32 and 64 concurrent clients; each level stops at a request count or a time
cap. The servers take turns level by level and round by round, so both modes see the same load
from other jobs; the load average is noted at every level. Every answer is compared with the
offline path of ``compressor predict --onnx`` (the runtime, one text at a time): label equal and
every class's score within ``--tolerance``. A direct ``Predictor`` call (one text, 1 thread, in
this process) is timed in every round beside the one-client levels.

Then a soak (``--soak-seconds``, default 600) on the batched ``int8-dynamic`` server samples its
resident memory and the load every 10 s while other clients hang up mid-request, send a body cut
short and send malformed JSON, and checks the well-behaved clients saw no wrong or lost answer.
Everything is bounded in count and time and stops by itself; one JSON file holds the command,
the machine and every figure::

    python -m bench.experiments.serve_load --demo /tmp/demo-run --work /tmp/serve-load \\
        --out bench/results/serve-load/demo-student-cpu.json
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import numpy as np

LEVELS = (1, 8, 32, 64)
ONE = ["--max-batch", "1"]
BATCHED = ["--max-batch", "32", "--max-wait-ms", "5", "--bucket", "8"]
GREEDY = ["--max-batch", "32", "--max-wait-ms", "0", "--bucket", "8"]
# (name, graph, extra options): the servers, in the order they take turns
SERVERS = (("int8-dynamic/one-per-call", "int8-dynamic", ONE),
           ("int8-dynamic/batched", "int8-dynamic", BATCHED),
           ("int8-dynamic/batched-wait-0", "int8-dynamic", GREEDY),
           ("int8-dynamic-together/batched", "int8-dynamic", BATCHED + ["--rows", "together"]),
           ("int8-static/one-per-call", "int8-static", ONE),
           ("int8-static/batched", "int8-static", BATCHED),
           ("int8-static/batched-wait-0", "int8-static", GREEDY),
           ("fp32/one-per-call", "fp32", ONE),
           ("fp32/batched", "fp32", BATCHED))


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def load_average() -> float:
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def graphs(demo: str, work: str, data_dir: str) -> dict:
    """The three graphs of the demo's student; the static INT8 one is made once in ``work``."""
    folders = {"int8-dynamic": os.path.join(demo, "04-quantize"), "fp32": os.path.join(demo, "03-export")}
    for name, folder in folders.items():
        if not os.path.isfile(os.path.join(folder, "manifest.json")):
            raise SystemExit(f"{folder} is missing: run `compressor run compressor/recipe/demo.yaml --out {demo}`")
    static = os.path.join(work, "int8-static")
    if not os.path.isfile(os.path.join(static, "manifest.json")):
        from compressor.core.data import load_split
        from compressor.quantize import OrtStaticConfig, quantize

        quantize(folders["fp32"], static, OrtStaticConfig(), data_dir=data_dir,
                 train_set=load_split("sst2", "train", data_dir), dev_set=load_split("sst2", "dev", data_dir))
    folders["int8-static"] = static
    return folders


def reference(folder: str, texts: list) -> tuple:
    """What ``predict --onnx`` computes: the runtime one text at a time, softmax in float64."""
    from compressor.serve.api import scores
    from compressor.serve.app import open_model
    from compressor.serve.config import ServeConfig

    graph, labels, _, _, _ = open_model(folder, ServeConfig(threads=1))
    return labels, scores(graph.logits(texts, batch_size=1))


class Server:
    def __init__(self, folder: str, extra: list, threads: int):
        self.command = [sys.executable, "-m", "compressor", "serve", folder, "--port", "0",
                        "--threads", str(threads), *extra]
        self.proc = subprocess.Popen(self.command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     env=dict(os.environ, PYTHONUNBUFFERED="1"))
        line = self.proc.stderr.readline()
        found = re.search(r"at http://[\d.]+:(\d+)", line)
        if not found:
            raise SystemExit(f"the server did not start: {line}{self.proc.stderr.read()[-2000:]}")
        self.port = int(found.group(1))
        self.errors_logged = 0
        threading.Thread(target=self._drain, daemon=True).start()   # the request log: the pipe never fills

    def _drain(self):
        for line in self.proc.stderr:
            if '"level": "error"' in line or "Traceback" in line:
                self.errors_logged += 1

    def rss_mib(self) -> float:
        with open(f"/proc/{self.proc.pid}/status") as f:
            return int(next(line.split()[1] for line in f if line.startswith("VmRSS:"))) / 1024

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=60)


class Connection:
    """One kept-alive HTTP/1.1 connection: a request written whole, the answer read by Content-Length."""

    def __init__(self, reader, writer):
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> "Connection":
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple:
        self.writer.write(f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                          f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        head = await self.reader.readuntil(b"\r\n\r\n")
        length = int(re.search(rb"(?i)\r\ncontent-length: *(\d+)", head).group(1))
        return int(head[9:12]), await self.reader.readexactly(length)

    def close(self):
        self.writer.close()


async def batch_counts(port: int) -> tuple:
    conn = await Connection.open(port)
    _, text = await conn.request("GET", "/metrics")
    conn.close()
    values = [float(re.search(rf"^{name} (\S+)$", text.decode(), re.M).group(1))
              for name in ("compressor_batch_size_sum", "compressor_batch_size_count")]
    return values[0], values[1]


async def run_level(port: int, clients: int, cap_requests: int, cap_seconds: float, texts, labels, probs,
                    tolerance: float, start_at: int = 0) -> dict:
    """``clients`` concurrent clients, one text per request, until ``cap_requests`` or ``cap_seconds``."""
    latencies, state = [], {"next": start_at, "sent": 0, "wrong": 0, "flips": 0, "lost": 0, "worst": 0.0}
    sum0, count0 = await batch_counts(port)
    conns = [await Connection.open(port) for _ in range(clients)]
    stop_at = time.perf_counter() + cap_seconds

    async def one_client(conn):
        while state["sent"] < cap_requests and time.perf_counter() < stop_at:
            state["sent"] += 1
            i = state["next"] % len(texts)
            state["next"] += 1
            t0 = time.perf_counter()
            try:
                status, raw = await conn.request("POST", "/predict", json.dumps({"inputs": texts[i]}).encode())
                body = json.loads(raw) if status == 200 else None
            except (OSError, asyncio.IncompleteReadError, ValueError):
                body = None
            latencies.append(time.perf_counter() - t0)
            if body is None:
                state["lost"] += 1
                return   # the connection is in an unknown state: this client stops
            got = {a["label"]: a["score"] for a in body}
            diff = float(max(abs(got[name] - probs[i][k]) for k, name in enumerate(labels)))
            flipped = bool(body[0]["label"] != labels[int(np.argmax(probs[i]))])
            state["worst"] = max(state["worst"], diff)
            state["flips"] += int(flipped)
            state["wrong"] += int(flipped or diff > tolerance)

    t0 = time.perf_counter()
    await asyncio.gather(*(one_client(c) for c in conns))
    seconds = time.perf_counter() - t0
    for c in conns:
        c.close()
    sum1, count1 = await batch_counts(port)
    ms = np.array(latencies) * 1000
    return {"clients": clients, "requests": len(latencies), "seconds": round(seconds, 3),
            "throughput_rps": round(len(latencies) / seconds, 1),
            "p50_ms": round(float(np.percentile(ms, 50)), 2), "p99_ms": round(float(np.percentile(ms, 99)), 2),
            "wrong": state["wrong"], "label_flips": state["flips"], "lost": state["lost"],
            "max_abs_score_diff": float(state["worst"]), "batches": int(count1 - count0),
            "mean_batch": round((sum1 - sum0) / max(count1 - count0, 1), 2), "_ms": ms}


def direct_calls(folder: str, texts: list, count: int) -> dict:
    """A direct ``Predictor`` call (one text, 1 thread) in this process: what a server adds to."""
    from compressor.export.runtime import open_graph

    graph = open_graph(folder, threads=1)
    graph.logits(texts[:20], batch_size=1)
    ms = []
    for i in range(count):
        t0 = time.perf_counter()
        graph.logits([texts[i % len(texts)]], batch_size=1)
        ms.append((time.perf_counter() - t0) * 1000)
    return {"calls": count, "p50_ms": round(float(np.percentile(ms, 50)), 3),
            "p99_ms": round(float(np.percentile(ms, 99)), 3), "_ms": np.array(ms)}


def model_only(folder: str, texts: list, rows: int = 256) -> dict:
    """Milliseconds per text of the graph alone (1 thread): each text alone, sorted groups of 8
    (what ``--bucket 8`` runs), and runs of 32 padded to their longest (SST-2's order)."""
    from compressor.export.runtime import open_graph

    graph = open_graph(folder, threads=1)
    rows_ = texts[:rows]
    graph.logits(rows_[:32], batch_size=1)
    out = {}
    for name, size, batching in (("alone", 1, "sorted"), ("groups_of_8", 8, "sorted"),
                                 ("padded_32", 32, "padded")):
        t0 = time.perf_counter()
        for start in range(0, len(rows_), 32):   # as a server takes them: 32 at a time
            graph.logits(rows_[start:start + 32], batch_size=size, batching=batching)
        out[name] = round((time.perf_counter() - t0) / len(rows_) * 1000, 3)
    return out


async def misbehave(port: int, stop_at: float) -> dict:
    """Clients that hang up mid-request, cut their body short, or send malformed JSON."""
    counts = {"hung_up": 0, "cut_body": 0, "malformed": 0, "malformed_answered_400": 0}
    many = json.dumps({"inputs": ["a long wait for an answer that nobody reads"] * 16}).encode()
    while time.perf_counter() < stop_at:
        conn = await Connection.open(port)   # a whole request, then gone before the answer
        conn.writer.write(b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                          b"Content-Length: %d\r\n\r\n%s" % (len(many), many))
        await conn.writer.drain()
        conn.close()
        counts["hung_up"] += 1
        conn = await Connection.open(port)   # a body shorter than its Content-Length
        conn.writer.write(b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                          b"Content-Length: 1000\r\n\r\n{\"inputs\": \"half")
        await conn.writer.drain()
        conn.close()
        counts["cut_body"] += 1
        conn = await Connection.open(port)
        status, _ = await conn.request("POST", "/predict", b'{"inputs": [unquoted}')
        conn.close()
        counts["malformed"] += 1
        counts["malformed_answered_400"] += int(status == 400)
        await asyncio.sleep(0.5)
    return counts


def trend(samples: list, skip_s: float) -> dict:
    """RSS after the first ``skip_s`` seconds: least-squares slope (MiB per 10 minutes) and spread."""
    t = np.array([s["t"] for s in samples if s["t"] >= skip_s])
    rss = np.array([s["rss_mib"] for s in samples if s["t"] >= skip_s])
    slope = float(np.polyfit(t, rss, 1)[0]) * 600 if len(t) > 2 else float("nan")
    return {"after_s": skip_s, "samples": len(t), "slope_mib_per_10min": round(slope, 3),
            "min_mib": round(float(rss.min()), 1), "max_mib": round(float(rss.max()), 1)}


async def soak(server: Server, seconds: float, clients: int, texts, labels, probs, tolerance) -> dict:
    start = time.perf_counter()
    stop_at = start + seconds
    samples = [{"t": 0.0, "rss_mib": round(server.rss_mib(), 2), "load": load_average()}]

    async def sample():
        while time.perf_counter() < stop_at - 1:
            await asyncio.sleep(10)
            samples.append({"t": round(time.perf_counter() - start, 1), "rss_mib": round(server.rss_mib(), 2),
                            "load": load_average()})

    result, bad, _ = await asyncio.gather(
        run_level(server.port, clients, 10**9, seconds, texts, labels, probs, tolerance),
        misbehave(server.port, stop_at), sample())
    samples.append({"t": round(time.perf_counter() - start, 1), "rss_mib": round(server.rss_mib(), 2),
                    "load": load_average()})
    result.pop("_ms")
    return {"seconds": seconds, "clients": clients, "load": result, "misbehaving": bad,
            "rss_trend": trend(samples, min(60.0, seconds / 4)), "samples": samples}


def summarise(runs: list) -> dict:
    """One server at one level over the rounds: pooled latencies, summed requests and errors."""
    ms = np.concatenate([r["_ms"] for r in runs])
    seconds = sum(r["seconds"] for r in runs)
    requests = sum(r["requests"] for r in runs)
    return {"requests": requests, "throughput_rps": round(requests / seconds, 1),
            "throughput_rps_by_round": [r["throughput_rps"] for r in runs],
            "p50_ms": round(float(np.percentile(ms, 50)), 2), "p99_ms": round(float(np.percentile(ms, 99)), 2),
            "mean_batch": round(float(np.mean([r["mean_batch"] for r in runs])), 2),
            "wrong": sum(r["wrong"] for r in runs), "label_flips": sum(r["label_flips"] for r in runs),
            "lost": sum(r["lost"] for r in runs), "max_abs_score_diff": max(r["max_abs_score_diff"] for r in runs),
            "load_average": [r["load_average"] for r in runs]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.experiments.serve_load")
    parser.add_argument("--demo", required=True, help="the demo's run folder (03-export, 04-quantize)")
    parser.add_argument("--work", required=True, help="folder for the static INT8 graph (reused)")
    parser.add_argument("--out", required=True, help="the JSON file to write")
    parser.add_argument("--data-dir", default=os.environ.get("GLUE_DIR"), help="GLUE folder [default: $GLUE_DIR]")
    parser.add_argument("--threads", type=int, default=1, help="onnxruntime threads of each server")
    parser.add_argument("--rounds", type=int, default=3, help="turns every server takes at every level")
    parser.add_argument("--cap-seconds", type=float, default=4.0, help="longest run of one level")
    parser.add_argument("--cap-requests", type=int, default=3000, help="most requests of one level")
    parser.add_argument("--tolerance", type=float, default=1e-5, help="largest score difference counted right")
    parser.add_argument("--soak-seconds", type=float, default=600.0)
    parser.add_argument("--soak-clients", type=int, default=8)
    args = parser.parse_args(argv)

    from compressor.bench.harness import fingerprint
    from compressor.core.data import load_split
    from compressor.core.results import shown_path

    started = time.time()
    uptime_start = subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    os.makedirs(args.work, exist_ok=True)
    folders = graphs(args.demo, args.work, args.data_dir)
    texts = [ex.texts[0] for ex in load_split("sst2", "dev", args.data_dir).examples]
    refs = {name: reference(folder, texts) for name, folder in folders.items()}
    log(f"{len(texts)} SST-2 dev sentences; references from the runtime at batch 1")

    servers = {name: Server(folders[graph], extra, args.threads) for name, graph, extra in SERVERS}
    graph_of = {name: graph for name, graph, _ in SERVERS}
    runs = {name: {c: [] for c in LEVELS} for name in servers}
    direct = {graph: [] for graph in folders}
    model = {graph: [] for graph in folders}
    try:
        for name, server in servers.items():   # ready, and warmed up untimed
            labels, probs = refs[graph_of[name]]
            asyncio.run(run_level(server.port, 8, 64, 30, texts, labels, probs, args.tolerance))
        for rnd in range(args.rounds):
            for clients in LEVELS:
                if clients == 1:
                    for graph, folder in folders.items():
                        direct[graph].append(direct_calls(folder, texts, 200))
                        model[graph].append(model_only(folder, texts))
                        log(f"round {rnd} {graph}: direct Predictor p50 {direct[graph][-1]['p50_ms']} ms; "
                            f"model alone, per text: {model[graph][-1]}")
                for name, server in servers.items():
                    labels, probs = refs[graph_of[name]]
                    load = load_average()
                    result = asyncio.run(run_level(server.port, clients, args.cap_requests, args.cap_seconds,
                                                   texts, labels, probs, args.tolerance,
                                                   start_at=rnd * 997 + clients))
                    result["load_average"] = load
                    runs[name][clients].append(result)
                    log(f"round {rnd} {name:<31} {clients:>3} clients: {result['throughput_rps']:>7} req/s  "
                        f"p50 {result['p50_ms']:>8} ms  p99 {result['p99_ms']:>8} ms  batch {result['mean_batch']:>5}"
                        f"  wrong {result['wrong']} flips {result['label_flips']} lost {result['lost']}  "
                        f"load {load}")
        soak_result = None
        if args.soak_seconds > 0:
            labels, probs = refs["int8-dynamic"]
            soak_result = asyncio.run(soak(servers["int8-dynamic/batched"], args.soak_seconds, args.soak_clients,
                                           texts, labels, probs, args.tolerance))
            log(f"soak {args.soak_seconds:.0f} s: RSS trend {soak_result['rss_trend']}; load wrong "
                f"{soak_result['load']['wrong']} lost {soak_result['load']['lost']}; {soak_result['misbehaving']}")
    finally:
        exits = {name: server.stop() for name, server in servers.items()}

    record = {
        "command": "python -m bench.experiments.serve_load " + " ".join(argv or sys.argv[1:]),
        "model": "the demo's student (compressor/recipe/demo.yaml): MiniLM-L6 distilled to 3 layers, half its "
                 "heads and FFN pruned, SST-2; max length 64",
        "graphs": {g: {"folder": shown_path(f), "precision": _precision(f)} for g, f in folders.items()},
        "texts": f"SST-2 dev sentences ({len(texts)}), one per request, cycling",
        "client": "asyncio, raw HTTP/1.1 on one kept-alive connection per client, in one process on the same "
                  "2 cores as the servers",
        "answers": f"each compared with the runtime at batch 1 (predict --onnx): wrong = label differs or a "
                   f"score differs by more than {args.tolerance}",
        "uptime": {"start": uptime_start,
                   "end": subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()},
        "server_threads": args.threads, "rounds": args.rounds, "cap_seconds": args.cap_seconds,
        "cap_requests": args.cap_requests,
        "servers": {name: {"command": " ".join(["compressor", *servers[name].command[3:]]),
                           "exit_code": exits[name], "error_lines_logged": servers[name].errors_logged,
                           "levels": {str(c): summarise(runs[name][c]) for c in LEVELS}} for name in servers},
        "direct_predictor": {g: {"p50_ms": round(float(np.percentile(np.concatenate([d["_ms"] for d in v]), 50)), 3),
                                 "p99_ms": round(float(np.percentile(np.concatenate([d["_ms"] for d in v]), 99)), 3),
                                 "calls": sum(d["calls"] for d in v)} for g, v in direct.items()},
        "model_only_ms_per_text": {g: {k: [m[k] for m in v] for k in v[0]} for g, v in model.items()},
        "soak": soak_result, "fingerprint": fingerprint()}
    record["targets"] = targets(record)
    record["seconds_total"] = round(time.time() - started, 1)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(record, f, indent=2)
    os.replace(tmp, args.out)
    log(json.dumps(record["targets"], indent=1))
    log(f"written: {shown_path(args.out)}")
    return 0


def _precision(folder: str) -> str:
    with open(os.path.join(folder, "manifest.json")) as f:
        return json.load(f).get("precision") or "fp32"


def targets(record: dict) -> dict:
    """Issue 35's targets, met or not, from the figures (the demo's INT8 first, then the others)."""
    out = {}
    servers = record["servers"]
    for name in servers:
        graph, mode = name.split("/")
        if mode == "one-per-call" or graph.endswith("-together"):
            continue
        one, batched = servers[f"{graph}/one-per-call"]["levels"], servers[name]["levels"]
        direct = record["direct_predictor"][graph]["p50_ms"]
        out[name] = {
            "throughput_ratio_at_32": round(batched["32"]["throughput_rps"] / one["32"]["throughput_rps"], 2),
            "ratio_at_least_3": batched["32"]["throughput_rps"] >= 3 * one["32"]["throughput_rps"],
            "p99_at_32_batched_vs_one_ms": [batched["32"]["p99_ms"], one["32"]["p99_ms"]],
            "p99_lower_at_32": batched["32"]["p99_ms"] < one["32"]["p99_ms"],
            "one_client_p50_over_direct_ms": round(batched["1"]["p50_ms"] - direct, 2),
            "one_client_within_wait": batched["1"]["p50_ms"] - direct <= 5.0}
    exact = [n for n in servers if not n.startswith("int8-dynamic-together")]
    out["wrong_or_lost_exact_servers"] = sum(lv["wrong"] + lv["lost"] for n in exact
                                             for lv in servers[n]["levels"].values())
    if record["soak"]:
        s = record["soak"]
        out["soak_wrong_or_lost"] = s["load"]["wrong"] + s["load"]["lost"]
        out["soak_rss_slope_mib_per_10min"] = s["rss_trend"]["slope_mib_per_10min"]
        out["soak_rss_stable"] = abs(s["rss_trend"]["slope_mib_per_10min"]) <= 2.0
    return out


if __name__ == "__main__":
    sys.exit(main())
