"""compressor auto from a student (issue 34): the trials compress a distilled student while the
teacher stays the reference, and a short proxy recovery trains every trial's last pruning step.

The teacher is a tiny BERT (2 layers, 4 heads) fine-tuned with 16 rows held out; the student is
it with its top layer dropped (1 layer). The latency table is filled with made-up figures (the
table's own measuring is test_auto's), so a search here trains and scores only."""
import json
import os

import pytest

from compressor.core.errors import CompressorError

optuna = pytest.importorskip("optuna")

DATA = ["--train-limit", "64", "--dev-limit", "16"]
SPACE = ["--heads", "0,0.5", "--ffn", "0", "--tokens", "1", "--vocab", "false", "--precisions", "fp32",
         "--layer-rules", "top", "--exits", "none", "--importance-rows", "16", "--max-drop", "100",
         "--recover-candidates", "0", "--check-models", "0"]


def cli(argv):
    from compressor.cli import main

    try:
        main(argv)
    except SystemExit as exc:
        assert exc.code in (0, None), f"compressor {argv[0]} exited {exc.code}"


def made_up_measure(self, needs):
    """LatencyTable._measure without timing: a layer costs its heads and FFN width, the rest 1 ms."""
    for precision, seq, heads, ffn in needs:
        self.data["layers"][self._layer_key(precision, seq, heads, ffn)] = heads / 4 + ffn / 64
        self.data["overhead"][self._overhead_key(precision, seq)] = 1.0


def parameters_of(folder):
    import numpy as np
    import onnx

    return sum(int(np.prod(t.dims)) for t in onnx.load(os.path.join(folder, "model.onnx")).graph.initializer)


@pytest.fixture(scope="module")
def models(tmp_path_factory, minilm_dir, glue_dir):
    from conftest import save_sst2_classifier

    root = tmp_path_factory.mktemp("auto-student")
    plain = save_sst2_classifier(root / "plain", minilm_dir, max_length=16)
    teacher, student = str(root / "teacher"), str(root / "student")
    cli(["finetune", plain, "--task", "sst2", "--out", teacher, "--data-dir", glue_dir, *DATA,
         "--holdout", "16", "--epochs", "1", "--batch-size", "16", "--max-length", "16", "--device", "cpu"])
    cli(["prune", teacher, "--method", "layers", "--set", "rule=top", "--set", "drop=1", "--recover", "mode=none", "--out", student,
         "--data-dir", glue_dir, *DATA, "--set", "device=cpu"])
    return root, teacher, student


@pytest.fixture(scope="module")
def searched(models, glue_dir):
    """A 3-trial search from the student, each trial's pruning recovered for 2 steps, by the command."""
    from compressor.auto.latency import LatencyTable

    root, teacher, student = models
    patch = pytest.MonkeyPatch()
    patch.setattr(LatencyTable, "_measure", made_up_measure)
    out, table = root / "search", root / "table.json"
    try:
        cli(["auto", teacher, "--student", student, "--out", str(out), "--data-dir", glue_dir, *DATA, *SPACE,
             "--latency-table", str(table), "--trials", "3", "--seed", "3", "--device", "cpu",
             "--proxy-recover", "steps=2", "--proxy-recover", "batch_size=8"])
    finally:
        patch.undo()
    return out, table


@pytest.mark.unit
def test_the_table_needs_the_students_shapes_up_to_its_depth():
    from compressor.auto.config import AutoConfig
    from compressor.auto.target import table_needs

    config = AutoConfig(heads=[0.0, 0.5], ffn=[0.0, 0.5], tokens=[1.0, 0.5], precisions=["fp32"], exits=["none"])
    own = table_needs(config, (4, 64), 4, 16)
    student = table_needs(config, (4, 64), 2, 16, source_shapes={(2, 64)})
    shapes = {(h, f) for _, _, h, f in student["layers"]}
    assert shapes == {(4, 64), (2, 64), (2, 32), (1, 64), (1, 32)}   # the teacher's for the report and overhead
    assert {(h, f) for _, _, h, f in own["layers"]} == {(4, 64), (4, 32), (2, 64), (2, 32)}
    assert max(s for _, s in student["tokens"]) == 16 and len(student["tokens"]) < len(own["tokens"])   # 2 layers deep


