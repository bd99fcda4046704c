"""The benchmark harness, the peers and the recipe stages export -> bench on tiny models."""
import json
import os
import re

import numpy as np
import pytest
import torch

from compressor.core.data import load_split
from compressor.core.errors import CompressorError
from compressor.core.results import REQUIRED, read_results

pytestmark = pytest.mark.e2e



@pytest.fixture(scope="module")
def teacher(checkpoint):
    """The tiny SST-2 classifier; its ONNX export is ``export_dir`` (tests/conftest.py)."""
    return checkpoint


@pytest.fixture(scope="module")
def dev():
    return load_split("sst2", "dev", data_dir="embedded", limit=48)


def test_percentiles_and_interleaving():
    from compressor.bench.harness import Runner, Spec, interleaved_latency, percentiles

    p = percentiles([0.001 * i for i in range(1, 101)])
    assert p["p50"] == pytest.approx(50.5) and p["p90"] == pytest.approx(90.1) and p["p99"] == pytest.approx(99.01)
    calls = []

    def runner(name):
        return Runner(Spec(name, "x"), encode=lambda texts: texts[0], run=lambda feed: calls.append((name, feed)))

    times = interleaved_latency([runner("a"), runner("b"), runner("c")], ["s1", "s2", "s3"], warmup=0)
    assert {k: len(v) for k, v in times.items()} == {"a": 3, "b": 3, "c": 3}
    # each sentence is run by every variant before the next; who goes first rotates
    assert [c[0] for c in calls] == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert [c[1] for c in calls[:3]] == ["s1"] * 3


def test_peers_are_built_and_int8_is_smaller(teacher, tmp_path):
    from compressor.bench.peers import peer_specs

    specs = peer_specs(teacher, str(tmp_path / "peers"), ["pytorch-fp32", "pytorch-int8", "ort-fp32",
                                                          "ort-o2", "ort-o2-int8"], preset="avx2")
    by = {s.name: s for s in specs}
    assert by["ort-o2"].path.endswith("model_optimized.onnx") and os.path.isfile(by["ort-o2"].path)
    assert os.path.isfile(by["ort-o2-int8"].path) and "avx2" in by["ort-o2-int8"].source
    assert by["ort-o2-int8"].size_bytes < by["ort-fp32"].size_bytes
    assert by["pytorch-int8"].size_bytes < by["pytorch-fp32"].size_bytes
    with pytest.raises(CompressorError, match="unknown peer"):
        peer_specs(teacher, str(tmp_path / "p2"), ["tensorrt"])
    with pytest.raises(CompressorError, match="preset"):
        peer_specs(teacher, str(tmp_path / "p2"), ["ort-o2-int8"], preset="neon9")


