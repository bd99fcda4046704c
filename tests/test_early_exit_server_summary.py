"""bench/experiments/early_exit_server_summary.py: early exit's GLUE-5 on the server CPU from the
per-task benches, computed from planted figures (no model), and no mean where a task is missing."""
import json
import os

from bench.experiments import early_exit_server_summary as summary
from compressor.core.results import row, write_results
import pytest

pytestmark = pytest.mark.unit

TASKS = ("sst2", "mrpc", "stsb", "rte", "cola")
# variant -> (score offset from the teacher, p50 at 1 thread, p50 at 16 threads)
PLANTED = {"teacher": (0.0, 100.0, 20.0), "teacher-int8": (-2.0, 25.0, 8.0),
           "ort-o2-int8": (-5.0, 24.0, 9.0), "early-exit-int8": (-1.0, 10.0, 10.0)}
TEACHER = {"sst2": 94.0, "mrpc": 90.0, "stsb": 89.0, "rte": 68.0, "cola": 54.0}


def _bench(folder, task, threads=(16, 1), exit_layer=5.0):
    rows = []
    for name, (delta, p1, p16) in PLANTED.items():
        for t in threads:
            p50 = p1 if t == 1 else p16
            rows.append(row(name, task, "score", TEACHER[task] + delta, TEACHER[task], parameters=1, size_bytes=4,
                            engine="onnxruntime", device="cpu", threads=t, batch_size=1,
                            latency_ms={"p50": p50, "p90": 2 * p50, "p99": 3 * p50, "mean": 1.5 * p50},
                            extra={"group": "ours"}))
    write_results(os.path.join(folder, f"bench-{task}-cpu.json"), rows, command=f"bench {task}",
                  fingerprint_info={"processor": "Planted Xeon", "cores": 16, "cpu_preset": "amx"},
                  config={"complete": True})
    record = os.path.join(folder, f"run-{task}", "02-early_exit_export", "record.json")
    os.makedirs(os.path.dirname(record))
    with open(record, "w") as f:
        json.dump({"mean_exit_layer": exit_layer}, f)


def test_glue5_means_and_ratios_come_from_the_five_benches(tmp_path):
    for task in TASKS:
        _bench(str(tmp_path), task)
    s = summary.main([str(tmp_path)])
    teacher = sum(TEACHER.values()) / 5
    assert s["teacher_glue5"] == teacher
    one = s["glue5"][1]
    assert abs(one["early-exit-int8"]["score"] - (teacher - 1)) < 1e-9
    assert one["early-exit-int8"]["p50_ms"] == 10.0 and one["early-exit-int8"]["mean_ms"] == 15.0
    assert s["ratios"][1]["teacher"] == {"p50": 10.0, "mean": 10.0}
    assert s["ratios"][16]["teacher-int8"]["p50"] == 0.8     # slower than INT8 at 16 threads: said so
    assert s["exit_layer"]["cola"] == 5.0
    text = (tmp_path / "summary.md").read_text()
    assert "| **GLUE-5** |" in text and "keeps 98.7% of the teachers' GLUE-5" in text
    assert (tmp_path / "summary.png").stat().st_size > 0
    assert json.load(open(tmp_path / "summary.json"))["ratios"]["1"]["ort-o2-int8"]["p50"] == 2.4


def test_a_missing_task_or_thread_count_gives_no_glue5_mean_and_is_named(tmp_path):
    for task in TASKS[:4]:
        _bench(str(tmp_path), task)
    s = summary.main([str(tmp_path)])
    assert s["glue5"] == {} and s["missing"] == {1: ["cola"], 16: ["cola"]}
    assert "No GLUE-5 mean at 1 thread: cola not measured there." in (tmp_path / "summary.md").read_text()
    assert not (tmp_path / "summary.png").exists()

    _bench(str(tmp_path), "cola", threads=(16,))    # cut before its 1-thread timing
    s = summary.main([str(tmp_path)])
    assert sorted(s["glue5"]) == [16] and s["missing"] == {1: ["cola"]}
