"""The augmentation ablation's table comes from the committed records, each student against its
own task's teacher."""
import json
import os

import pytest

from bench.experiments import augment_ablation_summary as summary

pytestmark = pytest.mark.unit
ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                    "bench", "results", "augment-ablation-h100")


def test_every_task_has_its_teacher_and_three_students(tmp_path):
    tasks = summary.summarise(ROOT)
    assert set(tasks) == {"cola", "mrpc", "rte"}
    for task, rows in tasks.items():
        teacher = json.load(open(os.path.join(ROOT, task, f"teacher-{task}-metrics.json")))["score"]
        assert rows["teacher"]["score"] == round(teacher, 2)
        for variant in summary.VARIANTS:
            records = os.path.join(ROOT, task, variant)
            evaluate = [f for f in os.listdir(records) if f.endswith("-evaluate.json")][0]
            score = json.load(open(os.path.join(records, evaluate)))["score"]
            assert rows[variant]["score"] == round(score, 2)
            assert rows[variant]["retention"] == round(100 * score / teacher, 1)
        assert rows["two-stage-augmented"]["augmented_rows"] > 5 * rows["two-stage-augmented"]["source_rows"]


def test_the_table_has_a_row_per_task():
    text = summary.table(summary.summarise(ROOT))
    assert text.count("\n") == 4 and "| cola | 53.66 |" in text
