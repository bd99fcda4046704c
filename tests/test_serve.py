"""compressor serve: Hugging Face's text-classification JSON over the torch-free runtime, dynamic
batching, limits, health/readiness/metrics, graceful shutdown, and the real command on loopback."""
import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

import warnings  # noqa: E402

with warnings.catch_warnings():   # starlette 1.x would rather have httpx2; httpx 0.28 works as before
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient  # noqa: E402

from compressor.serve.api import BadRequest, answers, parse_request  # noqa: E402
from compressor.serve.app import create_app, open_model  # noqa: E402
from compressor.serve.batcher import Batcher  # noqa: E402
from compressor.serve.config import ServeConfig  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEXTS = ["a gripping , funny film", "flat and lifeless", "it is what it is , no more",
         "the best thing this year", "i walked out after ten minutes", "fine"]
PAIRS = [("the cat sat", "a cat was sitting"), ("it rains", "the sun is out")]


def offline(folder, tmp_path, texts):
    """What ``compressor predict FOLDER --onnx --probabilities`` writes for ``texts``: (label, probs)."""
    from compressor.export.onnx import predict_file

    rows = tmp_path / "rows.tsv"
    rows.write_text("sentence\n" + "\n".join(texts) + "\n")
    predict_file(folder, str(rows), str(tmp_path / "labels.tsv"), probabilities=True)
    lines = (tmp_path / "labels.tsv").read_text().splitlines()
    names = lines[0].split("\t")[2:]
    return [(cells[1], dict(zip(names, map(float, cells[2:])))) for cells in (line.split("\t") for line in lines[1:])]


def assert_same_as_offline(answer, expected):
    label, probs = expected
    assert answer[0]["label"] == label
    assert [a["score"] for a in answer] == sorted((a["score"] for a in answer), reverse=True)
    for a in answer:   # predict writes probabilities with 4 decimals
        assert abs(a["score"] - probs[f"p_{a['label']}"]) <= 5e-5, (a, probs)


def metric(text, name):
    """The value of one sample line of the /metrics text."""
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    assert found, name
    return float(found.group(1))


# -- the request and answer shapes, without a server ---------------------------------------

@pytest.mark.unit
def test_inputs_take_the_hugging_face_shapes_and_refuse_others_with_one_line():
    assert parse_request({"inputs": "good"}, 8, 100) == (["good"], True, {})
    assert parse_request({"inputs": {"text": "a", "text_pair": "b"}}, 8, 100)[:2] == ([("a", "b")], True)
    texts, single, params = parse_request(
        {"inputs": ["x", {"text": "a", "text_pair": "b"}, ["c", "d"], {"text": "y"}],
         "parameters": {"top_k": 1, "function_to_apply": "none", "truncation": True}}, 8, 100)
    assert texts == ["x", ("a", "b"), ("c", "d"), "y"] and not single
    assert params == {"top_k": 1, "function_to_apply": "none"}
    for body, status, says in (([1], 422, '"inputs"'), ({"input": "x"}, 422, '"inputs"'),
                               ({"inputs": []}, 422, "empty list"), ({"inputs": 3}, 422, "must be a string"),
                               ({"inputs": ["a"] * 9}, 413, "at most 8"), ({"inputs": "x" * 101}, 413, "at most 100"),
                               ({"inputs": ["ok", " "]}, 422, '"inputs"[1]: the text is empty'),
                               ({"inputs": "x", "parameters": {"top_k": 0}}, 422, "top_k"),
                               ({"inputs": "x", "parameters": {"function_to_apply": "tanh"}}, 422, "softmax")):
        with pytest.raises(BadRequest, match=re.escape(says)) as caught:
            parse_request(body, 8, 100)
        assert caught.value.status == status and "\n" not in str(caught.value)


@pytest.mark.unit
def test_answers_list_every_class_by_falling_score_and_follow_top_k():
    logits = np.array([[0.0, 2.0], [1.0, -1.0]])
    one = answers(logits[:1], ["negative", "positive"], False, True, {})
    assert [a["label"] for a in one] == ["positive", "negative"]
    assert abs(sum(a["score"] for a in one) - 1) < 1e-12 and one[0]["score"] == pytest.approx(1 / (1 + np.exp(-2)))
    both = answers(logits, ["negative", "positive"], False, False, {"top_k": 1})
    assert [[a["label"] for a in row] for row in both] == [["positive"], ["negative"]]
    raw = answers(logits, None, False, False, {"function_to_apply": "none"})
    assert raw[1] == [{"label": "LABEL_0", "score": 1.0}, {"label": "LABEL_1", "score": -1.0}]
    assert answers(np.array([[3.5]]), None, True, True, {}) == [{"label": "score", "score": 3.5}]


