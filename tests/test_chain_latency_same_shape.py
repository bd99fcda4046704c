"""bench/experiments/chain_latency_same_shape.py: what it builds is read from the GPU run's records
(shape, INT8 choice, the bracket where a task has no choice), and the summary's ratios are those
issue 32 (chain / today's chain <= 1.10) and issue 33 (teacher / chain >= 15) name."""
import json
import os

import pytest

from bench.experiments import chain_latency_same_shape as cls

pytestmark = pytest.mark.unit


def _plant(root, task, prune=None, quant=None):
    folder = root / f"{task}-chain"
    for sub, record in (("03-prune", prune), ("05-quantize", quant)):
        if record is not None:
            os.makedirs(folder / sub)
            (folder / sub / "record.json").write_text(json.dumps(record))


def test_plans_follow_the_records_and_a_task_without_a_choice_is_bracketed(tmp_path):
    shape = {"heads_after": [6, 6, 6, 5, 6, 7], "ffn_after": [2578, 1989, 1016, 1283, 2208, 142]}
    _plant(tmp_path, "mrpc", {"pruning": shape},
           {"method": "auto", "preset": {"name": "amx"},
            "search": {"chosen": "mixed (2 FP32 units)", "fp32_units": ["layer.0", "embeddings"]}})
    _plant(tmp_path, "stsb", {"pruning": shape}, {"method": "auto", "search": {"chosen": "dynamic-int8"}})
    _plant(tmp_path, "cola", {"pruning": shape})
    bracket = cls.bracket_units(str(tmp_path))
    assert bracket == ["layer.0", "embeddings"]
    mrpc = cls.new_chain_plan(str(tmp_path), "mrpc", bracket)
    assert mrpc["shape"] == {"heads": shape["heads_after"], "ffn": shape["ffn_after"]}
    assert mrpc["int8"] == {"method": "mixed", "fp32_units": ["layer.0", "embeddings"]} and "bracket" not in mrpc
    assert cls.new_chain_plan(str(tmp_path), "stsb", bracket)["int8"]["method"] == "dynamic"
    cola = cls.new_chain_plan(str(tmp_path), "cola", bracket)
    assert cola["int8"]["method"] == "dynamic" and cola["bracket"]["fp32_units"] == bracket
    sst2 = cls.new_chain_plan(str(tmp_path), "sst2", bracket)
    assert sst2["shape"] is None   # pruned here by the toolkit
    with pytest.raises(SystemExit):
        cls.int8_choice({"method": "auto", "search": {"chosen": "int4"}})


def _doc(p50):
    return {"rows": [{"name": name, "threads": t, "batch_size": 1, "latency_ms": {"p50": v / t}}
                     for name, v in p50.items() for t in (1, 2)]}


def test_summary_ratios_and_targets():
    summary = cls.summarize({
        "rte": _doc({"teacher": 100.0, "today-chain-int8": 5.0, "chain-int8": 5.4}),
        "mrpc": _doc({"teacher": 120.0, "today-chain-int8": 8.0, "chain-int8": 10.0}),
    })
    by = {(r["task"], r["threads"]): r for r in summary["rows"]}
    assert by[("rte", 1)]["chain_over_today"] == 1.08 and by[("rte", 1)]["meets_issue32_latency"]
    assert by[("rte", 1)]["teacher_over_chain-int8"] == 18.52 and by[("rte", 1)]["meets_issue33_15x"]
    assert by[("mrpc", 2)]["chain_over_today"] == 1.25 and not by[("mrpc", 2)]["meets_issue32_latency"]
    assert not by[("mrpc", 2)]["meets_issue33_15x"]   # 120 / 10 = 12
    assert summary["geometric_mean"][1]["chain_over_today"] == pytest.approx((1.08 * 1.25) ** 0.5, abs=1e-3)
    assert "| rte | 1 | 100.00 | 5.00 | 5.40 | 1.080 |" in cls.markdown(summary)


def test_a_run_name_and_a_mixed_choice_recorded_under_search_mixed(tmp_path):
    folder = tmp_path / "cola-task2-b256" / "05-quantize"
    os.makedirs(folder)
    (folder / "record.json").write_text(json.dumps(
        {"method": "auto", "search": {"chosen": "mixed (2 FP32 units)", "mixed": {"fp32_units": ["layer.1", "layer.0"]}}}))
    plan = cls.new_chain_plan(str(tmp_path), "cola", [], "task2-b256")
    assert plan["int8"] == {"method": "mixed", "fp32_units": ["layer.1", "layer.0"]}
    assert cls.bracket_units(str(tmp_path), run="task2-b256") == ["layer.1", "layer.0"]