def test_a_stopped_benchmark_keeps_what_it_finished_and_a_rerun_measures_every_variant(
        teacher, export_dir, dev, tmp_path, monkeypatch, capsys):
    """One results file: a run stopped at its second thread count keeps the first; the run
    again, complete, measures every variant (one benchmark of each kind, not two complete ones).
    The stopped run times the teacher's ONNX export (its worker starts in a fraction of a second;
    a PyTorch one imports torch and transformers: seconds, twice)."""
    from compressor.bench import harness
    from compressor.bench.harness import BenchConfig
    from compressor.bench.report import collect, markdown
    from compressor.bench.suite import run_benchmark

    timed = harness.rounds_latency
    calls = []

    def stop_at_the_second(*args, **kwargs):   # as a user's Ctrl-C or a time limit would
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return timed(*args, **kwargs)

    monkeypatch.setattr(harness, "rounds_latency", stop_at_the_second)
    out = str(tmp_path / "results.json")
    stopped = BenchConfig(sentences=4, warmup=1, threads=[1, 2], batch_sizes=[], memory=False)
    with pytest.raises(KeyboardInterrupt):
        run_benchmark([], teacher=export_dir, peers=[], config=stopped, dev=dev, out=out, command="test",
                      log=lambda m: None)
    saved = read_results(out)
    assert saved["config"]["complete"] is False
    assert [(r["name"], r["threads"]) for r in saved["rows"]] == [("teacher", 1)]
    row = saved["rows"][0]
    assert row["value"] is not None and row["retention"] == 1.0 and row["latency_ms"]["p50"] > 0
    assert "Incomplete:" in markdown(collect([out]))
    monkeypatch.setattr(harness, "rounds_latency", timed)
    capsys.readouterr()

    onnx_dir = export_dir
    config = BenchConfig(sentences=12, warmup=2, threads=[1, 2], batch_sizes=[4], throughput_batches=2,
                         memory=True)
    # the peers are built and timed as any variant is (test_architectures: ort-o2-int8 in a worker)
    doc = run_benchmark([f"mine={onnx_dir}"], teacher=teacher, peers=["pytorch-fp32"],
                        config=config, dev=dev, out=out, command="test")
    saved = read_results(out)
    assert saved["config"]["complete"] is True and {r["threads"] for r in saved["rows"]} == {1, 2}
    assert "Incomplete:" not in markdown(collect([out]))
    # the default log stamps each step with the seconds since the start (where a long run's time went)
    steps = capsys.readouterr().err.splitlines()
    assert steps and all(re.match(r"\[ *\d+ s\] ", line) for line in steps), steps
    assert any("building 2 variants, each in its own process" in line for line in steps)

    rows = doc["rows"]
    names = {r["name"] for r in rows}
    assert names == {"teacher", "mine"}   # the teacher in FP32 is the pytorch-fp32 peer
    for r in rows:
        assert all(k in r for k in REQUIRED)
        assert r["threads"] in (1, 2) and r["batch_size"] in (1, 4)
        if r["batch_size"] == 1:
            lat = r["latency_ms"]
            assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"] and r["sentences"] == 12
        else:
            assert r["throughput"] > 0
        assert r["value"] is not None and r["teacher_value"] is not None
        assert r["extra"]["peak_rss_mb"] > 10
    teacher_row = next(r for r in rows if r["name"] == "teacher")
    mine_row = next(r for r in rows if r["name"] == "mine")
    assert mine_row["value"] == teacher_row["value"] and mine_row["retention"] == 1.0  # same model, other engine
    # the export's parameters are counted off its graph: the checkpoint's count
    assert mine_row["parameters"] == teacher_row["parameters"] > 0
    assert {r["extra"]["timing"]["isolation"].split()[0] for r in rows} == {"process"}
    assert saved_timing(out)["pause_s"] == config.pause_s
    assert saved["command"] == "test" and len(saved["rows"]) == len(rows)
    fp = saved["fingerprint"]
    assert fp["cores"] and "cpu_flags" in fp and fp["versions"]["onnxruntime"] and fp["cpu_preset"]


def saved_timing(path):
    return read_results(path)["config"]["timing"]


def test_graph_parameters_are_the_checkpoints(minilm_pair, tmp_path):
    from compressor.bench.suite import onnx_parameters, specs_for
    from compressor.core.models import count_parameters, load_for_task
    from compressor.quantize import quantize
    from compressor.quantize.configs import quantize_config

    checkpoint, onnx_dir = minilm_pair
    params = count_parameters(load_for_task(checkpoint)[0])
    int8 = str(tmp_path / "int8")
    quantize(onnx_dir, int8, quantize_config(method="dynamic", preset="avx2"),
             dev_set=load_split("sst2", "dev", data_dir="embedded", limit=8))
    assert specs_for(onnx_dir)[0].parameters == specs_for(int8)[0].parameters == params  # the manifest's
    # counted off the graph: the same weights, the INT8 graph's scales and zero points left out
    assert onnx_parameters(os.path.join(onnx_dir, "model.onnx")) == params
    assert onnx_parameters(os.path.join(int8, "model.onnx")) == params
    manifest = json.load(open(os.path.join(int8, "manifest.json")))
    del manifest["parameters"]    # an export folder made before the manifest carried the count
    json.dump(manifest, open(os.path.join(int8, "manifest.json"), "w"))
    assert specs_for(int8)[0].parameters == params
    assert onnx_parameters(str(tmp_path / "missing.onnx")) is None