def test_a_search_from_a_student_compresses_the_student(models, searched):
    from compressor.core.models import count_parameters, load_for_task
    from compressor.core.data import get_task

    _, teacher, student = models
    out, _ = searched
    state = json.load(open(out / "auto.json"))
    report = json.load(open(out / "report.json"))
    assert state["student"] == os.path.abspath(student) and report["student"] == state["student"]
    assert report["teacher"] == os.path.abspath(teacher)
    done = [r for r in report["trials"] if r["state"] == "COMPLETE"]
    assert len(report["trials"]) == 3 and done
    assert all(r["params"]["layers"] == 1 for r in report["trials"])   # the student's depth bounds the layers
    assert all(len(r["layers"]) == 1 for r in done)
    # the budget and the figures are the teacher's: its 2-layer export was scored on the held-out rows
    assert report["teacher_figures"]["score"] == state["teacher_score"]
    assert parameters_of(state["teacher_onnx"]) > parameters_of(out / "pick")
    pick = report["pick"]
    assert pick["held_drop"] == round(state["teacher_score"] - pick["score"], 4)
    net, _ = load_for_task(student, get_task("sst2"))
    assert parameters_of(out / "pick") <= count_parameters(net)
    assert "Student `" in (out / "report.md").read_text()
    # the pick's recipe starts from the student; its recovery (here the proxy's) distils from the teacher
    import yaml

    recipe = yaml.safe_load(open(out / "pick-recipe.yaml"))
    assert recipe["teacher"] == state["student"]
    assert all(s["prune"]["teacher"] == state["teacher"] for s in recipe["stages"]
               if "prune" in s and s["prune"]["recover"].get("mode") != "none")


def test_proxy_recovery_trains_every_pruned_trial_for_its_steps(searched):
    out, _ = searched
    report = json.load(open(out / "report.json"))
    assert report["space"]["proxy_recover"]["train"]["max_steps"] == 2
    pruned = [r for r in report["trials"] if r["state"] == "COMPLETE" and r["params"]["heads"]]
    assert pruned, "no trial pruned heads (seed 3 draws one)"
    for r in pruned:
        assert r["proxy_recovery"]["steps"] == 2 and r["proxy_recovery"]["train_time_s"] is not None
    assert "recovery s" in (out / "report.md").read_text()


def test_proxy_recovery_changes_the_trials_weights(models, glue_dir, tmp_path):
    import torch

    from compressor.auto.candidate import build_candidate
    from compressor.auto.config import AutoConfig, proxy_settings
    from compressor.core.data import data_for, get_task, holdout
    from compressor.core.models import load_for_task

    _, teacher, student = models
    task = get_task("sst2")
    train_set, held = holdout.training_and_held(task, glue_dir, 64, data_for(teacher, task, None), teacher)
    config = AutoConfig(importance_rows=16, max_length=16, device="cpu",
                        proxy_recover={"train": {"max_steps": 3, "batch_size": 8}})
    point = {"layers": 1, "layer_rule": "top", "heads": 0.5, "ffn": 0.0, "vocab": False, "tokens": 1.0,
             "precision": "fp32", "mixed_fp32": 1, "exit": "none", "exit_target": 0.9}
    built = {}
    for name, recover in (("plain", None), ("recovered", proxy_settings(config))):
        cand = build_candidate(student, task, train_set, held, point, str(tmp_path / name), 1, config,
                               recover=recover, teacher=teacher)
        step = next(s["step"] for s in cand["steps"] if "prune" in s["step"])
        built[name] = (cand, load_for_task(str(tmp_path / name / step), task)[0].state_dict())
    assert built["plain"][0]["recovery"] is None and built["recovered"][0]["recovery"]["steps"] == 3
    plain, recovered = built["plain"][1], built["recovered"][1]
    assert plain.keys() == recovered.keys()
    assert any(not torch.equal(plain[k], recovered[k]) for k in plain)


def test_a_search_from_a_student_resumes_and_refuses_another_student(models, searched, glue_dir):
    from compressor.auto.latency import LatencyTable
    from compressor.auto.study import run_auto

    _, teacher, student = models
    out, table = searched
    settings = dict(heads=[0.0, 0.5], ffn=[0.0], tokens=[1.0], vocab=[False], precisions=["fp32"],
                    layer_rules=["top"], exits=["none"], importance_rows=16, max_drop=100, recover_candidates=0,
                    check_models=0, latency_table=str(table), seed=3, device="cpu",
                    proxy_recover={"train": {"max_steps": 2, "batch_size": 8}})
    before = {t["number"]: t["params"] for t in json.load(open(out / "report.json"))["trials"]}
    patch = pytest.MonkeyPatch()
    patch.setattr(LatencyTable, "_measure", made_up_measure)
    try:
        report = run_auto(teacher, str(out), student=student, trials=4, data_dir=glue_dir, train_limit=64,
                          dev_limit=16, log=lambda msg: None, **settings)
        assert len(report["trials"]) == 4
        assert all(report["trials"][n]["params"] == p for n, p in before.items())   # not run again
        with pytest.raises(CompressorError, match="--student"):
            run_auto(teacher, str(out), trials=4, data_dir=glue_dir, train_limit=64, dev_limit=16,
                     log=lambda msg: None, **settings)
    finally:
        patch.undo()