def test_added_graphs_get_their_ratios_and_a_table():
    summary = cls.summarize({"mrpc": _doc({"teacher": 120.0, "today-chain-int8": 8.0, "trained": 16.0})})
    row = next(r for r in summary["rows"] if r["threads"] == 1)
    assert row["added"] == {"trained": {"over_today": 2.0, "teacher_over": 7.5}}
    assert "| mrpc | 1 | trained | 16.00 | 2.000 | 7.5 |" in cls.markdown(summary)


def test_add_is_checked_before_anything_is_built(tmp_path):
    base = tmp_path / "base"
    base.mkdir()
    with pytest.raises(SystemExit, match="TASK:NAME=FOLDER"):
        cls.main(["--base", str(base), "--data-dir", str(tmp_path), "--out-dir", str(tmp_path / "o"),
                  "--tasks", "mrpc", "--add", "mrpc-trained"])
    with pytest.raises(SystemExit, match="must not be one of"):
        cls.main(["--base", str(base), "--data-dir", str(tmp_path), "--out-dir", str(tmp_path / "o"),
                  "--tasks", "mrpc", "--add", f"mrpc:teacher={tmp_path}"])


def test_qat_graphs_time_as_dynamic_int8_and_their_quantize_stage_is_found_where_it_is(tmp_path):
    """A QAT graph (auto's qat-int8 choice, or method qat whose run has no export stage, so its
    quantize folder is 04-quantize) is dynamic INT8 for latency."""
    assert cls.int8_choice({"method": "auto", "search": {"chosen": "qat-int8"}}) == \
        {"method": "dynamic", "fp32_units": []}
    folder = tmp_path / "rte-task2-iter2qat"
    os.makedirs(folder / "03-prune")
    os.makedirs(folder / "04-quantize")
    (folder / "04-quantize" / "record.json").write_text(json.dumps({"method": "qat", "preset": {"name": "amx"}}))
    plan = cls.new_chain_plan(str(tmp_path), "rte", [], run="task2-iter2qat")
    assert plan["int8"] == {"method": "dynamic", "fp32_units": []} and "bracket" not in plan
    assert plan["int8_from"].endswith(os.path.join("04-quantize", "record.json"))


def test_product_units_named_under_a_wrapper_are_found_by_their_plain_name():
    assert cls._plain("layer.1.inner.layer.1.intermediate.dense") == "layer.1.intermediate.dense"
    assert cls._plain("layer.1") == "layer.1" and cls._plain("embeddings") == "embeddings"
    assert cls._plain("layer.2.inner.layer.1.output.dense") == "layer.2.inner.layer.1.output.dense"


def test_widen_scales_each_layers_kept_heads_and_ffn_capped_at_the_unpruned_counts(tmp_path):
    shape = {"heads_before": [12] * 3, "ffn_before": [3072] * 3,
             "heads_after": [6, 11, 1], "ffn_after": [1536, 3000, 161]}
    _plant(tmp_path, "mrpc", {"pruning": shape}, {"method": "auto", "search": {"chosen": "static-int8"}})
    plan = cls.new_chain_plan(str(tmp_path), "mrpc", [], widen=(1.25, 1.2))
    assert plan["shape"] == {"heads": [8, 12, 1], "ffn": [1843, 3072, 193]}
    assert plan["widened"]["recorded"] == {"heads": [6, 11, 1], "ffn": [1536, 3000, 161]}
    assert plan["int8"] == {"method": "static", "fp32_units": []}
    assert cls.new_chain_plan(str(tmp_path), "mrpc", [])["shape"]["ffn"] == [1536, 3000, 161]   # not asked: as run
    base = tmp_path / "base"
    base.mkdir()
    for bad in ("1.2", "1,x", "0,1"):
        with pytest.raises(SystemExit, match="--widen"):
            cls.main(["--base", str(base), "--data-dir", str(tmp_path), "--out-dir", str(tmp_path / "o"),
                      "--records", str(tmp_path), "--tasks", "mrpc", "--widen", bad])
    _plant(tmp_path, "cola", None, {"method": "auto", "search": {"chosen": "static-int8"}})
    with pytest.raises(SystemExit, match="no prune record to widen"):
        cls.new_chain_plan(str(tmp_path), "cola", [], widen=(1, 1.2))