def test_worker_replies_survive_library_prints_and_errors_are_one_line(export_dir, tmp_path):
    """A worker's stdout belongs to the protocol: what a library prints (Python or C) goes to
    stderr; a variant that cannot be built is one line naming it."""
    import subprocess
    import sys
    from dataclasses import asdict

    from compressor.bench.harness import Spec
    from compressor.bench.worker import Worker

    noisy = ("import os\nfrom compressor.bench import worker as w\nbuild = w._Session.build\n"
             "def loud(self, *a, **k):\n    print('printed by a library')\n"
             "    os.write(1, b'written to fd 1\\n')\n    return build(self, *a, **k)\n"
             "w._Session.build = loud\nw.main()\n")
    request = json.dumps({"op": "build", "spec": asdict(Spec("t", export_dir, "onnxruntime")), "threads": 1})
    done = subprocess.run([sys.executable, "-c", noisy], input=request + "\n" + '{"op": "quit"}\n',
                          capture_output=True, text=True, timeout=300)
    replies = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["ok"] for r in replies] == [True, True] and replies[0]["build_s"] > 0
    assert "printed by a library" in done.stderr and "written to fd 1" in done.stderr
    worker = Worker(Spec("broken", str(tmp_path / "nowhere"), "onnxruntime"), 1)
    try:
        with pytest.raises(CompressorError) as err:
            worker.call("build", spec=asdict(worker.spec), threads=1)
        assert str(err.value).startswith("broken: ") and "\n" not in str(err.value)
        with pytest.raises(CompressorError, match="unknown request"):
            worker.call("explode")
    finally:
        worker.close()
    assert worker.proc.returncode is not None


@pytest.fixture(scope="module")
def minilm_pair(tmp_path_factory, minilm_dir):
    """MiniLM-L6 with an untrained SST-2 head (a few ms a sentence here) and its ONNX export."""
    from compressor.core.data import get_task
    from compressor.export.onnx import export_onnx
    from compressor.core.models import checkpoint_meta, load_for_task, save_checkpoint

    root = tmp_path_factory.mktemp("minilm")
    torch.manual_seed(0)
    net, tokenizer = load_for_task(minilm_dir, get_task("sst2"))
    save_checkpoint(net, tokenizer, str(root / "ckpt"), checkpoint_meta(get_task("sst2"), 64, "test"))
    export_onnx(str(root / "ckpt"), str(root / "onnx"), parity=False)
    return str(root / "ckpt"), str(root / "onnx")


def interference_attempt(workers, count: int, block: int, pause_s: float) -> dict:
    """Per variant, the median over blocks of (p50 beside the other / p50 alone), every block
    timed alone, beside the other, alone again; and the share of the CPU that other processes
    used meanwhile (``OtherLoad``)."""
    from compressor.bench.harness import OtherLoad, rounds_latency

    def alone(block_range):
        return {w.name: np.median(rounds_latency([w], block_range, block, pause_s)[w.name]) for w in workers}

    ratios = {w.name: [] for w in workers}
    with OtherLoad([w.proc.pid for w in workers if hasattr(w, "proc")]) as load:
        for start in range(0, count, block):
            block_range = range(start, start + block)
            before = alone(block_range)
            beside = rounds_latency(workers, block_range, block, pause_s)
            after = alone(block_range)
            for name in ratios:
                ratios[name].append(np.median(beside[name]) / ((before[name] + after[name]) / 2))
    return {"ratio": {n: round(float(np.median(r)), 3) for n, r in ratios.items()}, "other_load": load.share,
            "p50_alone_ms": {n: round(1000 * float(before[n]), 2) for n in before}}