# -- the application in process --------------------------------------------------------------

@pytest.fixture(scope="module")
def client(export_dir):
    config = ServeConfig(max_batch=16, max_wait_ms=200.0, max_texts=8, max_chars=200, max_body_bytes=4096)
    with TestClient(create_app(export_dir, config)) as c:
        yield c


def test_answers_are_the_offline_predictions_with_label_names_and_scores(client, export_dir, tmp_path):
    expected = offline(export_dir, tmp_path, TEXTS)
    one = client.post("/predict", json={"inputs": TEXTS[0]})
    assert one.status_code == 200 and one.headers["content-type"] == "application/json"
    assert_same_as_offline(one.json(), expected[0])
    assert {a["label"] for a in one.json()} == {"negative", "positive"}   # SST-2's names, as predict writes
    many = client.post("/predict", json={"inputs": TEXTS})
    assert len(many.json()) == len(TEXTS)
    for answer, want in zip(many.json(), expected):
        assert_same_as_offline(answer, want)
    # a pair, in either of its shapes, is the runtime's pair (two segments), not two texts
    graph = open_model(export_dir, ServeConfig())[0]
    want = graph.logits(PAIRS, batch_size=1)
    for body in ({"inputs": {"text": PAIRS[0][0], "text_pair": PAIRS[0][1]}},
                 {"inputs": [list(PAIRS[0])]}):
        got = client.post("/predict", json={**body, "parameters": {"function_to_apply": "none"}}).json()
        got = got if isinstance(got[0], dict) else got[0]
        assert sorted(a["score"] for a in got) == pytest.approx(sorted(want[0]), abs=1e-5)


def test_a_bad_request_is_one_line_of_json_and_the_next_one_is_answered(client):
    before = client.get("/metrics").text
    for body, status, says in ((b'{"inputs": "unclosed', 400, "not valid JSON"),
                               (b"\xff\xfe", 400, "not valid JSON"),
                               (json.dumps({"inputs": "x" * 201}).encode(), 413, "at most 200"),
                               (json.dumps({"inputs": ["ok"] * 9}).encode(), 413, "at most 8"),
                               (json.dumps({"inputs": "y" * 5000}).encode(), 413, "at most 4096"),
                               (json.dumps({"texts": ["ok"]}).encode(), 422, '"inputs"')):
        r = client.post("/predict", content=body, headers={"content-type": "application/json"})
        assert r.status_code == status, r.text
        assert set(r.json()) == {"error"} and says in r.json()["error"] and "\n" not in r.json()["error"]
        assert client.post("/predict", json={"inputs": "still here"}).status_code == 200
    after = client.get("/metrics").text
    assert metric(after, 'compressor_errors_total{kind="bad_json"}') == \
        2 + (metric(before, 'compressor_errors_total{kind="bad_json"}') if 'kind="bad_json"' in before else 0)
    assert metric(after, 'compressor_errors_total{kind="too_large"}') >= 1
    assert client.get("/predict").status_code == 405 and "error" in client.get("/nowhere").json()


def test_health_ready_and_metrics_count_what_happened(client):
    assert client.get("/health").json() == {"status": "ok"}
    ready = client.get("/ready")
    assert ready.status_code == 200 and ready.json()["status"] == "ready" and ready.json()["kind"] == "fp32"
    before = client.get("/metrics")
    assert before.headers["content-type"].startswith("text/plain; version=0.0.4")
    key = 'compressor_requests_total{path="/predict",code="200"}'
    had = metric(before.text, key) if key in before.text else 0
    texts_before = metric(before.text, "compressor_texts_total")
    latency_before = metric(before.text, "compressor_request_duration_seconds_count")
    for _ in range(3):
        client.post("/predict", json={"inputs": ["one", "two"]})
    after = client.get("/metrics").text
    assert metric(after, key) == had + 3
    assert metric(after, "compressor_texts_total") == texts_before + 6
    assert metric(after, "compressor_request_duration_seconds_count") == latency_before + 3
    assert metric(after, 'compressor_request_duration_seconds_bucket{le="+Inf"}') == \
        metric(after, "compressor_request_duration_seconds_count")
    assert "# TYPE compressor_batch_size histogram" in after and metric(after, "compressor_queue_depth") == 0


