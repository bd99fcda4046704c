"""compressor auto searching on one machine for another (issue 34): the target's latency table is
measured there (--measure-table) and read here (--target-table) without timing anything.

Timings are stand-ins (no model is exported or timed for the table): what is tested is which
entries a space needs, that they are all written, that a search predicts from another machine's
table without measuring, and that a missing entry is one line naming it and the command."""
import json
import os
import shutil
from types import SimpleNamespace

import pytest

from compressor.core.errors import CompressorError

optuna = pytest.importorskip("optuna")

# the measured space: 2 shapes (all heads, half), FP32 and mixed (FP32 and dynamic layers), tokens
# 1 and 0.5, exits none and entropy
MEASURED = {"heads": [0.0, 0.5], "ffn": [0.0], "tokens": [1.0, 0.5], "precisions": ["fp32", "mixed"],
            "exits": ["none", "entropy"], "seq_len": 12}
# the search: a part of that space (FP32 only, no exits: quick trials)
SEARCH = {"heads": [0.0, 0.5], "ffn": [0.0], "tokens": [1.0, 0.5], "vocab": [False], "precisions": ["fp32"],
          "layer_rules": ["top"], "exits": ["none"], "importance_rows": 16, "max_drop": 100,
          "recover_candidates": 0, "seq_len": 12}
DATA = ["--train-limit", "64", "--dev-limit", "16"]


def fake_timing(monkeypatch):
    """Stand-ins for the table's exports and timings: a model is a name, its p50 grows with its
    layers and length; returns the list of lengths timed."""
    from compressor.auto.latency import LatencyTable

    timed = []

    def time(self, models, seq):
        timed.append(seq)
        ms = {}
        for key in models:
            layers = key[-1] if isinstance(key, tuple) and isinstance(key[-1], int) else 2
            extra = 0.3 if key == "exit" or (isinstance(key, tuple) and key[0] == "tokens") else 0.0
            ms[key] = 0.5 + layers * seq / 100 + extra
        return ms

    monkeypatch.setattr(LatencyTable, "_time", time)
    monkeypatch.setattr(LatencyTable, "_block_export", lambda self, work, h, f, n: f"{work}/h{h}-f{f}-l{n}")
    monkeypatch.setattr(LatencyTable, "_token_export", lambda self, work, n: f"{work}/tokens-l{n}")
    monkeypatch.setattr(LatencyTable, "_exit_export", lambda self, work, p: f"{work}/exit-{p}")
    monkeypatch.setattr(LatencyTable, "_as_precision", lambda self, work, fp32, p: f"{fp32}-{p}")
    return timed


def never_timed(monkeypatch):
    from compressor.auto import latency

    def fail(*args, **kwargs):
        pytest.fail("a search with another machine's table timed a model")

    monkeypatch.setattr(latency, "time_folders", fail)
    monkeypatch.setattr(latency.LatencyTable, "_time", fail)


@pytest.fixture(scope="module")
def teacher(tmp_path_factory, minilm_dir, glue_dir):
    """A tiny BERT fine-tuned on 64 SST-2 rows with 16 held out (2 layers of 4 heads, FFN 64), and
    the plain classifier it was made from (a model of its family)."""
    from conftest import save_sst2_classifier

    from compressor.cli import main

    root = tmp_path_factory.mktemp("auto-target")
    plain = save_sst2_classifier(root / "plain", minilm_dir, max_length=16)
    out = str(root / "teacher")
    try:
        main(["finetune", plain, "--task", "sst2", "--out", out, "--data-dir", glue_dir, *DATA, "--holdout", "16",
              "--epochs", "1", "--batch-size", "16", "--max-length", "16", "--device", "cpu"])
    except SystemExit as exc:
        assert exc.code in (0, None)
    return SimpleNamespace(path=out, plain=plain, root=root)


@pytest.mark.unit
def test_the_entries_a_space_needs():
    """Layer shapes as structured pruning (scope layer) leaves them, lengths from seq_len and the token
    keeps, mixed's two layer precisions, token and exit costs, the teacher at FP32."""
    import numpy as np

    from compressor.auto.config import AutoConfig
    from compressor.auto.target import kept, table_needs
    from compressor.prune.structured import _targets, select

    for units, share, minimum in ((12, 0.25, 1), (12, 0.5, 1), (4, 0.9, 1), (3072, 0.25, 32), (64, 0.75, 32)):
        _, per_layer = _targets([units], share, 1, 1, "layer", [units])
        (left,) = select([np.arange(units, dtype=float)], sum(per_layer), "layer", minimum, per_layer)
        assert kept(units, share, minimum) == len(left)
    needs = table_needs(AutoConfig(**{k: v for k, v in MEASURED.items()}), (4, 64), 2, 12)
    # 2 precisions x 2 shapes x lengths 16 and 8 (tokens 0.5: 16 then 8)
    assert needs["layers"] == {(p, s, h, 64) for p in ("fp32", "dynamic") for s in (16, 8) for h in (4, 2)}
    assert needs["tokens"] == {("fp32", 16), ("dynamic", 16)}   # a point after every layer but the last
    assert needs["exits"] == {("fp32", 16), ("dynamic", 16)}    # mixed: the rest FP32 or INT8
    # static INT8 takes no exits; no exit rule, no token pruning: no such entries; the teacher stays
    needs = table_needs(AutoConfig(heads=[0.5], ffn=[0.5], tokens=[1.0], precisions=["static"], exits=["entropy"]),
                        (12, 3072), 12, 30)
    assert needs == {"layers": {("fp32", 32, 12, 3072), ("static", 32, 12, 3072), ("static", 32, 6, 1536)},
                     "tokens": set(), "exits": set()}


