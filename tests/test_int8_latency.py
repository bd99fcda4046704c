"""auto's latency ranking (issue 32 item 3): candidates are timed together, interleaved, so a
neighbour's burst on the shared machine hits them alike instead of whichever was timed during it
(auto once timed a mixed graph with one layer FP32 at 5.2 ms beside 2.2 ms for all-INT8; the
bench harness, graphs in their own processes in rounds, measures it at about all-INT8 plus the
layer's FP32 share: bench/results/mixed-int8-latency/)."""
import numpy as np
import pytest

from compressor.quantize import sensitivity as sens


class _Clock:
    """A fake time: a graph's run advances it by its cost, plus a burst while a neighbour is busy
    (the first ``burst_runs`` runs of the whole process)."""

    def __init__(self, burst_runs: int, burst_s: float):
        self.now, self.runs, self.burst_runs, self.burst_s = 0.0, 0, burst_runs, burst_s

    def perf_counter(self):
        return self.now

    def run(self, cost_s: float):
        self.now += cost_s + (self.burst_s if self.runs < self.burst_runs else 0.0)
        self.runs += 1


@pytest.fixture
def clock(monkeypatch):
    import compressor.export.runtime as runtime

    clock = _Clock(burst_runs=80, burst_s=0.005)
    costs = {"a.onnx": 0.001, "b.onnx": 0.001, "slow.onnx": 0.002}
    made = []

    class FakePredictor:
        def __init__(self, folder, threads=None, model_file=None, **kw):
            self.cost = costs[model_file]
            made.append((model_file, threads))

        def run(self, feed):
            clock.run(self.cost)

    monkeypatch.setattr(runtime, "Predictor", FakePredictor)
    monkeypatch.setattr(sens.time, "perf_counter", clock.perf_counter)
    clock.made = made
    return clock


@pytest.mark.unit
def test_graphs_timed_alone_take_the_load_of_their_moment_interleaved_they_share_it(clock):
    feeds = [{}] * 100
    # timed one after the other, the first graph takes the neighbour's whole burst
    alone = {name: sens.latency_ms("export", name, feeds) for name in ("a.onnx", "b.onnx")}
    assert alone["a.onnx"] == pytest.approx(6.0) and alone["b.onnx"] == pytest.approx(1.0)

    clock.runs = 0            # the same burst again, now with the graphs timed in turns
    together = sens.latencies_ms("export", {"a": "a.onnx", "b": "b.onnx", "slow": "slow.onnx"}, feeds)
    assert together["a"] == pytest.approx(together["b"]) == pytest.approx(1.0)
    assert together["slow"] == pytest.approx(2.0)
    assert {threads for _, threads in clock.made} == {1}


@pytest.mark.unit
def test_accuracy_aware_times_every_candidate_together_once_all_are_judged(clock):
    judged, timed = [], []

    def judge(path):
        judged.append(path)
        return {"meets": path != "a.onnx", "score": 1.0}

    def latencies(paths):
        timed.append(dict(paths))
        return {name: {"a.onnx": 1.0, "b.onnx": 3.0, "slow.onnx": 2.0}[p] for name, p in paths.items()}

    candidates = [(name, lambda p=path: p) for name, path in
                  (("fast", "a.onnx"), ("slow", "slow.onnx"), ("none", None), ("b", "b.onnx"))]
    choice = sens.accuracy_aware(candidates, judge_fn=judge, latencies_fn=latencies)
    assert judged == ["a.onnx", "slow.onnx", "b.onnx"]                 # the one not built is skipped
    assert timed == [{"fast": "a.onnx", "slow": "slow.onnx", "b": "b.onnx"}]   # one measurement, all in it
    assert choice["chosen"] == "slow" and choice["path"] == "slow.onnx"      # fastest of those that meet
    assert [t["latency_ms"] for t in choice["tried"]] == [1.0, 2.0, 3.0]
    # a timer per graph still works (the earlier keyword); one of the two is required
    one = sens.accuracy_aware(candidates, judge_fn=judge, latency_fn=lambda p: {"slow.onnx": 5.0}.get(p, 4.0))
    assert one["chosen"] == "b"
    with pytest.raises(ValueError):
        sens.accuracy_aware(candidates, judge_fn=judge)