def test_concurrent_requests_share_batches(client):
    before = client.get("/metrics").text
    runs_before = metric(before, "compressor_batch_size_count")
    ones_before = metric(before, 'compressor_batch_size_bucket{le="1.0"}')
    client.post("/predict", json={"inputs": TEXTS[:2]})   # a batch of two: busy, so texts wait for company
    runs_before += 1
    with ThreadPoolExecutor(8) as pool:   # 8 clients at once, one text each; the batcher waits 200 ms
        replies = list(pool.map(lambda t: client.post("/predict", json={"inputs": t}), TEXTS + TEXTS[:2]))
    assert all(r.status_code == 200 for r in replies)
    after = client.get("/metrics").text
    runs = metric(after, "compressor_batch_size_count") - runs_before
    assert 1 <= runs < 8   # fewer runs of the model than requests
    assert metric(after, 'compressor_batch_size_bucket{le="1.0"}') - ones_before < runs  # some held >1 text
    # the answer of a text does not depend on the texts it shared a batch with (FP32, sorted batches)
    alone = client.post("/predict", json={"inputs": TEXTS[1], "parameters": {"function_to_apply": "none"}}).json()
    with ThreadPoolExecutor(4) as pool:
        shared = list(pool.map(lambda t: client.post("/predict", json={
            "inputs": t, "parameters": {"function_to_apply": "none"}}).json(), [TEXTS[1]] + TEXTS[2:5]))
    assert [a["score"] for a in shared[0]] == pytest.approx([a["score"] for a in alone], abs=1e-5)


def test_int8_and_early_exit_folders_are_served_as_predict_runs_them(export_dir, tmp_path, glue_dir, minilm_dir):
    import torch
    import transformers

    from compressor.core.data import get_task, load_split
    from compressor.core.data.readers import Example
    from compressor.core.models import checkpoint_meta, save_checkpoint
    from compressor.exit.configs import ExitExportConfig
    from compressor.exit.model import EarlyExitModel
    from compressor.exit.segments import export_segments
    from compressor.quantize import OrtDynamicConfig, quantize
    from conftest import tiny_config

    int8 = str(tmp_path / "int8")
    quantize(export_dir, int8, OrtDynamicConfig(), dev_set=load_split("sst2", "dev", glue_dir, limit=8))
    _, _, _, alone, kind = open_model(int8, ServeConfig())
    assert kind == "int8-dynamic" and alone   # its activation ranges span a batch: texts run alone
    assert not open_model(int8, ServeConfig(rows="together"))[3]

    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    config = tiny_config("bert")
    config.num_hidden_layers, config.num_labels, config.vocab_size = 2, 2, tokenizer.vocab_size
    torch.manual_seed(0)
    net = transformers.AutoModelForSequenceClassification.from_config(config, attn_implementation="eager")
    model = EarlyExitModel(net.eval(), layers=[1]).eval()
    for head in model.heads:   # confident first-exit heads for some rows, unsure for others
        torch.nn.init.normal_(head.out.weight, std=3.0)
    model.set_rule("max_prob", 0.8)
    ee = str(tmp_path / "ee")
    save_checkpoint(model, tokenizer, ee, checkpoint_meta(get_task("sst2"), 32, "test"))
    segments = str(tmp_path / "seg")
    export_segments(ee, segments, ExitExportConfig(int8=False),
                    examples=[Example((t,), 1, str(i)) for i, t in enumerate(TEXTS)])
    assert open_model(segments, ServeConfig())[4] == "early-exit segments"

    for folder in (int8, segments):
        expected = offline(folder, tmp_path, TEXTS)
        with TestClient(create_app(folder, ServeConfig(max_wait_ms=100.0))) as c:
            c.post("/predict", json={"inputs": TEXTS[:2]})   # busy: the next texts wait for company
            with ThreadPoolExecutor(len(TEXTS)) as pool:
                replies = list(pool.map(lambda t: c.post("/predict", json={"inputs": t}).json(), TEXTS))
            batched = metric(c.get("/metrics").text, "compressor_batch_size_count")
        assert batched < 1 + len(TEXTS)
        for answer, want in zip(replies, expected):
            assert_same_as_offline(answer, want)