@pytest.mark.perf
def test_interleaved_variants_time_as_they_do_alone_at_two_threads(minilm_pair):
    """Issue 15: interleaved in one process, an idle variant's spinning threads (onnxruntime's
    pool, PyTorch's OpenMP team) took the cores from the one being timed, near doubling its
    latency at 2 threads. In processes of their own, timed in rounds, each variant's p50 beside
    the other stays within 15% of its p50 alone (every block timed alone, beside, alone again).
    This 2-core machine is shared: an attempt counts only if other processes used under 10% of
    its CPU meanwhile (and is made only after a quiet second); when none of six does, timing
    means nothing and the test skips.
    The same logic on the old in-process runners gave ratios of 1.5-1.9 on every attempt; the
    process workers held the bound run after run, but once gave 1.19 (CI, other load 0.5%).
    So one noisy quiet attempt is retried: up to three quiet attempts, and one of them must hold
    the 15% bound (the old runners failed all of theirs)."""
    import time

    from compressor.bench.harness import BenchConfig, OtherLoad, Spec, load_sentences, sample_texts
    from compressor.bench.worker import Workers

    checkpoint, onnx_dir = minilm_pair
    texts = sample_texts(load_split("sst2", "dev", data_dir="embedded").examples, 30)
    config = BenchConfig(warmup=5, block=5, pause_s=0.05)
    attempts, quiet = [], []

    def holds(attempt):
        return all(1 / 1.15 <= r <= 1.15 for r in attempt["ratio"].values())

    with Workers([Spec("onnx", onnx_dir, "onnxruntime"), Spec("pytorch", checkpoint)], 2) as workers:
        load_sentences(workers, texts, config.warmup)
        for _ in range(6):
            with OtherLoad() as idle:   # a busy machine is not worth an attempt
                time.sleep(1.0)
            if idle.share is not None and idle.share >= 0.1:
                attempts.append({"other_load_idle": idle.share})
                time.sleep(2.0)
                continue
            attempts.append(interference_attempt(workers, len(texts), config.block, config.pause_s))
            if attempts[-1]["other_load"] is not None and attempts[-1]["other_load"] < 0.1:
                quiet.append(attempts[-1])
                if holds(quiet[-1]) or len(quiet) == 3:
                    break
    if not quiet:
        pytest.skip(f"other processes kept this machine too busy to time: {attempts}")
    assert any(holds(a) for a in quiet), quiet
    assert quiet[-1]["p50_alone_ms"]["onnx"] > 2   # big enough that spinning threads would show


def test_bench_command_line_errors(tmp_path):
    from click.testing import CliRunner

    from compressor.cli import cli

    res = CliRunner().invoke(cli, ["bench", str(tmp_path / "nope"), "--out", str(tmp_path / "r")],
                             standalone_mode=False)
    assert isinstance(res.exception, CompressorError) and "model not found" in str(res.exception)
    res = CliRunner().invoke(cli, ["bench", "--out", str(tmp_path / "r"), "--peers", "none"],
                             standalone_mode=False)
    assert isinstance(res.exception, CompressorError) and "nothing to benchmark" in str(res.exception)


def test_recipe_ends_in_a_report_with_export_and_bench(teacher, tmp_path):
    from compressor.recipe import run_recipe, validate_recipe

    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"""name: tiny-report
task: sst2
data: {{dir: embedded, dev_limit: 40}}
teacher: {teacher}
stages:
  - export: {{}}
  - bench: {{sentences: 10, batch_sizes: [4], throughput_batches: 2, peers: [pytorch-fp32, ort-fp32], memory: false}}
""")
    assert validate_recipe(str(recipe)) == []
    out = str(tmp_path / "run")
    manifest = run_recipe(str(recipe), out, log=lambda m: None)
    assert [s["dir"] for s in manifest["stages"]] == ["00-teacher", "01-export", "02-bench"]
    assert manifest["stages"][1]["kind"] == "onnx"
    export_record = json.load(open(os.path.join(out, "01-export", "record.json")))
    assert export_record["parity"]["identical_predictions"] >= 0.995 and export_record["fusions"]["Attention"] == 2
    results = read_results(os.path.join(out, "02-bench", "results.json"))
    assert {r["name"] for r in results["rows"]} == {"00-teacher", "01-export", "ort-fp32"}
    md = open(os.path.join(out, "report.md")).read()
    assert "| 01-export | ours | onnxruntime |" in md and "**Peers**" in md and "report.png" in md
    html = open(os.path.join(out, "report.html")).read()
    assert "data:image/png;base64," in html and "<table>" in html
    # resuming skips every stage, the report is rewritten the same way
    manifest2 = run_recipe(str(recipe), out, log=lambda m: None)
    assert [s["fingerprint"] for s in manifest2["stages"]] == [s["fingerprint"] for s in manifest["stages"]]


