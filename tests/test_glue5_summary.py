"""The headline's GLUE-5 summary: means over the five tasks, retention against each run's own
teacher, and no GLUE-5 figure from fewer than five tasks."""
import json
import os

import pytest

from bench.experiments import mpnet_glue5_summary as summary

pytestmark = pytest.mark.unit


def write(folder, name, score, **more):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "w") as f:
        json.dump({"score": score, "parameters": 1000, **more}, f)


@pytest.fixture
def results(tmp_path):
    root = tmp_path / "mpnet-glue5"
    teachers = {"sst2": 94.0, "mrpc": 90.0, "stsb": 89.0, "rte": 65.0, "cola": 55.0}
    for task, score in teachers.items():
        write(root / "students", f"{task}-metrics.json", score)
        write(root / "students", f"{task}-6L-pkd-metrics.json", score - 2)
        if task != "sst2":
            write(root / "students", f"{task}-6L-kd-metrics.json", score - 1)
        write(tmp_path / "mpnet-glue5-h100", f"{task}-metrics.json", score + 1)
        write(tmp_path / "mpnet-glue5-h100", f"{task}-6L-metrics.json", score - 3)
    write(root / "pipeline", "rte-metrics.json", 66.0)          # a run with one task only
    write(root / "pipeline", "rte-chain-metrics.json", 64.0)
    return root, teachers


def test_glue5_is_the_mean_of_five_tasks_and_retention_is_against_each_runs_teacher(results):
    root, teachers = results
    got = summary.main(str(root))
    mean = sum(teachers.values()) / 5
    assert got["teachers_students_run"]["glue5"] == pytest.approx(round(mean, 2))
    assert got["pkd_6L_students_run"]["glue5"] == pytest.approx(round(mean - 2, 2))
    assert got["pkd_6L_students_run"]["retention"] == pytest.approx(round((mean - 2) / mean, 6))
    # kd: four small tasks from this session (teacher - 1), SST-2 from the earlier one (its
    # teacher 95, student 91)
    kd = got["kd_6L_students"]
    assert kd["glue5"] == pytest.approx(round((91 + sum(teachers[t] - 1 for t in teachers if t != "sst2")) / 5, 2))
    assert kd["teacher_glue5"] == pytest.approx(round((95 + sum(teachers[t] for t in teachers if t != "sst2")) / 5, 2))
    record = json.load(open(root / "summary.json"))
    chain = [r for r in record["rows"] if r["name"] == "pipeline/rte/chain"]
    assert chain and chain[0]["retention"] == pytest.approx(64 / 66, abs=1e-3)
    assert (root / "summary.md").read_text().count("| rte | pipeline |") == 2


def test_no_glue5_figure_from_fewer_than_five_tasks(results):
    root, _ = results
    os.remove(root / "students" / "cola-6L-pkd-metrics.json")
    got = summary.main(str(root))
    assert "glue5" not in got["pkd_6L_students_run"]
    assert got["pkd_6L_students_run"]["tasks"] == ["mrpc", "rte", "sst2", "stsb"]


def test_a_seed_recipes_run_is_scored_against_the_teacher_of_that_very_run(results):
    root, _ = results
    for name, task, teacher, last in (("tinybert-4l-rte", "rte", 66.0, 52.5), ("pkd-6l-rte", "rte", 66.0, 60.0),
                                      ("pkd-6l-cola", "cola", 54.0, 0.0)):
        os.makedirs(root / "seeds" / name)
        stages = [{"stage": "teacher", "score": teacher, "parameters": 100},
                  {"stage": "distill", "score": last + 1, "parameters": 50},
                  {"stage": "evaluate", "score": last, "parameters": 50}]
        (root / "seeds" / name / "manifest.json").write_text(json.dumps({"task": task, "stages": stages}))
    # a rerun of TinyBERT's recipe on CoLA whose distill stage trained a general phase first
    os.makedirs(root / "seeds" / "tinybert-4l-cola" / "01-distill")
    (root / "seeds" / "tinybert-4l-cola" / "01-distill" / "record.json").write_text(
        json.dumps({"phases": [{"phase": "general"}, {"phase": "intermediate"}, {"phase": "predict"}]}))
    (root / "seeds" / "tinybert-4l-cola" / "manifest.json").write_text(json.dumps({"task": "cola", "stages": [
        {"stage": "teacher", "score": 54.0}, {"dir": "01-distill", "stage": "distill", "score": 20.0}]}))
    entries = summary.collect_seeds(str(root))
    by = {(e["task"], e["model"]): e for e in entries}
    assert [e["model"] for e in entries[:2]] == ["teacher", "teacher"]      # one teacher row per task
    assert by[("rte", "tinybert-4l")]["score"] == 52.5                      # the last stage, not the best
    assert by[("rte", "tinybert-4l")]["retention"] == pytest.approx(round(52.5 / 66.0, 6))
    assert by[("cola", "pkd-6l")]["teacher"] == 54.0 and by[("cola", "pkd-6l")]["retention"] == 0.0
    assert "recipes/mpnet/pkd-6l.yaml" in by[("rte", "pkd-6l")]["label"]
    # the schedule in the label comes from what the run trained, not from the recipe's name
    assert "task stage only (no general distillation)" in by[("rte", "tinybert-4l")]["label"]
    assert "general distillation first" in by[("cola", "tinybert-4l")]["label"]
    summary.main(str(root))                       # and the written table carries them
    table = (root / "summary.md").read_text()
    assert "| cola | seeds | BERT-PKD 6-layer" in table and "| 0.00 | 54.00 | 0.0% |" in table


