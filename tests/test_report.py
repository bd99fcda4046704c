"""compressor report on a small fixture: table, Pareto frontier, HTML, JSON rows, run folders."""
import json
import os
import re

import pytest
from click.testing import CliRunner

from compressor.cli import cli
from compressor.core.errors import CompressorError
from compressor.core.results import REQUIRED, row, write_results

pytestmark = pytest.mark.unit


def _timed(name, group, p50, value, teacher=90.0, threads=1, engine="onnxruntime"):
    return row(name, "sst2", "accuracy", value, teacher, parameters=1000, size_bytes=4_000_000,
               engine=engine, device="cpu", threads=threads, batch_size=1,
               latency_ms={"p50": p50, "p90": p50 * 1.3, "p99": p50 * 1.6, "mean": p50 * 1.1},
               extra={"group": group, "precision": "fp32"})


@pytest.fixture
def results_file(tmp_path):
    rows = [_timed("teacher", "teacher", 20.0, 90.0, engine="pytorch"),
            _timed("student-3L", "ours", 6.0, 88.0),
            _timed("student-int8", "ours", 3.0, 87.0),
            _timed("slow-and-bad", "ours", 15.0, 85.0),
            _timed("ort-fp32", "peer", 10.0, 90.0),
            _timed("ort-o2-int8", "peer", 5.0, 86.0),
            _timed("teacher", "teacher", 12.0, 90.0, threads=2, engine="pytorch"),
            row("student-3L", "sst2", "accuracy", 88.0, 90.0, parameters=1000, size_bytes=4_000_000,
                engine="onnxruntime", device="cpu", threads=1, batch_size=32, throughput=400.0,
                extra={"group": "ours"})]
    path = str(tmp_path / "results.json")
    write_results(path, rows, command="compressor bench fixture")
    return path


def test_pareto_frontier_and_speedups(results_file):
    from compressor.bench.report import collect, variants

    view = variants(collect([results_file]))
    assert view["threads"] == 1
    by = {v["name"]: v for v in view["lines"]}
    frontier = {n for n, v in by.items() if v["pareto"]}
    # ort-fp32 (10 ms, 90) beats the teacher (20 ms, 90) on speed at equal score;
    # student-int8 (3 ms, 87) beats ort-o2-int8 (5 ms, 86) on both
    assert frontier == {"ort-fp32", "student-3L", "student-int8"}
    assert by["student-3L"]["speedup_teacher"] == pytest.approx(20 / 6, abs=0.01)
    assert view["best_peer"] == "ort-o2-int8"
    assert by["student-int8"]["speedup_best_peer"] == pytest.approx(5 / 3, abs=0.01)
    assert by["student-3L"]["throughput_best"] == (32, 400.0)
    two = variants(collect([results_file]), threads=2)
    assert [v["name"] for v in two["lines"]] == ["teacher"]
    with pytest.raises(CompressorError, match="no latency measured at 4 threads"):
        variants(collect([results_file]), threads=4)


