"""bench/experiments/int8_rejudge.py: the held-out INT8 choice under another criterion, from the
verdicts a quantize record holds; the latency rebuild times that choice when asked."""
import json

import pytest

from bench.experiments import int8_rejudge as rj
from bench.experiments.chain_latency_same_shape import new_chain_plan

pytestmark = pytest.mark.unit

TRIED = [
    {"name": "static-int8", "score": 51.6, "drop": -2.45, "agreement": 0.987, "latency_ms": 5.1},
    {"name": "dynamic-int8", "score": 48.7, "drop": 0.48, "agreement": 0.981, "latency_ms": 5.0},
    {"name": "mixed (2 FP32 units)", "score": 49.3, "drop": -0.17, "agreement": 0.993, "latency_ms": 9.6},
    {"name": "fp32", "score": 49.2, "drop": 0.0, "agreement": 1.0, "latency_ms": 13.9},
]


def test_the_fastest_candidate_within_the_criterion_is_chosen():
    assert rj.rejudge(TRIED, 0.3, 0.99)["chosen"] == "mixed (2 FP32 units)"
    assert rj.rejudge(TRIED, 0.3, 0.98)["chosen"] == "static-int8"      # dynamic: drop 0.48
    assert rj.rejudge(TRIED, 0.5, 0.98)["chosen"] == "dynamic-int8"
    verdicts = {v["name"]: v for v in rj.rejudge(TRIED, 0.3, 0.99)["verdicts"]}
    assert verdicts["static-int8"]["why_not"] == "agreement 0.9870 < 0.99"


def test_fp32_always_meets():
    assert rj.rejudge(TRIED, 0.0, 1.0)["chosen"] == "fp32"


def _records(tmp_path):
    run = tmp_path / "cola-v"
    (run / "05-quantize").mkdir(parents=True)
    (run / "05-quantize" / "record.json").write_text(json.dumps({"method": "auto", "search": {
        "chosen": "mixed (2 FP32 units)", "fp32_units": ["layer.1", "layer.2"], "tried": TRIED,
        "criterion": {"max_drop": 0.3, "min_agreement": 0.99}}}))
    return str(tmp_path)


def test_the_command_writes_both_choices(tmp_path):
    out = tmp_path / "r.json"
    assert rj.main(["--records", _records(tmp_path), "--run-name", "v", "--tasks", "cola", "--max-drop", "0.3",
                    "--min-agreement", "0.98", "--out", str(out)]) == 0
    row = json.loads(out.read_text())["tasks"]["cola"]
    assert (row["recorded"], row["chosen"]) == ("mixed (2 FP32 units)", "static-int8")


def test_the_latency_rebuild_times_the_rejudged_choice(tmp_path):
    records = _records(tmp_path)
    assert new_chain_plan(records, "cola", [], "v")["int8"] == {"method": "mixed", "fp32_units": ["layer.1", "layer.2"]}
    plan = new_chain_plan(records, "cola", [], "v", (0.3, 0.98))
    assert plan["int8"] == {"method": "static", "fp32_units": []}
    assert plan["int8_rejudged"]["recorded"] == "mixed (2 FP32 units)"