def test_recipe_rejects_bad_bench_settings(tmp_path, teacher):
    from compressor.recipe import validate_recipe

    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"""name: bad
task: sst2
teacher: {teacher}
stages:
  - bench: {{sentences: many}}
""")
    problems = validate_recipe(str(recipe))
    assert problems and "sentences" in problems[0]


def test_export_stage_takes_an_onnx_folder(teacher, tmp_path):
    from compressor.recipe import run_recipe

    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"""name: twice
task: sst2
data: {{dir: embedded, dev_limit: 24}}
teacher: {teacher}
stages:
  - export: {{optimize: false}}
  - export: {{}}
""")
    manifest = run_recipe(str(recipe), str(tmp_path / "run"), log=lambda m: None)
    first, second = manifest["stages"][1], manifest["stages"][2]
    assert first["kind"] == second["kind"] == "onnx"
    assert second["score"] == first["score"] and second["size_bytes"] == first["size_bytes"]
    record = json.load(open(tmp_path / "run" / "02-export" / "record.json"))
    assert record["fusions"] is None and record["engine"] == "onnxruntime"   # carried over as it was


def test_inc_peer_quantises_and_still_classifies(teacher, dev):
    from compressor.bench.harness import Spec, build

    torch.set_num_threads(2)
    runner = build(Spec("inc-int8", teacher, "inc", "int8-static", extra={"data_dir": "embedded"}))
    texts = [ex.texts[0] for ex in dev.examples[:16]]
    logits = runner.logits(texts, batch_size=8)
    fp32 = build(Spec("fp32", teacher)).logits(texts, batch_size=8)
    assert np.abs(logits).max() > 0        # INC's uncalibrated dynamic path returns zeros; this one is calibrated
    assert np.abs(logits - fp32).max() < 0.05 * max(1.0, np.abs(fp32).max())


def test_bench_stage_times_a_pytorch_quantised_model(teacher, tmp_path):
    from compressor.recipe import run_recipe

    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"""name: torch-int8
task: sst2
data: {{dir: embedded, dev_limit: 24}}
teacher: {teacher}
stages:
  - quantize_torch: {{method: dynamic, preset: avx2}}
  - bench: {{sentences: 6, batch_sizes: [], peers: [], memory: false}}
""")
    out = tmp_path / "run"
    run_recipe(str(recipe), str(out), log=lambda m: None)
    rows = read_results(str(out / "02-bench" / "results.json"))["rows"]
    by = {r["name"]: r for r in rows}
    assert set(by) == {"00-teacher", "01-quantize_torch"}
    q = by["01-quantize_torch"]
    assert q["extra"]["precision"].startswith("int8") and q["latency_ms"]["p50"] > 0
    assert q["parameters"] == by["00-teacher"]["parameters"] and q["value"] is not None


@pytest.mark.unit
def test_a_graph_folder_in_a_cuda_run_is_left_out_with_a_line(export_dir, monkeypatch):
    """Graphs run on the CPU only: a --device cuda run says it leaves an export folder out."""
    import torch

    from compressor.bench.suite import run_benchmark
    from compressor.core.errors import CompressorError

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    said = []
    with pytest.raises(CompressorError, match="nothing to benchmark"):
        run_benchmark([export_dir], device="cuda", log=said.append)
    assert any(export_dir in m and "left out of this --device cuda run" in m for m in said), said
