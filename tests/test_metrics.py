"""Metrics against values worked out by hand."""

import math

import numpy as np
import pytest

from compressor.core.errors import CompressorError
from compressor.core.metrics import compute_metrics, glue_score, task_score

pytestmark = pytest.mark.unit


def test_accuracy_and_f1():
    # refs 1 0 0 1, preds 1 0 1 1: 3/4 right; tp=2 fp=1 fn=0 -> P=2/3 R=1 F1=0.8
    m = compute_metrics("mrpc", [1, 0, 1, 1], [1, 0, 0, 1])
    assert list(m) == ["f1", "accuracy"]
    assert m["accuracy"] == pytest.approx(0.75) and m["f1"] == pytest.approx(0.8)
    assert all(type(v) is float for v in m.values())
    assert compute_metrics("sst2", np.array([1, 0, 1, 1]), np.array([1, 0, 0, 1])) == {"accuracy": 0.75}


def test_mcc():
    # tp=2 tn=1 fp=1 fn=0: (2*1 - 1*0) / sqrt(3*2*2*1) = 2/sqrt(12)
    m = compute_metrics("cola", [1, 0, 1, 1], [1, 0, 0, 1])
    assert m == {"mcc": pytest.approx(2 / math.sqrt(12))}
    assert compute_metrics("cola", [0, 1, 0, 1], [1, 0, 1, 0])["mcc"] == pytest.approx(-1.0)


def test_pearson_spearman():
    # x = 1 2 3 4, y = 1 3 2 4: means 2.5, cov sum 4, var sums 5 and 5 -> r = 0.8;
    # ranks equal values, so spearman = 0.8 too. y = x^3 is monotone: spearman 1.
    m = compute_metrics("stsb", [1.0, 2.0, 3.0, 4.0], [1.0, 3.0, 2.0, 4.0])
    assert list(m) == ["pearson", "spearman"]
    assert m["pearson"] == pytest.approx(0.8) and m["spearman"] == pytest.approx(0.8)
    m = compute_metrics("sts-b", np.array([[1.0], [2.0], [3.0]]), [1.0, 8.0, 27.0])
    assert m["spearman"] == pytest.approx(1.0) and m["pearson"] < 1.0


def test_constant_predictions_do_not_crash():
    assert compute_metrics("cola", [1, 1, 1, 1], [0, 1, 0, 1]) == {"mcc": 0.0}
    assert compute_metrics("stsb", [2.0, 2.0, 2.0], [0.0, 2.5, 5.0]) == {"pearson": 0.0, "spearman": 0.0}
    m = compute_metrics("mrpc", [0, 0, 0], [1, 0, 1])
    assert m["f1"] == 0.0 and m["accuracy"] == pytest.approx(1 / 3)


def test_bad_inputs():
    for args, text in [
        (("sst2", [], []), "no examples"),
        (("sst2", [1, 0], [1]), "2 predictions for 1 references"),
        (("sst2", [1, 0], [1, None]), "missing labels"),
        (("sst2", [0.3, 0.7], [0, 1]), "class ids"),
        (("sst2", np.zeros((2, 2)), [0, 1]), "shape"),
    ]:
        with pytest.raises(CompressorError, match=text):
            compute_metrics(*args)


def test_task_score():
    assert task_score("mrpc", {"f1": 0.9, "accuracy": 0.8}) == pytest.approx(85.0)
    assert task_score("sst2", {"accuracy": 0.9, "f1": 0.1}) == pytest.approx(90.0)
    with pytest.raises(CompressorError, match="lack f1"):
        task_score("mrpc", {"accuracy": 0.8})


def test_glue_score_merges_mnli():
    per_task = {
        "sst2": {"accuracy": 0.9},                    # 90
        "mrpc": {"f1": 0.9, "accuracy": 0.8},        # 85
        "mnli": {"accuracy": 0.8},                   # MNLI = (80 + 84) / 2 = 82
        "mnli_mm": {"accuracy": 0.84},
    }
    assert glue_score(per_task) == pytest.approx((90 + 85 + 82) / 3)
    assert glue_score({"mnli-mm": {"accuracy": 0.84}}) == pytest.approx(84.0)
    with pytest.raises(CompressorError):
        glue_score({})
