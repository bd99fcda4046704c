"""compressor auto (issue 34): the latency table, the search on a tiny held-out teacher, its pick
and report, a resume after a kill, two workers on one storage, and bad input as one line."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from compressor.core.errors import CompressorError

optuna = pytest.importorskip("optuna")

# a small space: layers 1-2, half the heads or none, FP32 or dynamic INT8 (8 points, 4 models each)
SPACE = ["--heads", "0,0.5", "--ffn", "0", "--tokens", "1", "--vocab", "false", "--precisions", "fp32,dynamic",
         "--layer-rules", "top", "--importance-rows", "16", "--train-limit", "96", "--dev-limit", "32",
         "--max-drop", "100"]


@pytest.fixture(scope="module")
def teacher(tmp_path_factory, tiny_models, glue_dir):
    """A tiny BERT fine-tuned on 96 SST-2 rows, 32 of them held out."""
    from compressor.cli import main

    out = str(tmp_path_factory.mktemp("auto") / "teacher")
    main(["finetune", tiny_models["bert"], "--task", "sst2", "--out", out, "--data-dir", glue_dir,
          "--train-limit", "96", "--dev-limit", "16", "--holdout", "32", "--epochs", "1",
          "--batch-size", "16", "--max-length", "32", "--device", "cpu"])
    return out


@pytest.fixture(scope="module")
def table_path(tmp_path_factory):
    return str(tmp_path_factory.mktemp("latency") / "table.json")


def auto_args(teacher, out, table_path, glue_dir, *more):
    return ["auto", teacher, "--out", str(out), "--data-dir", glue_dir, "--latency-table", table_path,
            *SPACE, *more]


def trials_of(out):
    from compressor.auto.study import STATE, open_study

    state = json.load(open(os.path.join(out, STATE)))
    study, _ = open_study(state)
    return [t for t in study.get_trials(deepcopy=False) if not t.user_attrs.get("surplus")]


@pytest.mark.unit
def test_settings_refuse_bad_values_in_one_line():
    from compressor.auto.config import AutoConfig, budget_seconds
    from compressor.core.settings import config_from_dict

    assert budget_seconds("4h") == 14400 and budget_seconds("90s") == 90 and budget_seconds("") is None
    for bad, words in (({"budget": "4 hours"}, "30m or 4h"), ({"heads": [1.5]}, "shares in [0, 1)"),
                       ({"precisions": ["int4"]}, "unknown precisions 'int4'"),
                       ({"storage": "study.db"}, "journal:PATH"), ({"target": "tpu"}, "tpu"),
                       ({"target": "gpu"}, "not built yet")):
        with pytest.raises(CompressorError) as err:
            config_from_dict(AutoConfig, bad, what="auto").check()
        assert words in str(err.value) and "\n" not in str(err.value)


@pytest.mark.unit
def test_token_pruned_layers_are_looked_up_at_fewer_tokens():
    from compressor.auto.latency import layer_seqs, seq_bucket

    assert seq_bucket(3) == 8 and seq_bucket(21) == 24
    assert layer_seqs(64, 3, 1.0) == [64, 64, 64]
    assert layer_seqs(64, 3, 0.5) == [64, 32, 16]


def test_the_latency_table_measures_once_caches_and_predicts(teacher, table_path, glue_dir, monkeypatch):
    from compressor.auto.latency import LatencyTable
    from compressor.core.data import get_task, load_data

    task = get_task("sst2")
    rows = load_data(task, "train", glue_dir, 8)
    table = LatencyTable(table_path, teacher, task, rows, sentences=20)
    full = table.predict([(4, 64), (4, 64)], "fp32", [16, 16])
    half = table.predict([(2, 64), (2, 64)], "fp32", [16, 16])
    one = table.predict([(4, 64)], "fp32", [16])
    assert 0 < one < full and half < full + 1e-9
    data = json.load(open(table_path))
    assert data["machine"]["cores"] == os.cpu_count() and data["machine_key"] == table.key
    assert any(k.endswith("|fp32|s16|h2|f64") for k in data["layers"])

    # a second table on the same file measures nothing and predicts the same
    again = LatencyTable(table_path, teacher, task, rows)
    monkeypatch.setattr(LatencyTable, "_measure", lambda *a: pytest.fail("measured again"))
    assert again.predict([(4, 64), (4, 64)], "fp32", [16, 16]) == full

    # the whole model beside its prediction; the check is kept in the table
    from compressor.export.onnx import export_onnx

    folder = os.path.join(os.path.dirname(table_path), "teacher-onnx")
    export_onnx(teacher, folder, parity=False)
    check = again.check("teacher", folder, full, 16)
    assert check["measured_ms"] > 0 and check["error"] == round(abs(full - check["measured_ms"]) / check["measured_ms"], 4)
    assert json.load(open(table_path))["checks"][-1]["model"] == "teacher"

    # a table of another machine is refused
    data = json.load(open(table_path))
    data["machine_key"] = "another"
    other = os.path.join(os.path.dirname(table_path), "other.json")
    json.dump(data, open(other, "w"))
    with pytest.raises(CompressorError, match="another machine"):
        LatencyTable(other, teacher, task, rows)


def test_auto_writes_the_front_the_report_and_a_deployable_pick(teacher, table_path, glue_dir, tmp_path):
    from compressor.cli import main
    from compressor.export.runtime import open_graph

    out = tmp_path / "search"
    main(auto_args(teacher, out, table_path, glue_dir, "--trials", "3"))
    report = json.load(open(out / "report.json"))
    done = [r for r in report["trials"] if r["state"] == "COMPLETE"]
    assert len(report["trials"]) == 3 and done
    assert all(r["latency_ms"] > 0 and r["size_bytes"] > 0 and 0 <= r["score"] <= 100 for r in done)
    assert report["front"] and set(report["front"]) <= {r["number"] for r in done}
    pick = report["pick"]
    fastest = min(r["latency_ms"] for r in done)     # max-drop 100: every candidate is inside
    assert pick["latency_ms"] == fastest and pick["dev_examples"] == 32
    assert pick["held_drop"] == round(report["teacher_figures"]["score"] - pick["score"], 4)
    assert report["checks"] and all(c["measured_ms"] > 0 for c in report["checks"])
    assert (out / "front.png").stat().st_size > 1000 and "## Pick" in (out / "report.md").read_text()
    predictor = open_graph(str(out / "pick"))
    assert predictor.logits(["a fine film", "a dull film"]).shape == (2, 2)
    assert "compressor run" in report["command"] and (out / "pick-recipe.yaml").exists()

    # the recipe that rebuilds the pick loads as a recipe
    from compressor.recipe import validate_recipe

    assert validate_recipe(str(out / "pick-recipe.yaml")) == []


@pytest.mark.e2e
def test_a_killed_search_resumes_to_its_trials(teacher, table_path, glue_dir, tmp_path):
    from compressor.cli import main

    out = tmp_path / "search"
    args = auto_args(teacher, out, table_path, glue_dir, "--trials", "4", "--seed", "7")
    env = {**os.environ, "COMPRESSOR_PROGRESS": "0"}
    proc = subprocess.Popen([sys.executable, "-m", "compressor", *args], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            time.sleep(1)
            if (out / "study.db").exists() and (out / "auto.json").exists():
                finished = [t for t in trials_of(str(out)) if t.state.is_finished()]
                if len(finished) >= 2:
                    break
        else:
            pytest.fail("the search did not finish two trials")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    before = {t.number: t.params for t in trials_of(str(out)) if t.state.is_finished()}
    assert len(before) >= 2 and not (out / "report.json").exists()
    main(args)
    after = trials_of(str(out))
    kept = [t for t in after if t.state.name in ("COMPLETE", "PRUNED")]
    assert len(kept) == 4
    assert all(t.params == before[t.number] for t in after if t.number in before)   # not run again
    assert all(t.state.name != "RUNNING" for t in after)   # the killed trial is marked failed
    assert json.load(open(out / "report.json"))["pick"]


@pytest.mark.e2e
def test_two_workers_share_one_journal_storage(teacher, table_path, glue_dir, tmp_path):
    from compressor.cli import main

    out = tmp_path / "search"
    journal = tmp_path / "study.log"
    main(auto_args(teacher, out, table_path, glue_dir, "--trials", "6", "--workers", "2", "--seed", "3",
                   "--storage", f"journal:{journal}"))
    assert journal.exists() and not (out / "study.db").exists()
    trials = trials_of(str(out))
    kept = [t for t in trials if t.state.name in ("COMPLETE", "PRUNED")]
    assert len(kept) == 6 and not any(t.state.name == "RUNNING" for t in trials)
    # which process ran how many is timing: with a warm table the first may run them all before
    # the second has imported torch; at most two processes worked on the study
    assert 1 <= len({t.user_attrs["pid"] for t in trials}) <= 2


def test_bad_input_is_one_line(teacher, tiny_models, glue_dir, tmp_path, table_path, monkeypatch):
    env = {**os.environ, "COMPRESSOR_PROGRESS": "0"}
    # a teacher that held no rows out
    from conftest import save_sst2_classifier
    from compressor.core.models import resolve_model

    plain = save_sst2_classifier(tmp_path / "plain", resolve_model("minilm-l6"), max_length=32)
    run = subprocess.run([sys.executable, "-m", "compressor", *auto_args(plain, tmp_path / "o1", table_path, glue_dir)],
                         capture_output=True, text=True, env=env)
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines()[-1].startswith("error:") and "--holdout" in run.stderr
    # a folder of something else is never written into
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    from compressor.auto.study import run_auto

    with pytest.raises(CompressorError, match="another --out"):
        run_auto(teacher, str(tmp_path / "mine"), data_dir=glue_dir)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"
    # no optuna: the pip command
    monkeypatch.setitem(sys.modules, "optuna", None)
    with pytest.raises(CompressorError, match=r"pip install 'compressor\[auto\]'"):
        run_auto(teacher, str(tmp_path / "o2"), data_dir=glue_dir)


def test_the_auto_stage_hands_its_pick_to_the_next_stage(teacher, table_path, glue_dir, tmp_path):
    from compressor.export.runtime import open_graph
    from compressor.recipe import run_recipe

    recipe = tmp_path / "auto.yaml"
    recipe.write_text(f"""name: auto-stage
task: sst2
device: cpu
data: {{train_limit: 96, dev_limit: 16}}
teacher: {teacher}
stages:
  - auto: {{trials: 2, max_drop: 100, heads: [0, 0.5], ffn: [0], tokens: [1], vocab: [false],
            precisions: [fp32], layer_rules: [top], importance_rows: 16, check_models: 0,
            latency_table: {table_path}}}
""")
    manifest = run_recipe(str(recipe), str(tmp_path / "run"), data_dir=glue_dir)
    folder = os.path.join(str(tmp_path / "run"), manifest["stages"][-1]["model_dir"])
    stage = json.load(open(os.path.join(folder, "record.json")))
    assert manifest["stages"][-1]["kind"] == "onnx" and stage["split"] == "dev" and stage["latency_ms"] > 0
    assert stage["metrics"]["accuracy"] * 100 == pytest.approx(stage["score"])
    assert os.path.exists(os.path.join(folder, "search", "report.json"))
    assert open_graph(folder).logits(["a fine film"]).shape == (1, 2)