def test_a_static_int8_graph_batches_exactly_and_is_served_batched(export_dir, tmp_path, glue_dir):
    """Fixed activation ranges: a text's answer does not depend on the texts it shares a batch with
    (up to padding, which the attention mask hides), so ``--rows auto`` runs it together; the
    served answers are predict's within float rounding."""
    from compressor.core.data import load_split
    from compressor.quantize import OrtStaticConfig, quantize

    static = str(tmp_path / "static")
    quantize(export_dir, static, OrtStaticConfig(calibration_samples=16, preset="avx512_vnni"),
             train_set=load_split("sst2", "train", glue_dir, limit=16),
             dev_set=load_split("sst2", "dev", glue_dir, limit=8))
    graph, _, _, alone, kind = open_model(static, ServeConfig())
    assert kind == "int8-static" and not alone
    texts = TEXTS + [t + " , and then some more words to pad the others" for t in TEXTS]
    one_by_one = graph.logits(texts, batch_size=1)
    for group in (len(texts), 4):   # one run padded to the longest; groups of like length
        together = graph.logits(texts, batch_size=group)
        assert np.abs(together - one_by_one).max() <= 1e-5
        assert (together.argmax(-1) == one_by_one.argmax(-1)).all()
    expected = offline(static, tmp_path, texts)
    with TestClient(create_app(static, ServeConfig(max_wait_ms=300.0, bucket=32))) as c:
        c.post("/predict", json={"inputs": ["warm", "up"]})   # a batch of two: the server counts as busy
        with ThreadPoolExecutor(len(texts)) as pool:
            replies = list(pool.map(lambda t: c.post("/predict", json={"inputs": t}).json(), texts))
        page = c.get("/metrics").text
    assert metric(page, "compressor_batch_size_count") < 1 + len(texts)   # texts shared runs
    for answer, want in zip(replies, expected):
        assert_same_as_offline(answer, want)


def test_serving_imports_no_torch(export_dir):
    code = ("import sys\nfrom starlette.testclient import TestClient\n"
            "from compressor.serve.app import create_app\n"
            f"with TestClient(create_app({export_dir!r})) as c:\n"
            "    assert c.post('/predict', json={'inputs': 'good'}).status_code == 200\n"
            "import compressor.cli.serve, compressor.serve.server\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout[-500:]


# -- batching and shutdown -------------------------------------------------------------------

class SlowGraph:
    """A stand-in for the runtime: logits are the text's length, after ``delay`` seconds per run."""

    labels, regression = ["short", "long"], False

    def __init__(self, delay=0.0):
        self.delay, self.runs, self.groups = delay, [], []

    def logits(self, texts, batch_size=1):
        self.runs.append(len(texts))
        self.groups.append(batch_size)
        time.sleep(self.delay)
        return np.array([[0.0, float(len(t))] for t in texts], np.float32)


@pytest.mark.unit
def test_the_batcher_runs_up_to_max_batch_together_and_answers_what_is_queued_before_it_stops():
    async def scenario():
        graph = SlowGraph(delay=0.05)
        batcher = Batcher(graph, max_batch=4, max_wait_ms=50.0)
        batcher.start()
        jobs = [asyncio.ensure_future(batcher.submit(["x" * n])) for n in range(1, 11)]
        await asyncio.sleep(0)   # all ten queued
        await batcher.stop()   # stops only once every queued text has run
        runs = list(graph.runs)
        return runs, await asyncio.gather(*jobs)

    runs, rows = asyncio.run(scenario())
    assert runs == [4, 4, 2] and [r[0][1] for r in rows] == list(range(1, 11))


@pytest.mark.unit
def test_a_lone_text_runs_at_once_and_a_busy_server_waits_for_company_in_groups_of_bucket():
    """The wait applies only after a batch of more than one text (the server is busy); a batch
    runs in groups of at most ``bucket`` texts (the runtime sorts them by token count)."""
    async def scenario():
        graph = SlowGraph()
        batcher = Batcher(graph, max_batch=16, max_wait_ms=400.0, bucket=3,
                          on_batch=lambda size, seconds: sizes.append(size))
        batcher.start()
        t0 = time.perf_counter()
        await batcher.submit(["alone"])   # idle server: no 400 ms wait
        lone = time.perf_counter() - t0
        await batcher.submit(["a", "bb", "ccc", "dddd", "eeeee"])   # one request, five texts: one batch
        t0 = time.perf_counter()   # busy now: the next text waits for company, joined by a late one
        first = asyncio.ensure_future(batcher.submit(["x"]))
        await asyncio.sleep(0.1)
        late = await batcher.submit(["yy"])
        await first
        waited = time.perf_counter() - t0
        await batcher.stop()
        return lone, waited, graph, late

    sizes = []
    lone, waited, graph, late = asyncio.run(scenario())
    assert lone < 0.2 and 0.3 < waited < 2.0, (lone, waited)
    assert sizes == [1, 5, 2] and graph.runs == [1, 3, 2, 2] and late[0][1] == 2.0


@pytest.mark.unit
def test_each_group_of_a_batch_is_answered_as_soon_as_it_has_run():
    async def scenario():
        graph = SlowGraph(delay=0.3)
        batcher = Batcher(graph, max_batch=4, max_wait_ms=0.0, bucket=2)
        batcher.start()
        t0, done = time.perf_counter(), {}

        async def ask(n):
            await batcher.submit(["x" * n])
            done[n] = time.perf_counter() - t0

        await asyncio.gather(*(ask(n) for n in range(1, 5)))
        await batcher.stop()
        return graph.runs, done

    runs, done = asyncio.run(scenario())
    assert runs == [2, 2]   # one batch of the four texts queued together, run as two groups
    assert done[1] < 0.5 and done[2] < 0.5 and done[3] > 0.55 and done[4] > 0.55, done


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_stop_while_a_request_is_in_flight_answers_it_first(export_dir):
    """What SIGTERM does to uvicorn (should_exit): no new connections, the request in flight
    (held 1 s by the model) is answered, then the batcher drains and the server ends."""
    import httpx
    import uvicorn

    graph = SlowGraph(delay=1.0)
    app = create_app(export_dir, ServeConfig(max_wait_ms=0.0), model=(graph, graph.labels, False, False, "test"))
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None,
                                           access_log=False, timeout_graceful_shutdown=10))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 20
    while not server.started and time.time() < deadline:
        time.sleep(0.05)
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(httpx.post, f"{url}/predict", json={"inputs": "abc"}, timeout=20)
        while not graph.runs and time.time() < deadline:
            time.sleep(0.01)
        server.should_exit = True
        reply = pending.result()
    thread.join(20)
    assert reply.status_code == 200 and reply.json()[0] == {"label": "long", "score": pytest.approx(1 / (1 + np.exp(-3)))}
    assert not thread.is_alive()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/health", timeout=2)