def test_the_auto_stage_searches_from_its_input_as_the_student(models, searched, glue_dir, tmp_path):
    """``auto: {student: recipe}`` after a pruning stage: the stage's input is the student, the
    recipe's teacher the reference."""
    from compressor.auto.latency import LatencyTable
    from compressor.recipe import run_recipe

    _, teacher, _ = models
    _, table = searched
    recipe = tmp_path / "auto.yaml"
    recipe.write_text(f"""name: auto-student
task: sst2
device: cpu
data: {{train_limit: 64, dev_limit: 16}}
teacher: {teacher}
stages:
  - prune: {{method: layers, rule: top, drop: 1, recover: {{mode: none}}}}
  - auto: {{student: recipe, trials: 1, max_drop: 100, heads: [0], ffn: [0], tokens: [1], vocab: [false],
            precisions: [fp32], exits: [none], layer_rules: [top], importance_rows: 16, check_models: 0,
            recover_candidates: 0, latency_table: {table}}}
""")
    patch = pytest.MonkeyPatch()
    patch.setattr(LatencyTable, "_measure", made_up_measure)
    try:
        manifest = run_recipe(str(recipe), str(tmp_path / "run"), data_dir=glue_dir)
    finally:
        patch.undo()
    search = os.path.join(str(tmp_path / "run"), manifest["stages"][-1]["dir"], "search")
    state = json.load(open(os.path.join(search, "auto.json")))
    assert state["student"].endswith("01-prune") and state["teacher"] != state["student"]
    report = json.load(open(os.path.join(search, "report.json")))
    assert [r["params"]["layers"] for r in report["trials"]] == [1]


def test_measure_table_with_a_student_measures_the_students_shapes(models, glue_dir, tmp_path):
    """A student with half its heads pruned: ``--measure-table --student`` measures the shapes the
    shares leave of its layers (and the teacher's, for the report); the search from it then finds
    them all in the target table, and a search that compresses the teacher does not."""
    from compressor.auto.latency import LatencyTable, MissingEntry
    from compressor.auto.target import check_target_table, measure_table
    from compressor.core.data import get_task

    _, teacher, _ = models
    halved = str(tmp_path / "halved")
    cli(["prune", teacher, "--method", "structured", "--set", "heads=0.5", "--set", "ffn=0", "--set", "scope=layer", "--recover",
         "mode=none", "--out", halved, "--data-dir", glue_dir, *DATA, "--set", "device=cpu"])
    space = dict(heads=[0.0, 0.5], ffn=[0.0], tokens=[1.0], precisions=["fp32"], exits=["none"], seq_len=16)
    asked = []
    patch = pytest.MonkeyPatch()
    patch.setattr(LatencyTable, "_measure", lambda self, needs: asked.extend(needs) or made_up_measure(self, needs))
    try:
        done = measure_table(teacher, str(tmp_path / "table.json"), data_dir=glue_dir, log=lambda m: None,
                             student=halved, **space)
    finally:
        patch.undo()
    assert {(h, f) for _, _, h, f in asked} == {(4, 64), (2, 64), (1, 64)} and done["measured"] == 3
    from compressor.auto.config import AutoConfig

    config = AutoConfig(target_table=str(tmp_path / "table.json"), student=halved, **space)
    check_target_table(config, teacher, get_task("sst2"), 16, lambda m: None, student=halved)
    # a table measured for the teacher's search over the same shares lacks the student's smallest shape
    patch.setattr(LatencyTable, "_measure", made_up_measure)
    try:
        measure_table(teacher, str(tmp_path / "teacher.json"), data_dir=glue_dir, log=lambda m: None, **space)
    finally:
        patch.undo()
    config.target_table = str(tmp_path / "teacher.json")
    with pytest.raises(MissingEntry, match="the layer of 1 heads and FFN 64"):
        check_target_table(config, teacher, get_task("sst2"), 16, lambda m: None, student=halved)