def test_markdown_html_and_plot(results_file, tmp_path):
    res = CliRunner().invoke(cli, ["report", results_file, "--out", str(tmp_path / "rep")])
    assert res.exit_code == 0, res.output
    md = open(tmp_path / "rep" / "report.md").read()
    assert "| student-3L | student-3L | ours | onnxruntime | fp32 | 1,000 | 4.0 | 88.00 | 97.8% | 6.00 |" in md
    # the mean beside the percentiles: early exit's p50 hides the rows that run every layer
    assert "| p50 (ms) | p90 (ms) | mean (ms) |" in md and "| 6.00 | 7.80 | 6.60 |" in md
    assert "| slow-and-bad |" in md and re.search(r"\| slow-and-bad \|.*\|  \|$", md, re.M)  # not on the frontier
    assert "**Peers**" in md and "ORT FP32 10.0 ms (2.00x)" in md and "`compressor bench fixture`" in md
    html = open(tmp_path / "rep" / "report.html").read()
    assert html.count("data:image/png;base64,") == 1
    assert not re.search(r"""(src|href)=["'](?!data:)""", html)  # self-contained: nothing fetched
    png = open(tmp_path / "rep" / "report.png", "rb").read()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_every_thread_count_gets_a_table_and_a_speedup(tmp_path):
    rows = [_timed("teacher", "teacher", 20.0, 90.0, engine="pytorch"),
            _timed("teacher", "teacher", 12.5, 90.0, threads=2, engine="pytorch"),
            _timed("student-int8", "ours", 4.0, 87.0),
            _timed("student-int8", "ours", 2.5, 87.0, threads=2),
            _timed("ort-o2-int8", "peer", 5.0, 86.0)]          # measured at 1 thread only
    path = str(tmp_path / "results.json")
    write_results(path, rows, command="compressor bench --threads 1,2")
    res = CliRunner().invoke(cli, ["report", path, "--out", str(tmp_path / "rep")])
    assert res.exit_code == 0, res.output
    md = open(tmp_path / "rep" / "report.md").read()
    assert "## Speed and score (batch 1, 1 thread)" in md and "## Speed and score (batch 1, 2 threads)" in md
    two = md.split("## Speed and score (batch 1, 2 threads)")[1].split("## Threads")[0]
    assert "| student-int8 | student-int8 | ours | onnxruntime | fp32 | 1,000 | 4.0 | 87.00 | 96.7% | 2.50 |" in two
    assert "ort-o2-int8" not in two.split("**Peers**")[0]
    assert "| p50 @ 1 | p50 @ 2 | speed-up @ 2 |" in md
    assert "| teacher | teacher | 20.00 | 12.50 | 1.60x |" in md
    assert "| student-int8 | ours | 4.00 | 2.50 | 1.60x |" in md and "| ort-o2-int8 | peer | 5.00 |  |  |" in md
    # one thread count asked for: that table alone
    res = CliRunner().invoke(cli, ["report", path, "--out", str(tmp_path / "rep2"), "--threads", "2"])
    md2 = open(tmp_path / "rep2" / "report.md").read()
    assert "2 threads)" in md2 and "1 thread)" not in md2 and "## Threads" not in md2
    res = CliRunner().invoke(cli, ["report", path, "--json"])
    by = {r["name"]: r for r in map(json.loads, res.output.splitlines())}
    assert by["teacher"]["extra"]["speedup_by_threads"] == {"1": 1.0, "2": 1.6}
    assert "speedup_by_threads" not in by["ort-o2-int8"]["extra"]


def test_json_prints_one_row_per_variant(results_file):
    res = CliRunner().invoke(cli, ["report", results_file, "--json"])
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in res.output.splitlines()]
    assert [r["name"] for r in rows] == ["teacher", "student-3L", "student-int8", "slow-and-bad", "ort-fp32",
                                         "ort-o2-int8"]
    for r in rows:
        assert all(k in r for k in REQUIRED)
        assert r["engine"] and r["threads"] == 1 and r["batch_size"] == 1
        assert set(r["latency_ms"]) >= {"p50", "p90"} and r["command"] == "compressor bench fixture"
    assert rows[1]["retention"] == pytest.approx(88 / 90, abs=1e-4)


def test_run_folder_without_bench_and_bad_paths(tmp_path, tiny_models):
    from compressor.bench.report import collect, write_report_files

    run = tmp_path / "run"
    (run / "00-teacher").mkdir(parents=True)
    record = {"stage": "teacher", "dir": "00-teacher", "kind": "hf", "score": 90.0,
              "metrics": {"accuracy": 0.9}, "parameters": 1000, "size_bytes": 4000, "wall_time_s": 3}
    (run / "00-teacher" / "record.json").write_text(json.dumps(record))
    (run / "manifest.json").write_text(json.dumps({"recipe": "r", "task": "sst2", "source": "r.yaml",
                                                   "stages": [record]}))
    rows = collect([str(run)])
    assert rows[0]["name"] == "00-teacher" and rows[0]["retention"] == 1.0
    written = write_report_files([str(run)])
    assert not os.path.exists(run / "report.png")  # nothing timed: no plot
    assert "| 00-teacher | teacher, FP32 | hf | 1,000 |" in open(written[0]).read()
    with pytest.raises(CompressorError, match="no such run folder"):
        collect([str(tmp_path / "missing")])
    (tmp_path / "other.json").write_text("{}")
    with pytest.raises(CompressorError, match="not a results file"):
        collect([str(tmp_path / "other.json")])


def test_variants_scored_on_several_tasks_get_a_glue_column(tmp_path):
    from compressor.bench.report import markdown

    rows = [row("student", "sst2", "accuracy", 88.0, 90.0), row("student", "mrpc", "f1+accuracy", 80.0, 84.0),
            row("teacher", "sst2", "accuracy", 90.0, 90.0), row("teacher", "mrpc", "f1+accuracy", 84.0, 84.0)]
    md = markdown(rows)
    assert "| variant | mrpc | sst2 | GLUE score (tasks given) |" in md
    assert "| student | 80.00 | 88.00 | 84.00 (2) |" in md and "| teacher | 84.00 | 90.00 | 87.00 (2) |" in md


