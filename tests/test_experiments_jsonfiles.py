"""The experiment summaries read a run's JSON files through one reader: a missing or half-written
file is "not there yet" (None), skipped by both summaries, never an error."""
import json

import pytest

from bench.experiments import accuracy_ablation, seed_systems_summary
from bench.experiments.jsonfiles import read_or_none

pytestmark = pytest.mark.unit


def test_a_missing_or_cut_short_file_reads_as_none(tmp_path):
    good, cut = tmp_path / "good.json", tmp_path / "cut.json"
    good.write_text(json.dumps({"score": 81.25}))
    cut.write_text('{"score": 8')
    assert read_or_none(str(good)) == {"score": 81.25}
    assert read_or_none(str(cut)) is None and read_or_none(str(tmp_path / "none.json")) is None
    assert read_or_none(str(tmp_path)) is None   # a folder where the file should be


def test_both_summaries_skip_a_stage_whose_record_is_cut_short(tmp_path):
    run = tmp_path / "rte-chain"
    for name, text in [("01-distill", json.dumps({"stage": "distill", "score": 60.0})),
                       ("02-prune", '{"stage": "pru')]:
        (run / name).mkdir(parents=True)
        (run / name / "record.json").write_text(text)
    assert [r["stage"] for r in seed_systems_summary._records(str(run))] == ["distill"]
    assert accuracy_ablation._stage_record(str(run), "distill") == {"stage": "distill", "score": 60.0}
    assert accuracy_ablation._stage_record(str(run), "prune") is None


def test_a_general_phase_from_the_cache_is_described_by_the_run_that_trained_it():
    trained = {"train_rows": 97219, "steps": 1520}
    records = [{"stage": "distill", "student": {"kind": "config"},
                "phases": [{"phase": "general", "steps": 0, "cached": "x", "trained_by": trained}]}]
    row = {"gap": 20.0, "noise": 4.0, "teacher": 88.44}
    reasons = " ".join(seed_systems_summary.why("tinybert-4l", "mrpc", row, records))
    assert "97219 GLUE sentences, 1520 steps" in reasons
    fresh = [{"stage": "distill", "phases": [{"phase": "general", **trained}]}]
    assert "97219 GLUE sentences, 1520 steps" in " ".join(
        seed_systems_summary.why("tinybert-4l", "mrpc", row, fresh))


def test_a_student_cut_from_its_teacher_is_summarised_against_its_systems_paper():
    records = [{"stage": "distill", "student": {"kind": "config", "init": "teacher"}, "phases": []}]
    row = {"gap": 20.0, "noise": 4.0, "teacher": 67.15}
    reasons = " ".join(seed_systems_summary.why("tinybert-4l-subclone", "rte", row, records))
    assert "cut out of the task teacher's weights" in reasons and "at random" not in reasons
    assert seed_systems_summary.paper_of("minilm-6l-subclone") is seed_systems_summary.PAPERS["minilm-6l"]