def test_seed_runs_from_sessions_with_different_teachers_name_every_teacher(results):
    root, _ = results
    for name, teacher, last in (("pkd-6l-rte", 66.0, 60.0), ("theseus-6l-rte", 65.0, 58.5)):
        os.makedirs(root / "seeds" / name)
        (root / "seeds" / name / "manifest.json").write_text(json.dumps({"task": "rte", "stages": [
            {"stage": "teacher", "score": teacher}, {"stage": "theseus", "score": last}]}))
    entries = summary.collect_seeds(str(root))
    teacher = [e for e in entries if e["model"] == "teacher"]
    assert len(teacher) == 1 and "RTE 65.00/66.00" in teacher[0]["label"]
    theseus = [e for e in entries if e["model"] == "theseus-6l"][0]
    assert theseus["teacher"] == 65.0 and theseus["retention"] == pytest.approx(round(58.5 / 65.0, 6))


def test_the_table_rounds_retention_once(results):
    """76.746 of 89.704 is 85.554%: the table says 85.6%, not 85.5% from a ratio rounded first."""
    root, _ = results
    os.makedirs(root / "seeds" / "albert-share-mrpc")
    (root / "seeds" / "albert-share-mrpc" / "manifest.json").write_text(json.dumps({"task": "mrpc", "stages": [
        {"stage": "teacher", "score": 89.7043800006868}, {"stage": "share", "score": 76.74602414255605}]}))
    summary.main(str(root))
    assert "| 76.75 | 89.70 | 85.6% |" in (root / "summary.md").read_text()


def test_a_seed_recipe_on_all_five_tasks_gets_a_glue5_figure_and_one_on_four_does_not(results):
    root, teachers = results
    for task, t in teachers.items():
        for recipe, drop in (("distilbert-6l", 3.0), ("theseus-6l", 5.0)):
            if recipe == "theseus-6l" and task == "sst2":
                continue                                  # not run on SST-2
            teacher = t + (0.5 if task == "mrpc" else 0.0)  # another session's MRPC teacher
            os.makedirs(root / "seeds" / f"{recipe}-{task}")
            (root / "seeds" / f"{recipe}-{task}" / "manifest.json").write_text(json.dumps({"task": task, "stages": [
                {"stage": "teacher", "score": teacher}, {"stage": "distill", "score": teacher - drop}]}))
    got = summary.main(str(root))
    kd = got["seeds_distilbert-6l"]
    mean_teacher = (sum(teachers.values()) + 0.5) / 5
    assert kd["glue5"] == pytest.approx(round(mean_teacher - 3, 2))
    assert kd["teacher_glue5"] == pytest.approx(round(mean_teacher, 2))
    assert kd["retention"] == pytest.approx(round((mean_teacher - 3) / mean_teacher, 6), abs=1e-6)
    assert "glue5" not in got["seeds_theseus-6l"] and "sst2" not in got["seeds_theseus-6l"]["tasks"]
    table = (root / "summary.md").read_text()
    assert "GLUE-5 of the seed recipes" in table and f"| {mean_teacher - 3:.2f} | {mean_teacher:.2f} |" in table
    assert "BERT-of-Theseus" not in table.split("GLUE-5 of the seed recipes")[1].split("GLUE-5: ")[0]