def test_results_without_timings_get_a_score_table():
    from compressor.bench.report import markdown

    rows = [row("teacher", "sst2", "accuracy", 93.46, parameters=109_000_000),
            row("student-gpu2", "sst2", "accuracy", 91.86, 93.46, parameters=67_000_000)]
    md = markdown(rows)
    assert "## Scores" in md and "Speed and score" not in md
    assert "| student-gpu2 | sst2 | accuracy | 91.86 | 98.3% | 67,000,000 |" in md


def test_every_committed_result_is_one_results_format_and_renders(tmp_path):
    from compressor.bench.report import collect, markdown, write_report_files
    from compressor.core.results import FORMAT

    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "results")
    files = sorted(os.path.join(here, f) for f in os.listdir(here)
                   if f.endswith(".json") and not f.endswith("-manifest.json"))
    assert len(files) >= 30
    for f in files:
        assert json.load(open(f)).get("format") == FORMAT, f
    rows = collect(files)
    write_report_files(files, str(tmp_path), title="committed", rows=rows)
    assert (tmp_path / "report.md").exists() and (tmp_path / "report.png").exists()
    # the fine-tuning rows line one model's tasks up in the per-task table
    tasks = [r for r in collect([os.path.join(here, f"finetune-minilm-l6-{t}-seed42.json")
                                 for t in ("sst2", "mrpc")])]
    assert [(r["name"], r["task"]) for r in tasks] == [("minilm-l6-seed42", "sst2"), ("minilm-l6-seed42", "mrpc")]
    assert tasks[1]["metric"] == "f1+accuracy"
    glue = (tasks[0]["value"] + tasks[1]["value"]) / 2
    assert f"| minilm-l6-seed42 | {tasks[1]['value']:.2f} | {tasks[0]['value']:.2f} | {glue:.2f} (2) |" \
        in markdown(tasks)


def test_commands_name_paths_as_typed_from_the_checkout(tmp_path, monkeypatch):
    from compressor.core.results import command_line, run_command

    monkeypatch.chdir(tmp_path)
    script = str(tmp_path / ".venv" / "bin" / "compressor")
    assert command_line([script, "run", str(tmp_path / "r.yaml"), "--out", str(tmp_path / "runs" / "a"),
                         "--data-dir=/elsewhere/glue"]) == \
        "compressor run r.yaml --out runs/a --data-dir=/elsewhere/glue"
    assert command_line([str(tmp_path / "bench" / "experiments" / "x.py"), "--n", "3"]) == \
        "python -m bench.experiments.x --n 3"
    assert run_command(str(tmp_path / "r.yaml"), "runs/b") == "compressor run r.yaml --out runs/b"


def test_committed_results_name_no_path_of_the_machine_that_made_them():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    here = os.path.abspath(root)
    found = []
    for folder, _, files in os.walk(os.path.join(root, "bench", "results")):
        for name in files:
            text = open(os.path.join(folder, name), errors="replace").read()
            if here + os.sep in text or "/tmp/demo-clone" in text:
                found.append(name)
    assert found == []


def test_benches_of_several_tasks_are_compared_task_by_task(tmp_path):
    """Two tasks' benches in one report: each task gets its own speed tables and plot, a variant is
    set against its own task's teacher and peers (never the other task's rows of the same name),
    and asking for one comparison across tasks is refused."""
    from compressor.bench.report import collect, json_rows, variants

    def timed(task, name, group, p50, value):
        return row(name, task, "accuracy", value, 90.0, parameters=1000, size_bytes=4_000_000,
                   engine="onnxruntime", device="cpu", threads=1, batch_size=1,
                   latency_ms={"p50": p50, "p90": p50, "p99": p50, "mean": p50}, extra={"group": group})

    paths = []
    for task, teacher_ms, ours_ms in (("sst2", 100.0, 10.0), ("rte", 40.0, 20.0)):
        path = str(tmp_path / f"{task}.json")
        write_results(path, [timed(task, "teacher", "teacher", teacher_ms, 90.0),
                             timed(task, "chain", "ours", ours_ms, 85.0),
                             timed(task, "ort-o2-int8", "peer", ours_ms * 2, 80.0)], command=f"bench {task}")
        paths.append(path)
    rows = collect(paths)
    with pytest.raises(CompressorError, match="several tasks"):
        variants(rows)
    assert {v["name"]: v["speedup_teacher"] for v in variants(rows, task="rte")["lines"]}["chain"] == 2.0
    by = {(r["name"], r["task"]): r for r in json_rows(rows)}
    assert len(by) == 6
    assert by["chain", "sst2"]["extra"]["speedup_teacher"] == 10.0
    assert by["chain", "rte"]["extra"]["speedup_teacher"] == 2.0
    assert by["chain", "rte"]["latency_ms"]["p50"] == 20.0

    res = CliRunner().invoke(cli, ["report", *paths, "--out", str(tmp_path / "rep")])
    assert res.exit_code == 0, res.output
    md = open(tmp_path / "rep" / "report.md").read()
    assert "## rte: Speed and score (batch 1, 1 thread)" in md and "## sst2: Speed and score" in md
    assert "![latency versus score](report-rte.png)" in md and "![latency versus score](report-sst2.png)" in md
    rte = md.split("## rte: ")[1].split("## sst2: ")[0]
    assert "| chain | ours |" in rte and "| 20.00 |" in rte and "| 2.00x |" in rte and "10.00x" not in rte
    assert os.path.getsize(tmp_path / "rep" / "report-rte.png") > 0
    assert not os.path.exists(tmp_path / "rep" / "report.png")
    assert open(tmp_path / "rep" / "report.html").read().count("data:image/png;base64,") == 2


