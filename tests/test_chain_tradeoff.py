"""bench/experiments/chain_tradeoff.py: GLUE-5 retention and the latency ratio it plots are read
from an ablation's and a latency run's summaries, and a variant missing a task is refused."""
import json

import pytest

from bench.experiments import chain_tradeoff as ct

pytestmark = pytest.mark.unit


def _ablation(tmp_path, scores, teacher=50.0, skip=()):
    tasks = {t: {"teacher": teacher, "variants": {} if t in skip else {"v": {"stages": {"quantize": {
        "score": s, "holdout_retention": 99.0}}}}} for t, s in zip(ct.TASKS, scores)}
    d = tmp_path / "abl"
    d.mkdir(exist_ok=True)
    (d / "summary.json").write_text(json.dumps({"tasks": tasks}))
    return str(d)


def _latency(tmp_path, ratios):
    rows = [{"task": t, "threads": 1, "chain_over_today": r} for t, r in zip(ct.TASKS, ratios)]
    rows += [{"task": t, "threads": 2, "chain_over_today": 9.0} for t in ct.TASKS]
    d = tmp_path / "lat"
    d.mkdir(exist_ok=True)
    (d / "summary.json").write_text(json.dumps({"rows": rows}))
    return str(d)


def test_retention_is_the_ratio_of_the_glue5_means(tmp_path):
    acc = ct.glue5(_ablation(tmp_path, [40, 45, 50, 55, 60]), "v")
    assert acc["glue5"] == 50.0 and acc["retention"] == 100.0 and acc["holdout_retention_mean"] == 99.0


def test_the_ratio_is_the_geometric_mean_at_the_threads_asked(tmp_path):
    lat = ct.latency_ratio(_latency(tmp_path, [1.0, 1.0, 1.0, 2.0, 0.5]))
    assert lat["ratio"] == pytest.approx(1.0)
    assert ct.latency_ratio(str(tmp_path / "lat"), threads=2)["ratio"] == pytest.approx(9.0)


def test_a_variant_missing_a_task_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="cola"):
        ct.glue5(_ablation(tmp_path, [50] * 5, skip=("cola",)), "v")


def test_the_target_flag_and_the_files(tmp_path):
    abl = _ablation(tmp_path, [49.5] * 5)            # 99% of 50
    out = tmp_path / "res" / "t"
    ct.main(["--point", "near", abl, "v", _latency(tmp_path, [1.05] * 5),
             "--point", "slow", abl, "v", str(tmp_path / "lat"), "--threads", "2", "--out", str(out)])
    record = json.loads((tmp_path / "res" / "t.json").read_text())
    assert [p["meets_target"] for p in record["points"]] == [False, False]   # --threads 2: 9x for both
    ct.main(["--point", "near", abl, "v", str(tmp_path / "lat"), "--out", str(out)])
    record = json.loads((tmp_path / "res" / "t.json").read_text())
    assert record["points"][0]["meets_target"] is True
    assert (tmp_path / "res" / "t.png").stat().st_size > 0


def _other_run(tmp_path, cola_score, teacher):
    d = tmp_path / "other"
    d.mkdir(exist_ok=True)
    (d / "summary.json").write_text(json.dumps({"tasks": {"cola": {"teacher": teacher, "variants": {"w": {
        "stages": {"quantize": {"score": cola_score, "holdout_retention": 98.0}}}}}}}))
    return str(d)


def test_a_task_from_another_run_of_the_same_teacher_replaces_that_task_only(tmp_path):
    abl, lat = _ablation(tmp_path, [50.0] * 5), _latency(tmp_path, [1.0] * 5)
    out = tmp_path / "res" / "t"
    ct.main(["--point", "plain", abl, "v", lat,
             "--point", "swapped", abl, "v", lat, "--task-from", "cola", _other_run(tmp_path, 45.0, 50.0), "w",
             "--out", str(out)])
    plain, swapped = json.loads((tmp_path / "res" / "t.json").read_text())["points"]
    assert plain["accuracy"]["glue5"] == 50.0 and "per_task_from" not in plain["accuracy"]
    assert swapped["accuracy"]["per_task"] == {"cola": 45.0, "mrpc": 50.0, "rte": 50.0, "sst2": 50.0, "stsb": 50.0}
    assert swapped["accuracy"]["glue5"] == 49.0
    assert swapped["accuracy"]["per_task_from"]["cola"].endswith(" w")


def test_a_task_from_a_run_whose_teacher_differs_is_refused(tmp_path):
    abl, lat = _ablation(tmp_path, [50.0] * 5), _latency(tmp_path, [1.0] * 5)
    with pytest.raises(SystemExit, match="not the same pipeline"):
        ct.main(["--point", "p", abl, "v", lat, "--task-from", "cola", _other_run(tmp_path, 45.0, 51.0), "w",
                 "--out", str(tmp_path / "t")])