def test_a_mixed_precision_run_says_where_its_search_chose(results):
    """Q-BERT-style runs: a search on dev is labelled best-of-dev, one on training rows says how many."""
    root, _ = results
    for name, search in (("qbert-mixed-rte", {"fp32_units": ["layer.7"]}),            # before search_on existed
                         ("qbert-mixed-cola", {"search_on": "train", "search_rows": 2000, "fp32_units": []})):
        os.makedirs(root / "seeds" / name / "02-quantize")
        (root / "seeds" / name / "02-quantize" / "record.json").write_text(json.dumps({"search": search}))
        (root / "seeds" / name / "manifest.json").write_text(json.dumps({"task": name.split("-")[-1], "stages": [
            {"stage": "teacher", "score": 60.0}, {"dir": "01-export", "stage": "export", "score": 60.0},
            {"dir": "02-quantize", "stage": "quantize", "score": 59.5}]}))
    by = {e["task"]: e for e in summary.collect_seeds(str(root)) if e["model"] == "qbert-mixed"}
    assert "FP32 layers chosen on dev (best-of-dev)" in by["rte"]["label"]
    assert "FP32 layers chosen on 2000 training rows" in by["cola"]["label"]


def test_the_glue5_row_of_a_recipe_names_the_task_whose_run_chose_differently(results):
    """Four tasks searched on training rows and SST-2 on dev: the GLUE-5 row says SST-2's is a best-of-dev."""
    root, teachers = results
    for task, t in teachers.items():
        search = {"fp32_units": []} if task == "sst2" else {"search_on": "train", "search_rows": 2000}
        name = f"qbert-mixed-{task}"
        os.makedirs(root / "seeds" / name / "02-quantize")
        (root / "seeds" / name / "02-quantize" / "record.json").write_text(json.dumps({"search": search}))
        (root / "seeds" / name / "manifest.json").write_text(json.dumps({"task": task, "stages": [
            {"stage": "teacher", "score": t}, {"dir": "01-export", "stage": "export", "score": t},
            {"dir": "02-quantize", "stage": "quantize", "score": t - 0.5}]}))
    got = summary.main(str(root))
    glue5 = (root / "summary.md").read_text().split("GLUE-5 of the seed recipes")[1].split("GLUE-5: ")[0]
    row = next(line for line in glue5.splitlines() if "Q-BERT" in line)
    said = "FP32 layers chosen on 2000 training rows (SST-2: FP32 layers chosen on dev (best-of-dev))"
    assert said in row and row.count("recipes/mpnet/qbert-mixed.yaml") == 1
    assert said in got["seeds_qbert-mixed"]["label"]
    # the report's table of these recipes takes that label, not the first task's
    from bench.experiments import mpnet_glue5_report as report

    others = report.other_systems(json.loads((root / "summary.json").read_text()))
    assert said in next(m for m in others if m["model"] == "qbert-mixed")["label"]


def test_a_run_on_a_teacher_with_rows_held_out_has_its_own_teacher_row(results):
    """qbert-mixed-holdout runs on TASK-holdout (fewer training rows): its teacher is not one more
    score of the task's teacher, and it is no recipe of its own in the GLUE-5 rows."""
    root, teachers = results
    for task, t in teachers.items():
        for recipe, folder, teacher in (("qbert-mixed", f"~/glue5/{task}", t),
                                        ("qbert-mixed-holdout", f"~/glue5/{task}-holdout", t - 1.0)):
            os.makedirs(root / "seeds" / f"{recipe}-{task}")
            (root / "seeds" / f"{recipe}-{task}" / "manifest.json").write_text(json.dumps({"task": task, "stages": [
                {"stage": "teacher", "score": teacher, "model_dir": folder},
                {"stage": "quantize", "score": teacher - 0.5,
                 "size_bytes": 400e6 if task == "cola" and recipe.endswith("holdout") else 110e6}]}))
    entries = summary.collect_seeds(str(root))
    rte = {e["model"]: e for e in entries if e["task"] == "rte"}
    assert rte["teacher"]["score"] == teachers["rte"] and "held out" not in rte["teacher"]["label"]
    assert rte["teacher-holdout"]["score"] == teachers["rte"] - 1.0 and "held out" in rte["teacher-holdout"]["label"]
    assert "fine-tuned again" not in rte["teacher"]["label"]        # no spread: two kinds, one score each
    assert rte["qbert-mixed-holdout"]["teacher"] == teachers["rte"] - 1.0
    got = summary.main(str(root))
    assert "seeds_teacher-holdout" not in got and "seeds_teacher" not in got
    held = got["seeds_qbert-mixed-holdout"]
    assert held["teacher_glue5"] == pytest.approx(round(sum(teachers.values()) / 5 - 1.0, 2))
    # the size shows what a search kept FP32 (CoLA's 400 MB here), which retention alone hides
    assert held["mean_size_mb"] == pytest.approx(168.0) and got["seeds_qbert-mixed"]["mean_size_mb"] == 110.0
    assert "| 168.0 |" in (root / "summary.md").read_text()