@pytest.mark.e2e
def test_the_command_serves_on_loopback_and_exits_0_on_sigterm(export_dir, tmp_path):
    import httpx

    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "compressor", "serve", export_dir, "--port", "0",
                             "--max-wait-ms", "20", "--threads", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    try:
        line = proc.stderr.readline()
        found = re.search(r"at (http://127\.0\.0\.1:\d+)", line)
        assert found, line + proc.stderr.read()[-2000:] if proc.poll() is not None else line
        url = found.group(1)
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                if httpx.get(f"{url}/ready", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        reply = httpx.post(f"{url}/predict", json={"inputs": ["a gripping film", "flat"]}, timeout=10)
        assert reply.status_code == 200 and len(reply.json()) == 2
        bad = httpx.post(f"{url}/predict", content=b"{not json", timeout=10)
        assert bad.status_code == 400 and "not valid JSON" in bad.json()["error"]
        assert 'code="200"' in httpx.get(f"{url}/metrics", timeout=10).text
        with httpx.Client(timeout=10) as keep_alive:   # one connection: no 40 ms delayed-ACK stall per
            waits = []                                  # answer (the listening socket sets TCP_NODELAY)
            for _ in range(7):
                t0 = time.perf_counter()
                keep_alive.get(f"{url}/health")
                waits.append(time.perf_counter() - t0)
        assert sorted(waits)[3] < 0.03, waits
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err[-2000:]
    logged = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    requests = [entry for entry in logged if entry.get("event") == "request" and entry["path"] == "/predict"]
    assert [(r["status"], r["texts"]) for r in requests] == [(200, 2), (400, None)]
    assert all(isinstance(r["ms"], float) for r in requests)
    assert "stopped: every request in flight was answered" in err and "Traceback" not in err


@pytest.mark.e2e
def test_a_folder_the_runtime_cannot_run_is_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    out = subprocess.run([sys.executable, "-m", "compressor", "serve", str(tmp_path / "empty"), "--port", "0"],
                         capture_output=True, text=True, cwd=ROOT)
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 1 and len(lines) == 1 and "export folder (no manifest.json)" in lines[0], out.stderr


@pytest.mark.e2e
def test_without_the_serve_extra_the_command_says_what_to_install(export_dir):
    code = ("import sys\nsys.modules['uvicorn'] = None\nfrom compressor.cli import main\n"
            f"main(['serve', {export_dir!r}, '--port', '0'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 1 and len(lines) == 1, out.stderr
    assert lines[0] == "error: compressor serve needs uvicorn: pip install 'compressor[serve]'"
