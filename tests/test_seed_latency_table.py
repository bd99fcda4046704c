"""bench/experiments/seed_latency_table.py: the seed shapes' timings joined with the seed runs'
GLUE-5 scores, from planted files; a shape not timed is said so, never filled in."""
import json
import os

from bench.experiments import seed_latency_table as table
from compressor.core.results import row, write_results
import pytest

pytestmark = pytest.mark.unit

P50 = {"teacher": 100.0, "ort-o2-int8": 25.0, "teacher-int8": 24.0, "student6-int8": 10.0, "tinybert4-int8": 2.0}


def test_speedups_against_the_pytorch_teacher_and_scores_from_the_seed_runs(tmp_path):
    rows = [row(name, "sst2", "accuracy", None, None, parameters=1_000_000, size_bytes=2_000_000,
                engine="onnxruntime", device="cpu", threads=t, batch_size=1,
                latency_ms={"p50": p50 / t, "p90": p50, "p99": p50, "mean": p50}, extra={"group": "ours"})
            for name, p50 in P50.items() for t in (1, 2)]
    os.makedirs(tmp_path / "seed-latency")
    write_results(str(tmp_path / "seed-latency" / "bench-sst2-cpu.json"), rows, command="bench seeds",
                  fingerprint_info={"processor": "Planted EPYC", "cores": 2, "cpu_preset": "avx2"})
    glue5 = {"seeds_distilbert-6l": {"glue5": 73.0, "teacher_glue5": 78.3, "retention": 0.9323},
             "seeds_pkd-6l": {"glue5": 62.8, "teacher_glue5": 78.1, "retention": 0.8041},
             "seeds_tinybert-4l": {"glue5": 46.2, "teacher_glue5": 78.1, "retention": 0.5915}}
    with open(tmp_path / "summary.json", "w") as f:
        json.dump({"glue5": glue5}, f)
    t = table.main([str(tmp_path)])
    by = {r["variant"]: r for r in t["rows"]}
    assert by["student6-int8"]["speedup_teacher"] == {1: 10.0, 2: 10.0}
    assert [s["recipe"] for s in by["student6-int8"]["recipes"]] == ["distilbert-6l", "pkd-6l"]
    assert t["teacher_glue5"] == [78.1, 78.3] and t["threads"] == [1, 2]
    md = (tmp_path / "seed-latency" / "summary.md").read_text()
    assert "| 4 layers, hidden 312, FFN 1200 | 1.0M | 2.0 | 2.00 | 1.00 | 50.0x | `tinybert-4l` 46.20 (59.2%) |" in md
    assert "| 6 layers, hidden 384, FFN 1536 |  |  | not timed | not timed |" in md
    assert "whose GLUE-5 is 78.10-78.30" in md and "`bench seeds`" in md
    assert json.load(open(tmp_path / "seed-latency" / "summary.json"))["rows"][0]["p50_ms"] == {"1": 100.0, "2": 50.0}