def _fingerprint(flags):
    return {"machine": "x86_64", "processor": "test CPU", "cores": 2, "cpu_flags": flags, "versions": {}}


def test_every_warning_the_bench_recorded_reaches_the_report_beside_its_figures(tmp_path):
    """Other processes' CPU share above the bench's threshold, a VNNI preset's INT8 graph timed on
    an AVX2-only CPU (it saturates there), bf16 on a CPU that emulates it, and whatever warnings the
    results file holds: each in the markdown and HTML, next to the table, its figures marked."""
    from compressor.bench.report import plot_png, collect, row_warnings

    noisy = _timed("student-int8", "ours", 0.58, 87.0)
    noisy["extra"].update(other_cpu_share=0.855, precision="int8-dynamic", preset="avx512_vnni")
    teacher = _timed("teacher", "teacher", 17.0, 90.0, engine="pytorch")
    teacher["extra"]["other_cpu_share"] = 0.855
    bf16 = _timed("teacher-bf16", "ours", 30.0, 90.0, engine="pytorch")
    bf16["extra"]["precision"] = "bf16"
    path = str(tmp_path / "results.json")
    write_results(path, [teacher, noisy, bf16], command="compressor bench noisy",
                  fingerprint_info=_fingerprint(["avx", "avx2", "fma"]),
                  warnings=["the teacher's tokenizer was truncated at 64 tokens"])
    res = CliRunner().invoke(cli, ["report", path, "--out", str(tmp_path / "rep")])
    assert res.exit_code == 0, res.output
    md = open(tmp_path / "rep" / "report.md").read()
    html = open(tmp_path / "rep" / "report.html").read()
    for text in ("other processes used 86% of this machine's CPU while timing: these figures are noisy",
                 "the avx512_vnni preset's INT8 graph saturates on this CPU",
                 "bf16 on this CPU (no AVX-512 BF16 or AMX) is emulated",
                 "the teacher's tokenizer was truncated at 64 tokens"):
        assert text in md and text in html, text
    speed = md.split("## Speed and score")[1]
    # the warnings come before the plot and the table they qualify, naming the variants
    assert speed.index("**Warning** (`teacher`, `student-int8`") < speed.index("![latency versus score]") \
        < speed.index("| variant | name |")
    assert "| 0.58 ⚠ |" in md and "29.31x ⚠" in md and "| 87.00 ⚠ |" in md   # latency, speed-up, score
    assert "<b>Warning</b>" in html
    # the plot's footnote: the same warnings (a taller figure than without them)
    rows = collect([path])
    quiet = [dict(r, extra={k: v for k, v in r["extra"].items() if k != "other_cpu_share"},
                  fingerprint=_fingerprint(["avx2", "avx512_vnni", "avx512_bf16"]), file_warnings=None)
             for r in rows]
    assert all(row_warnings(r) == [] for r in quiet if r["name"] != "student-int8")
    from PIL import Image
    import io as _io
    tall = Image.open(_io.BytesIO(plot_png(rows))).size[1]
    short = Image.open(_io.BytesIO(plot_png([dict(r, extra={**r["extra"], "preset": None}) for r in quiet]))).size[1]
    assert tall > short