def test_measure_table_writes_what_the_space_needs_and_resumes(teacher, glue_dir, tmp_path, monkeypatch):
    from compressor.auto.latency import LatencyTable
    from compressor.auto.target import measure_table
    from compressor.core.data import get_task

    timed = fake_timing(monkeypatch)
    path = tmp_path / "target.json"
    # the plain classifier (not the search's teacher, not fine-tuned): a model of its family serves
    done = measure_table(teacher.plain, str(path), MEASURED, task="sst2", data_dir=glue_dir, log=lambda m: None)
    assert done["entries"] == {"layers": 8, "tokens": 2, "exits": 2} and done["measured"] == 12
    data = json.load(open(path))
    table = LatencyTable(str(path), teacher.path, get_task("sst2"), None)   # the teacher's family
    assert done["family"] == table.family
    assert len(data["layers"]) == 8 and len(data["tokens"]) == 2 and len(data["exits"]) == 2
    assert set(data["overhead"]) == {f"{table.family}|{p}|s{s}" for p in ("fp32", "dynamic") for s in (16, 8)}
    assert all(k.startswith(table.family) for k in data["layers"])
    # kept: asked again, nothing is measured; an entry lost is measured alone
    count = len(timed)
    assert measure_table(teacher.plain, str(path), MEASURED, task="sst2", data_dir=glue_dir,
                         log=lambda m: None)["measured"] == 0 and len(timed) == count
    del data["layers"][f"{table.family}|dynamic|s8|h2|f64"]
    json.dump(data, open(path, "w"))
    assert measure_table(teacher.plain, str(path), MEASURED, task="sst2", data_dir=glue_dir,
                         log=lambda m: None)["measured"] == 1 and timed[count:] == [8]
    assert f"{table.family}|dynamic|s8|h2|f64" in json.load(open(path))["layers"]
    # several searches' lengths at once (tasks of one family): 30 tokens adds 32 (then 16, kept)
    done = measure_table(teacher.plain, str(path), MEASURED, task="sst2", data_dir=glue_dir, log=lambda m: None,
                         seq_lens=[12, 30])
    assert done["seq_lens"] == [12, 30] and done["entries"] == {"layers": 12, "tokens": 4, "exits": 4}
    assert done["measured"] == 8 and sorted(set(timed[count + 1:])) == [32]


@pytest.fixture
def foreign_table(teacher, glue_dir, tmp_path, monkeypatch):
    """The measured space's table as another machine wrote it (its key and processor not ours)."""
    from compressor.auto.target import measure_table

    with monkeypatch.context() as patch:
        fake_timing(patch)
        path = tmp_path / "edge.json"
        measure_table(teacher.plain, str(path), MEASURED, task="sst2", data_dir=glue_dir, log=lambda m: None)
    data = json.load(open(path))
    data["machine_key"] = "edge0000cpu1"
    data["machine"].update(processor="Edge ARM Cortex-A76", machine="aarch64", cores=2, cpu_preset="arm64")
    json.dump(data, open(path, "w"))
    return path


def test_a_search_predicts_from_another_machines_table_without_timing(teacher, foreign_table, glue_dir, tmp_path,
                                                                      monkeypatch):
    from compressor.auto.latency import LatencyTable
    from compressor.auto.study import run_auto
    from compressor.core.data import get_task

    # this machine's own table refuses the file (another machine's); read only, it serves
    with pytest.raises(CompressorError, match="another machine"):
        LatencyTable(str(foreign_table), teacher.path, get_task("sst2"), None)
    never_timed(monkeypatch)
    before = foreign_table.read_text()
    out = tmp_path / "search"
    report = run_auto(teacher.path, str(out), {**SEARCH, "trials": 2, "seed": 3, "target_table": str(foreign_table)},
                      data_dir=glue_dir, train_limit=64, dev_limit=16, log=lambda m: None)
    done = [r for r in report["trials"] if r["state"] == "COMPLETE"]
    assert done and all(r["latency_ms"] > 0 for r in done) and report["pick"]
    machine = report["latency_machine"]
    assert machine["measured_here"] is False and machine["processor"] == "Edge ARM Cortex-A76"
    assert report["checks"] == [] and report.get("table_error") is None   # whole models are the target's to time
    text = (out / "report.md").read_text()
    assert "predictions for another machine" in text and "Edge ARM Cortex-A76" in text and "1 thread(s)" in text
    assert foreign_table.read_text() == before   # read only: nothing added, not even a check
    assert report["search_seconds"] >= 0 and all("seconds" in r for r in done)