@pytest.mark.unit
def test_a_candidate_the_quantiser_refuses_is_recorded_not_fatal(clock, capsys):
    """onnxruntime's static quantiser refused a token-pruned graph ("Unable to get valid
    quantization scale ... when quantizing bias"): that candidate is out, the others compete."""
    def refuse():
        raise ValueError("Unable to get valid quantization scale for input 'x'\nmore")

    choice = sens.accuracy_aware([("static", refuse), ("dynamic", lambda: "d.onnx")],
                                 judge_fn=lambda p: {"meets": True},
                                 latencies_fn=lambda paths: {n: 1.0 for n in paths})
    assert choice["chosen"] == "dynamic"
    refused = [t for t in choice["tried"] if t["name"] == "static"][0]
    assert not refused["meets"] and refused["why_not"].startswith("could not be built: Unable to get valid")
    assert "static could not be built" in capsys.readouterr().err
    search = {"criterion": {"max_drop": 0.3, "confidence": 0.95, "resamples": 10, "min_agreement": 0.99,
                            "agreement": "labels", "divergence": "kl"}, "search_rows": 4,
              "chosen": "dynamic", "tried": [dict(t, score=1.0, drop=0.0, drop_bound=0.0, agreement=1.0,
                                                  divergence=0.0) if t["name"] == "dynamic" else t
                                             for t in choice["tried"]]}
    table = sens.choice_table(search, "accuracy")
    assert "| static | - |" in table and "could not be built" in table


@pytest.mark.integration
def test_latencies_of_real_graphs_are_interleaved_per_feed_block(export_dir):
    """On a real (tiny) export: every graph is timed on every feed, a median each."""
    from compressor.export.runtime import Predictor

    predictor = Predictor(export_dir, threads=1)
    feeds = [predictor.encode([t]) for t in ("a fine film", "dull", "it is not bad at all , really")] * 4
    graph = f"{export_dir}/model.onnx"
    measured = sens.latencies_ms(export_dir, {"x": graph, "y": graph}, feeds, block=5, rounds=2)
    assert set(measured) == {"x", "y"} and all(np.isfinite(v) and v > 0 for v in measured.values())


@pytest.mark.unit
def test_a_graph_with_more_fp32_units_wins_only_by_the_margin():
    """run 6's MRPC: a mixed graph with a layer FP32 timed 0.3% faster than static INT8 on the
    loaded search machine; within the margin the all-INT8 graph is kept, beyond it the faster."""
    assert sens.fp32_unit_count("static-int8") == 0 and sens.fp32_unit_count("mixed (1 FP32 units)") == 1
    assert sens.fp32_unit_count("mixed (0 FP32 units)") == 0 and sens.fp32_unit_count("fp32") == float("inf")
    fit = [{"name": "static-int8", "latency_ms": 26.793}, {"name": "mixed (1 FP32 units)", "latency_ms": 26.698},
           {"name": "fp32", "latency_ms": 20.0}]
    assert sens.fastest_within(fit, 0.0)["name"] == "fp32"              # no margin: the fastest
    assert sens.fastest_within(fit[:2], 0.0)["name"] == "mixed (1 FP32 units)"
    assert sens.fastest_within(fit[:2], 0.1)["name"] == "static-int8"   # 0.4% is within 10%
    assert sens.fastest_within(fit, 0.1)["name"] == "fp32"              # 25% faster is beyond it
    # between graphs with as many FP32 units, the faster one, whatever the margin
    both = [{"name": "static-int8", "latency_ms": 6.2}, {"name": "dynamic-int8", "latency_ms": 6.0}]
    assert sens.fastest_within(both, 0.1)["name"] == "dynamic-int8"
    assert sens.fastest_within([], 0.1) is None
    # accuracy_aware passes it on
    paths = {"static-int8": "s.onnx", "mixed (1 FP32 units)": "m.onnx"}
    times = {"s.onnx": 26.793, "m.onnx": 26.698}
    cands = [(name, lambda p=p: p) for name, p in paths.items()]
    kw = dict(judge_fn=lambda p: {"meets": True},
              latencies_fn=lambda named: {n: times[p] for n, p in named.items()})
    assert sens.accuracy_aware(cands, **kw)["chosen"] == "mixed (1 FP32 units)"
    assert sens.accuracy_aware(cands, latency_margin=0.1, **kw)["chosen"] == "static-int8"


@pytest.mark.unit
def test_rejudge_applies_the_margin_to_recorded_verdicts():
    from bench.experiments.int8_rejudge import rejudge
    tried = [{"name": "static-int8", "score": 86.71, "drop": 0.22, "agreement": 0.9875, "latency_ms": 26.793},
             {"name": "dynamic-int8", "score": 86.51, "drop": 0.43, "agreement": 0.99, "latency_ms": 24.863},
             {"name": "mixed (1 FP32 units)", "score": 87.37, "drop": -0.43, "agreement": 0.99, "latency_ms": 26.698},
             {"name": "fp32", "score": 86.94, "drop": 0.0, "agreement": 1.0, "latency_ms": 62.518}]
    assert rejudge(tried, 0.3, 0.98)["chosen"] == "mixed (1 FP32 units)"      # as the run chose
    assert rejudge(tried, 0.3, 0.98, 0.1)["chosen"] == "static-int8"
    assert rejudge(tried, 0.3, 0.99, 0.1)["chosen"] == "mixed (1 FP32 units)"  # static under the floor