def _record(folder, stage, score, config=None, layers=None, **more):
    os.makedirs(folder, exist_ok=True)
    record = {"stage": stage, "dir": os.path.basename(folder), "kind": more.pop("kind", "hf"), "score": score,
              "metrics": {"accuracy": score / 100}, "parameters": 1000, "size_bytes": 4000,
              "wall_time_s": 1, "config": config or {}, "split": "dev", "examples": 872, **more}
    with open(os.path.join(folder, "record.json"), "w") as f:
        json.dump(record, f)
    if layers:
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump({"num_hidden_layers": layers}, f)
    return record


def _tiny_run(tmp_path, bench_int8_score=87.0):
    """A run folder as ``compressor run`` leaves it: teacher, distil to 3 layers, prune, export,
    quantize and a bench of the last three."""
    run = tmp_path / "run"
    stages = [_record(str(run / "00-teacher"), "teacher", 90.0, layers=6),
              _record(str(run / "01-distill"), "distill", 88.0, {"student": {"kind": "layers", "num_layers": 3}}),
              _record(str(run / "02-prune"), "prune", 87.5, {"method": "structured", "heads": 0.5, "ffn": 0.5},
                      layers=3),
              _record(str(run / "03-export"), "export", 87.5, kind="onnx"),
              _record(str(run / "04-quantize"), "quantize", 87.0, {"method": "dynamic", "preset": "auto"},
                      kind="onnx", preset={"name": "avx2"})]
    bench = [_timed("00-teacher", "teacher", 20.0, 90.0, engine="pytorch"),
             _timed("03-export", "ours", 6.0, 87.5), _timed("04-quantize", "ours", 3.0, bench_int8_score),
             _timed("ort-o2-int8", "peer", 5.0, 89.0)]
    os.makedirs(run / "05-bench")
    write_results(str(run / "05-bench" / "results.json"), bench, command="compressor bench (in the run)")
    (run / "manifest.json").write_text(json.dumps({"recipe": "tiny", "task": "sst2", "source": "r.yaml",
                                                   "stages": stages + [{"stage": "bench", "dir": "05-bench"}]}))
    return run


def test_variants_are_named_in_words_from_the_runs_records(tmp_path):
    from compressor.bench.report import collect, variant_words

    run = _tiny_run(tmp_path)
    words = variant_words(collect([str(run)]))
    assert words == {"00-teacher": "6-layer teacher, FP32", "01-distill": "3-layer student, FP32",
                     "02-prune": "3-layer student, 50% heads/FFN pruned, FP32",
                     "03-export": "3-layer student, 50% heads/FFN pruned, ONNX FP32",
                     "04-quantize": "3-layer student, 50% heads/FFN pruned, ONNX INT8 (dynamic)"}
    res = CliRunner().invoke(cli, ["report", str(run)])
    assert res.exit_code == 0, res.output
    md = open(run / "report.md").read()
    # the words first, the stage folder beside them; the peers by their readable names
    assert "| 3-layer student, 50% heads/FFN pruned, ONNX INT8 (dynamic) | 04-quantize | ours |" in md
    assert "| 02-prune | 3-layer student, 50% heads/FFN pruned, FP32 | hf |" in md
    assert "| ORT O2 + dynamic INT8 | ort-o2-int8 | peer |" in md
    # the plot comes before the tables and the commands that made them
    assert md.index("![latency versus score]") < md.index("| variant | name |") < md.index("Measured by:")
    # one stage's words in a committed results file (its rows carry the stage configs)
    rows = collect([os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "results",
                                 "sst2-report-cpu.json")])
    assert {r["extra"].get("variant") for r in rows if r["name"] == "03-quantize"} == \
        {"3-layer student, ONNX INT8 (dynamic)"}


def test_one_score_per_graph_or_two_labelled_measurements(tmp_path):
    from compressor.bench.report import collect, markdown

    same = markdown(collect([str(_tiny_run(tmp_path / "a"))]))
    assert "†" not in same and "| 87.00 |" in same
    md = markdown(collect([str(_tiny_run(tmp_path / "b", bench_int8_score=86.93))]))
    stage_table, speed = md.split("## Speed and score")
    assert "| 87.00† |" in stage_table and "| 86.93† |" in speed
    assert "`04-quantize` scored 87.00 when its stage scored it (872 dev rows" in md
    assert "86.93 when the bench scored it" in md


def test_a_dense_plot_numbers_its_points_and_the_table_says_which(tmp_path):
    from compressor.bench.report import markdown, plot_png

    rows = [_timed(f"v{i}", "ours", 1.0 + i * 0.05, 85.0 + (i % 3) * 0.1) for i in range(20)]
    md = markdown(rows, plot_file="report.png")
    assert "| (1) v0 | v0 |" in md and "| (20) v19 | v19 |" in md
    assert plot_png(rows)[:4] == b"\x89PNG"