def test_a_missing_entry_is_one_line_naming_it_and_the_command(teacher, foreign_table, glue_dir, tmp_path,
                                                               monkeypatch, capsys):
    from compressor.auto.latency import LatencyTable, MissingEntry
    from compressor.auto.study import run_auto
    from compressor.cli import main
    from compressor.core.data import get_task

    never_timed(monkeypatch)
    data = json.load(open(foreign_table))
    family = LatencyTable(str(foreign_table), teacher.path, get_task("sst2"), None, read_only=True).family
    del data["layers"][f"{family}|fp32|s8|h2|f64"]
    broken = tmp_path / "broken.json"
    json.dump(data, open(broken, "w"))
    with pytest.raises(MissingEntry) as err:
        run_auto(teacher.path, str(tmp_path / "api"), {**SEARCH, "trials": 1, "target_table": str(broken)},
                 data_dir=glue_dir, train_limit=64, dev_limit=16, log=lambda m: None)
    message = str(err.value)
    assert "\n" not in message and "the layer of 2 heads and FFN 64 at 8 tokens, fp32" in message
    assert "--measure-table --seq-len 12" in message and "--tokens 1,0.5" in message and "broken.json" in message
    # a prediction the check did not foresee says the same
    table = LatencyTable(str(broken), teacher.path, get_task("sst2"), None, read_only=True, hint="measure it there")
    with pytest.raises(MissingEntry, match="lacks the layer of 2 heads and FFN 64 at 8 tokens, fp32; measure it there"):
        table.predict([(2, 64), (2, 64)], "fp32", [16, 8])
    # the command: exit 1, one line, no traceback
    args = ["auto", teacher.path, "--out", str(tmp_path / "cli"), "--data-dir", glue_dir, *DATA,
            "--target-table", str(broken), "--seq-len", "12", "--heads", "0,0.5", "--ffn", "0", "--tokens", "1,0.5",
            "--vocab", "false", "--precisions", "fp32", "--exits", "none", "--layer-rules", "top", "--trials", "1"]
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    lines = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 1 and len(lines) == 1 and lines[0].startswith("error:") and "lacks" in lines[0]
    # another thread count than the table's, or no table at all: one line too
    for more, words in ((["--threads", "2"], "measured for --target cpu at 1 thread(s)"),
                        (["--target-table", str(tmp_path / "none.json")], "does not exist")):
        with pytest.raises(SystemExit) as exit_info:
            main(args + more)
        lines = capsys.readouterr().err.strip().splitlines()
        assert exit_info.value.code == 1 and len(lines) == 1 and words in lines[0], lines


@pytest.mark.unit
def test_measure_table_and_search_options_are_refused_in_one_line(capsys, tmp_path):
    from compressor.cli import main

    for args, words in ((["auto", str(tmp_path)], "needs --out"),
                        (["auto", str(tmp_path), "--out", str(tmp_path / "o"), "--target-table", "a.json",
                          "--latency-table", "b.json"], "not both"),
                        (["auto", str(tmp_path), "--out", str(tmp_path / "o"), "--seq-len", "13,54"], "--measure-table only"),
                        (["auto", str(tmp_path), "--measure-table", "--seq-len", "13,x"], "token counts")):
        with pytest.raises(SystemExit) as exit_info:
            main(args)
        lines = capsys.readouterr().err.strip().splitlines()
        assert exit_info.value.code == 1 and len(lines) == 1 and words in lines[0], lines


@pytest.mark.unit
def test_local_workers_take_the_visible_gpus_in_turn(monkeypatch):
    from compressor.auto.study import worker_env, worker_gpus

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    gpus = worker_gpus("cuda", 3)
    assert gpus == ["2", "3"]
    assert [worker_env(gpus, i) for i in range(3)] == [{}, {"CUDA_VISIBLE_DEVICES": "3"},
                                                       {"CUDA_VISIBLE_DEVICES": "2"}]
    assert worker_gpus("cpu", 2) == [] and worker_gpus("cuda:1", 2) == [] and worker_gpus("cuda", 1) == []
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert worker_gpus("cuda", 2) == []   # one GPU: shared
