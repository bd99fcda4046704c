"""compressor auto (issue 34): the latency table, the search on a tiny held-out teacher, its pick
and report, a resume after a kill, two workers on one storage, and bad input as one line.

One module fixture fine-tunes the teacher (2 layers, hidden 32, 16 tokens, 16 held-out rows) and
runs one search through the command; the other tests copy the latency table that search filled
(none writes into the shared one, and only the table's own test measures one more shape)."""
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from types import SimpleNamespace

import pytest

from compressor.core.errors import CompressorError

optuna = pytest.importorskip("optuna")

# layers 1-2, all heads or half of them, FP32, no exits (4 points; mixed INT8 and exits are built in
# test_mixed_int8_and_early_exit_candidates); no recovery but in the fixture's search
SPACE = {"heads": [0.0, 0.5], "ffn": [0.0], "tokens": [1.0], "vocab": [False], "precisions": ["fp32"],
         "layer_rules": ["top"], "exits": ["none"], "importance_rows": 16, "max_drop": 100,
         "recover_candidates": 0}
DATA = ["--train-limit", "64", "--dev-limit", "16"]


def space_args(space=SPACE):
    args = []
    for key, value in space.items():
        text = ",".join(str(v).lower() for v in value) if isinstance(value, list) else str(value)
        args += [f"--{key.replace('_', '-')}", text]
    return args


def auto_args(teacher, out, table, glue_dir, *more):
    return ["auto", teacher, "--out", str(out), "--data-dir", glue_dir, "--latency-table", str(table),
            *DATA, *space_args(), *more]


def study_of(out):
    from compressor.auto.study import STATE, open_study

    return open_study(json.load(open(os.path.join(out, STATE))))[0]


def trials_of(out, study=None):
    study = study or study_of(out)
    return [t for t in study.get_trials(deepcopy=False) if not t.user_attrs.get("surplus")]


def watch(out, storage, until, alive):
    """Poll the study in ``out`` (once ``storage`` exists) until ``until(trials)`` is true; False
    when ``alive()`` turns false or 3 minutes pass first. The study is opened once."""
    deadline, study = time.monotonic() + 180, None
    while alive() and time.monotonic() < deadline:
        time.sleep(0.2)
        if study is None and os.path.exists(os.path.join(out, "auto.json")) and storage.exists():
            study = study_of(out)
        if study is not None and until(trials_of(out, study)):
            return True
    return False


@contextmanager
def table_held(path):
    """Hold the latency table's file lock, as a process measuring it holds it: a trial that needs
    an entry the table lacks waits, under way, until the lock is free."""
    with open(f"{path}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def cli(argv):
    """``compressor ARGV`` in this process (a command that succeeds returns, as main does)."""
    from compressor.cli import main

    try:
        main(argv)
    except SystemExit as exc:
        assert exc.code in (0, None), f"compressor {argv[0]} exited {exc.code}"


@pytest.fixture(scope="module")
def searched(tmp_path_factory, minilm_dir, glue_dir):
    """A tiny BERT fine-tuned on SST-2 rows with 16 held out, and one 3-trial search of it run by
    the command, which fills the latency table at the search's length."""
    from conftest import save_sst2_classifier

    root = tmp_path_factory.mktemp("auto")
    plain = save_sst2_classifier(root / "plain", minilm_dir, max_length=16)
    teacher = str(root / "teacher")
    cli(["finetune", plain, "--task", "sst2", "--out", teacher, "--data-dir", glue_dir, *DATA,
         "--holdout", "16", "--epochs", "1", "--batch-size", "16", "--max-length", "16", "--device", "cpu"])
    table, out = root / "table.json", root / "search"
    # seed 12 draws three different points, one with half the heads (optuna 5.0's NSGA-II)
    cli(auto_args(teacher, out, table, glue_dir, "--trials", "3", "--seed", "12", "--check-models", "1",
                  "--recover-candidates", "1", "--recover", "epochs=1", "--recover", "batch_size=16"))
    return SimpleNamespace(plain=plain, teacher=teacher, table=str(table), out=out,
                           seq=json.load(open(out / "auto.json"))["seq_len"])


@pytest.fixture
def table_copy(searched, tmp_path):
    """The search's latency table, made complete for the space (both head shapes), copied here."""
    from compressor.auto.latency import LatencyTable, seq_bucket
    from compressor.core.data import get_task

    LatencyTable(searched.table, searched.teacher, get_task("sst2"), None).ensure(
        {("fp32", seq_bucket(searched.seq), 4, 64), ("fp32", seq_bucket(searched.seq), 2, 64)})
    path = tmp_path / "table.json"
    shutil.copy(searched.table, path)
    return path


@pytest.mark.unit
def test_settings_refuse_bad_values_in_one_line():
    from compressor.auto.config import AutoConfig, budget_seconds
    from compressor.core.settings import config_from_dict

    assert budget_seconds("4h") == 14400 and budget_seconds("90s") == 90 and budget_seconds("") is None
    for bad, words in (({"budget": "4 hours"}, "30m or 4h"), ({"heads": [1.5]}, "shares in [0, 1)"),
                       ({"precisions": ["int4"]}, "unknown precisions 'int4'"),
                       ({"storage": "study.db"}, "journal:PATH"), ({"target": "tpu"}, "tpu"),
                       ({"exits": ["sometimes"]}, "unknown exits 'sometimes'"), ({"mixed_fp32": [0]}, "unit counts"),
                       ({"recover": {"mode": "sometimes"}}, "sometimes")):
        with pytest.raises(CompressorError) as err:
            config_from_dict(AutoConfig, bad, what="auto").check()
        assert words in str(err.value) and "\n" not in str(err.value)


@pytest.mark.unit
def test_target_gpu_is_refused_in_one_line_without_a_gpu(monkeypatch, capsys, tmp_path):
    import onnxruntime

    from compressor.auto.config import AutoConfig
    from compressor.cli import main
    from compressor.core.settings import config_from_dict

    monkeypatch.setattr(onnxruntime, "get_available_providers", lambda: ["CPUExecutionProvider"])
    with pytest.raises(CompressorError) as err:
        config_from_dict(AutoConfig, {"target": "gpu", "precisions": ["fp32"]}, what="auto").check()
    assert "--target gpu needs a GPU" in str(err.value) and "\n" not in str(err.value)
    # the command: one line, exit 1, nothing written
    with pytest.raises(SystemExit) as exit_info:
        main(["auto", str(tmp_path / "teacher"), "--out", str(tmp_path / "o"), "--target", "gpu"])
    err_lines = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 1 and len(err_lines) == 1 and "CUDAExecutionProvider" in err_lines[0]
    assert not (tmp_path / "o").exists()
    # with a GPU, INT8 precisions are refused (onnxruntime's INT8 kernels are the CPU's)
    monkeypatch.setattr(onnxruntime, "get_available_providers", lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    config_from_dict(AutoConfig, {"target": "gpu", "precisions": ["fp32"]}, what="auto").check()
    with pytest.raises(CompressorError, match="drop dynamic, mixed from --precisions"):
        config_from_dict(AutoConfig, {"target": "gpu", "precisions": ["fp32", "dynamic", "mixed"]}, what="auto").check()


@pytest.mark.unit
def test_target_gpu_times_graphs_with_the_cuda_provider(monkeypatch, tmp_path):
    """The table's timings for --target gpu go to the harness as CUDA variants, whose ONNX sessions
    get onnxruntime's CUDA provider (no GPU here: the calls are captured, not run)."""
    from compressor.auto import latency
    from compressor.bench import harness
    from compressor.export import runtime

    asked = {}
    monkeypatch.setattr(harness, "isolated_latency", lambda specs, texts, threads, config: asked.update(
        specs=specs, texts=texts) or {spec.name: [0.001, 0.002, 0.003] for spec in specs})
    times = latency.time_folders({"a": str(tmp_path)}, 16, 1, 3, target="gpu")
    assert times["a"] == pytest.approx(2.0) and [s.device for s in asked["specs"]] == ["cuda"]
    assert latency.time_folders({"a": str(tmp_path)}, 16, 1, 3) and asked["specs"][0].device == "cpu"
    opened = {}
    monkeypatch.setattr(runtime, "open_graph", lambda folder, **kw: opened.update(kw) or SimpleNamespace(
        encode=None, run=None))
    harness._build_ort(harness.Spec(name="a", path=str(tmp_path), engine="onnxruntime", device="cuda"), 1)
    assert opened["providers"][0] == "CUDAExecutionProvider"
    harness._build_ort(harness.Spec(name="a", path=str(tmp_path), engine="onnxruntime"), 1)
    assert opened["providers"] is None
    assert latency.machine_key("gpu")[0] != latency.machine_key("cpu")[0]


@pytest.mark.unit
def test_recovery_goes_to_candidates_that_may_enter_the_front():
    from compressor.auto.candidate import recipe_stages
    from compressor.auto.config import AutoConfig
    from compressor.auto.recovery import to_recover

    pruned = recipe_stages({"layers": 1, "layer_rule": "top", "heads": 0.0, "ffn": 0.0, "vocab": False,
                            "tokens": 1.0, "precision": "fp32"}, 2, 16)
    whole = recipe_stages({"layers": 2, "layer_rule": "top", "heads": 0.0, "ffn": 0.0, "vocab": False,
                           "tokens": 1.0, "precision": "dynamic"}, 2, 16)

    def trial(number, score, ms, size=100, stages=pruned, **attrs):
        return SimpleNamespace(number=number, values=(score, ms, size), user_attrs={"stages": stages, **attrs})

    done = [trial(0, 90.0, 1.0, stages=whole),   # on the front, but nothing to recover
            trial(1, 85.0, 0.5),                 # on the front
            trial(2, 84.5, 0.6),                 # dominated by 1, within the margin of it
            trial(3, 80.0, 0.7),                 # dominated by 1 by more than the margin
            trial(4, 70.0, 0.3),                 # on the front, but outside max_drop even when recovered
            trial(5, 85.0, 0.5, same_as=1)]      # the same model as 1
    config = AutoConfig(max_drop=10, recover_candidates=5, recover_margin=1.0)
    assert [t.number for t in to_recover(done, config, teacher_score=90.0)] == [1, 2]
    config.recover_candidates = 1          # the fastest first
    assert [t.number for t in to_recover(done, config, teacher_score=90.0)] == [1]
    config.recover_candidates = 0
    assert to_recover(done, config, teacher_score=90.0) == []
    # recovery distils the last pruning step from the recipe's teacher, the others stay unrecovered
    stages = recipe_stages({"layers": 1, "layer_rule": "top", "heads": 0.5, "ffn": 0.0, "vocab": False,
                            "tokens": 1.0, "precision": "fp32"}, 2, 16, recover={"mode": "distill"})
    assert stages[0]["prune"]["recover"] == {"mode": "none"}
    assert stages[1]["prune"]["recover"] == {"mode": "distill"} and stages[1]["prune"]["teacher"] == "recipe"


@pytest.mark.unit
def test_exits_weight_each_layer_by_the_rows_that_reach_it():
    from compressor.auto.candidate import NotCombinable, _reach, check_combination

    assert _reach({"1": 6, "2": 2, "3": 2}, 3) == [1.0, 0.4, 0.2]
    assert _reach({"1": 0, "2": 0, "3": 5}, 3) == [1.0, 1.0, 1.0]
    point = {"layers": 2, "tokens": 1.0, "precision": "dynamic", "exit": "entropy"}
    check_combination(point)
    for bad in ({"tokens": 0.8}, {"precision": "static"}, {"layers": 1}):
        with pytest.raises(NotCombinable):
            check_combination({**point, **bad})


@pytest.mark.unit
def test_token_pruned_layers_are_looked_up_at_fewer_tokens():
    from compressor.auto.latency import layer_seqs, seq_bucket

    assert seq_bucket(3) == 8 and seq_bucket(21) == 24
    assert layer_seqs(64, 3, 1.0) == [64, 64, 64]
    assert layer_seqs(64, 3, 0.5) == [64, 32, 16]
    # from the length the table times and the check measures (13 tokens: 16), rounded up at each
    # layer as token pruning keeps ceil(n x keep): 16, 13, 11, 9 tokens
    assert layer_seqs(13, 4, 0.8) == [16, 16, 8, 8]
    assert layer_seqs(10, 2, 0.8) == [8, 8]


@pytest.mark.unit
def test_token_pruning_adds_its_measured_cost_per_precision_and_length(tmp_path, monkeypatch):
    """A token-pruned graph is the overhead and its layers plus token pruning's own cost: one
    pruning point after each layer but the last, at the tokens that layer sees, and the graph's
    cost once, kept per precision and length under the table's ``tokens`` key. A table written
    before that key existed loads, and what it lacks is measured (here a stand-in measurement)."""
    from conftest import tiny_config

    from compressor.auto.latency import LatencyTable
    from compressor.core.data import get_task
    from compressor.core.io import write_json
    from compressor.core.models import checkpoint_meta

    teacher = str(tmp_path / "teacher")   # what the table reads of a teacher: its config and max length
    config = tiny_config("bert")
    config.num_labels = 2
    config.save_pretrained(teacher)
    write_json(os.path.join(teacher, "compressor.json"), checkpoint_meta(get_task("sst2"), 16, "test"))
    table = LatencyTable(str(tmp_path / "table.json"), teacher, get_task("sst2"), None)
    for seq, ms in ((16, 2.0), (8, 1.0)):
        table.data["overhead"][table._overhead_key("fp32", seq)] = 10.0
        table.data["layers"][table._layer_key("fp32", seq, 4, 64)] = ms
    old = dict(table.data)
    del old["tokens"]   # a table from before token pruning's cost was kept
    json.dump(old, open(tmp_path / "table.json", "w"))

    measured = []

    def measure(self, precision, seqs):   # stands in for the timed graphs: 0.1 ms a point per 8 tokens
        measured.append((precision, list(seqs)))
        for seq in seqs:
            self.data["tokens"][self._overhead_key(precision, seq)] = {"point": seq / 80, "graph": 0.5}

    monkeypatch.setattr(LatencyTable, "_measure_tokens", measure)
    table = LatencyTable(str(tmp_path / "table.json"), teacher, get_task("sst2"), None)
    plain = table.predict([(4, 64)] * 3, "fp32", [16, 8, 8])
    assert plain == pytest.approx(10.0 + 2.0 + 1.0 + 1.0) and measured == []
    pruned = table.predict([(4, 64)] * 3, "fp32", [16, 8, 8], prunes_tokens=True)
    # points after layers 1 and 2 (at 16 and 8 tokens), the graph's cost at the input's 16
    assert pruned == pytest.approx(plain + 0.2 + 0.1 + 0.5)
    assert measured == [("fp32", [8, 16])]
    kept = json.load(open(tmp_path / "table.json"))["tokens"]
    assert kept == {table._overhead_key("fp32", 16): {"point": 0.2, "graph": 0.5},
                    table._overhead_key("fp32", 8): {"point": 0.1, "graph": 0.5}}
    # kept: asked again (in another process too) nothing is measured
    again = LatencyTable(str(tmp_path / "table.json"), teacher, get_task("sst2"), None)
    assert again.predict([(4, 64)] * 3, "fp32", [16, 8, 8], prunes_tokens=True) == pruned and len(measured) == 1
    # one layer drops no token: nothing added
    assert again.predict([(4, 64)], "fp32", [16], prunes_tokens=True) == pytest.approx(12.0)
    # another precision or length is an entry of its own, measured when first asked
    assert again.token_cost("dynamic", 16) == {"point": 0.2, "graph": 0.5}
    assert again.token_cost("fp32", 24)["point"] == pytest.approx(0.3)
    assert measured[1:] == [("dynamic", [16]), ("fp32", [24])]


def _tiny_table(tmp_path, layers: int):
    """An empty latency table for a tiny BERT teacher of ``layers`` layers (config only: nothing
    is timed unless a test asks), and the teacher's folder."""
    from conftest import tiny_config

    from compressor.auto.latency import LatencyTable
    from compressor.core.data import get_task
    from compressor.core.io import write_json
    from compressor.core.models import checkpoint_meta

    teacher = str(tmp_path / "teacher")
    config = tiny_config("bert")
    config.num_labels, config.num_hidden_layers = 2, layers
    config.save_pretrained(teacher)
    write_json(os.path.join(teacher, "compressor.json"), checkpoint_meta(get_task("sst2"), 16, "test"))
    return LatencyTable(str(tmp_path / "table.json"), teacher, get_task("sst2"), None), teacher


@pytest.mark.unit
def test_the_teachers_shape_is_predicted_as_timed_when_one_layer_times_under_the_slope(tmp_path):
    """One layer of the teacher's shape can time under the slope between one layer and the
    teacher's depth (its weights stay in the cache): the overhead is then 0, and the table must
    still give both models their own timings (taking the slope for both priced MiniLM-L6's six
    layers at 5.99 ms where they timed 5.64)."""
    table, _ = _tiny_table(tmp_path, 6)
    full = table.full
    times = {("fp32",) + full + (1,): 0.651, ("fp32",) + full + (6,): 5.641}
    table._keep_layers(16, ["fp32"], True, [full], times)
    assert table.data["overhead"][table._overhead_key("fp32", 16)] == 0.0
    assert table.predict([full] * 6, "fp32", [16] * 6) == pytest.approx(5.641, abs=1e-3)
    assert table.predict([full], "fp32", [16]) == pytest.approx(0.651, abs=1e-3)
    # where one layer times above the slope, the overhead is what it leaves, and both still hold
    times = {("fp32",) + full + (1,): 1.5, ("fp32",) + full + (6,): 6.5}
    table._keep_layers(16, ["fp32"], True, [full], times)
    assert table.data["overhead"][table._overhead_key("fp32", 16)] == pytest.approx(0.5)
    assert table.predict([full] * 6, "fp32", [16] * 6) == pytest.approx(6.5, abs=1e-3)
    assert table.predict([full], "fp32", [16]) == pytest.approx(1.5, abs=1e-3)


@pytest.mark.unit
def test_a_layer_costs_what_it_costs_at_the_candidates_depth(tmp_path, monkeypatch):
    """Each shape's cost per layer is kept at one layer (``shallow``: its weights stay in the cache)
    and at the teacher's depth (``layers``); a candidate of d layers takes it linearly between the two
    by d, so a uniform model of either depth is predicted as it was timed. Tables of the kinds
    before (family v2: the teacher's depth alone) are measured again."""
    from compressor.auto.latency import LatencyTable
    from compressor.core.data import get_task

    table, teacher = _tiny_table(tmp_path, 5)
    assert table.family.startswith("v5|") and table.span == 5
    key = table._layer_key("fp32", 16, 2, 64)
    table.data["overhead"][table._overhead_key("fp32", 16)] = 1.0
    table.data["layers"][key], table.data["shallow"][key] = 2.0, 1.0
    table.data["layers"][table._layer_key("fp32", 16, 4, 64)] = 3.0   # the teacher's shape: every prediction asks it
    assert [table.layer_cost("fp32", 16, 2, 64, d) for d in (1, 2, 3, 5, 9)] == pytest.approx([1, 1.25, 1.5, 2, 2])
    assert table.predict([(2, 64)] * 3, "fp32", [16] * 3) == pytest.approx(1.0 + 3 * 1.5)
    assert table.predict([(2, 64)], "fp32", [16]) == pytest.approx(2.0)   # a one-layer model as timed
    del table.data["shallow"][key]   # no shallow entry: the cost at the teacher's depth
    assert table.layer_cost("fp32", 16, 2, 64, 1) == 2.0
    # an older table's entries (v4: the teacher's shape by the slope) are another family's: measured again
    old = {k.replace("v5|", "v4|", 1): v for k, v in table.data["layers"].items()}
    json.dump({**table.data, "layers": old, "shallow": {}, "overhead": {k.replace("v5|", "v4|", 1): v for k, v in
                                                                          table.data["overhead"].items()}},
              open(tmp_path / "table.json", "w"))
    asked = []
    monkeypatch.setattr(LatencyTable, "_measure", lambda self, needs: asked.extend(needs) or self.data["layers"].update(
        {self._layer_key(*n): 2.0 for n in needs}) or self.data["overhead"].update(
        {self._overhead_key(n[0], n[1]): 1.0 for n in needs}))
    again = LatencyTable(str(tmp_path / "table.json"), teacher, get_task("sst2"), None)
    again.predict([(2, 64)], "fp32", [16])
    assert ("fp32", 16, 2, 64) in asked


def test_the_latency_table_measures_once_caches_and_predicts(searched, table_copy, glue_dir, monkeypatch):
    from compressor.auto.latency import LatencyTable, seq_bucket
    from compressor.core.data import get_task, load_data

    task, seq = get_task("sst2"), seq_bucket(searched.seq)
    rows = load_data(task, "train", glue_dir, 8)
    data = json.load(open(table_copy))
    assert data["machine"]["cores"] == os.cpu_count()
    table = LatencyTable(str(table_copy), searched.teacher, task, rows)
    assert data["machine_key"] == table.key
    # the teacher's shape was timed at one layer and at the teacher's depth: their slope is a layer,
    # the rest overhead
    fam = f"{table.family}|fp32|s{seq}"
    assert table.span >= 2
    one, top = data["measured"][f"{fam}|h4|f64|layers1"], data["measured"][f"{fam}|h4|f64|layers{table.span}"]
    layer, overhead = data["layers"][f"{fam}|h4|f64"], data["overhead"][fam]
    assert layer == pytest.approx(max((top - one) / (table.span - 1), 1e-4), abs=1e-3)
    assert overhead == pytest.approx(max(one - layer, 0.0), abs=1e-3)
    half = data["layers"][f"{fam}|h2|f64"]
    # another shape is timed at the teacher's depth and at one layer too: its share of each model,
    # the overhead out; the teacher's shape costs the slope at both
    half_model = data["measured"][f"{fam}|h2|f64|layers{table.span}"]
    assert half == pytest.approx(max((half_model - overhead) / table.span, 1e-4), abs=1e-3)
    assert data["shallow"][f"{fam}|h2|f64"] == pytest.approx(
        max(data["measured"][f"{fam}|h2|f64|layers1"] - overhead, 1e-4), abs=1e-3)
    assert data["shallow"][f"{fam}|h4|f64"] == layer

    # what the table holds is predicted without measuring: the overhead plus each layer
    measure = LatencyTable._measure
    monkeypatch.setattr(LatencyTable, "_measure", lambda *a: pytest.fail("measured again"))
    full = table.predict([(4, 64), (4, 64)], "fp32", [seq, seq])
    assert full == pytest.approx(overhead + 2 * layer, abs=1e-3)
    assert table.predict([(2, 64), (4, 64)], "fp32", [seq, seq]) == pytest.approx(overhead + half + layer, abs=1e-3)
    assert 0 < table.predict([(4, 64)], "fp32", [seq]) < full

    # a shape it lacks is measured once (at one layer and the teacher's depth), kept in the file, and not
    # measured again
    monkeypatch.setattr(LatencyTable, "_measure", measure)
    narrow = table.predict([(4, 32)], "fp32", [seq])
    assert narrow > 0
    kept = json.load(open(table_copy))
    assert f"{fam}|h4|f32" in kept["layers"] and f"{fam}|h4|f32|layers{table.span}" in kept["measured"]
    assert f"{fam}|h4|f32|layers1" in kept["measured"] and f"{fam}|h4|f32" in kept["shallow"]
    assert f"{fam}|h4|f64|layers1" in kept["measured"] and len(kept["measured"]) == len(data["measured"]) + 2
    monkeypatch.setattr(LatencyTable, "_measure", lambda *a: pytest.fail("measured again"))
    again = LatencyTable(str(table_copy), searched.teacher, task, rows)
    assert again.predict([(4, 32)], "fp32", [seq]) == narrow and again.predict([(4, 64)] * 2, "fp32", [seq] * 2) == full

    # the whole model beside its prediction; the check is kept in the table
    check = again.check("teacher", str(searched.out / "teacher-onnx"), full, searched.seq)
    measured = check["measured_ms"]
    assert measured > 0 and check["error"] == round(abs(full - measured) / measured, 4)
    assert json.load(open(table_copy))["checks"][-1]["model"] == "teacher"

    # token pruning's cost, measured into a table that has none (an old one) from random graphs of the
    # teacher's shape, plain and with every pruning point, at two layers and three
    data = json.load(open(table_copy))
    del data["tokens"]
    json.dump(data, open(table_copy, "w"))
    old = LatencyTable(str(table_copy), searched.teacher, task, rows)
    cost = old.token_cost("fp32", seq)
    assert cost["point"] >= 0 and cost["graph"] >= 0
    kept = json.load(open(table_copy))
    assert kept["tokens"][fam] == cost
    times = {(kind, n): kept["measured"][f"{fam}|{kind}|layers{n}"] for kind in ("plain", "tokens") for n in (2, 3)}
    extra = {n: times[("tokens", n)] - times[("plain", n)] for n in (2, 3)}
    assert cost["point"] == pytest.approx(max(extra[3] - extra[2], 0.0), abs=1e-3)
    assert cost["graph"] == pytest.approx(max(extra[2] - cost["point"], 0.0), abs=1e-3)
    assert old.predict([(4, 64)] * 2, "fp32", [seq, seq], prunes_tokens=True) == pytest.approx(
        full + cost["point"] + cost["graph"], abs=1e-3)

    # a table of another machine is refused
    data = json.load(open(table_copy))
    data["machine_key"] = "another"
    other = table_copy.parent / "other.json"
    json.dump(data, open(other, "w"))
    with pytest.raises(CompressorError, match="another machine"):
        LatencyTable(str(other), searched.teacher, task, rows)


def test_auto_writes_the_front_the_report_and_a_deployable_pick(searched):
    from compressor.export.runtime import open_graph
    from compressor.recipe import validate_recipe

    out = searched.out
    report = json.load(open(out / "report.json"))
    done = [r for r in report["trials"] if r["state"] == "COMPLETE"]
    assert len(report["trials"]) == 3 and done
    assert all(r["latency_ms"] > 0 and r["size_bytes"] > 0 and 0 <= r["score"] <= 100 for r in done)
    assert report["front"] and set(report["front"]) <= {r["number"] for r in done}
    # no trial dominates a front member (higher score, lower latency, smaller, one strictly)
    figures = {r["number"]: (-r["score"], r["latency_ms"], r["size_bytes"]) for r in done}
    for n in report["front"]:
        assert not any(all(a <= b for a, b in zip(f, figures[n])) and f != figures[n] for f in figures.values())
    pick = report["pick"]
    fastest = min(r["latency_ms"] for r in done)     # max-drop 100: every candidate is inside
    assert pick["latency_ms"] == fastest and pick["dev_examples"] == 16
    assert pick["held_drop"] == round(report["teacher_figures"]["score"] - pick["score"], 4)
    assert report["checks"] and all(c["measured_ms"] > 0 for c in report["checks"])
    assert [c["model"] for c in report["checks"]] == [f"trial {pick['trial']}", "teacher"]   # --check-models 1
    assert (out / "front.png").stat().st_size > 1000 and "## Pick" in (out / "report.md").read_text()
    predictor = open_graph(str(out / "pick"))
    assert predictor.logits(["a fine film", "a dull film"]).shape == (2, 2)
    assert "compressor run" in report["command"] and validate_recipe(str(out / "pick-recipe.yaml")) == []
    # the fastest candidate with a pruning step that may enter the front was recovered and rescored
    (number,) = report["recovery"]["recovered"]
    row = next(r for r in report["trials"] if r["number"] == number)
    got = row["recovered"]
    assert got["proxy_score"] == row["score"] and got["gain"] == round(got["score"] - row["score"], 4)
    assert 0 <= got["score"] <= 100 and os.path.exists(out / got["folder"] / "model.onnx")
    assert any(s["prune"]["recover"]["mode"] == "distill" for s in got["stages"] if "prune" in s)
    assert "## Recovery" in (out / "report.md").read_text()
    final = {r["number"]: (r.get("recovered") or r) for r in done}
    inside = [n for n in final if report["teacher_figures"]["score"] - final[n]["score"] <= 100]
    assert pick["trial"] in inside and pick["recovered"] == (pick["trial"] == number)


def test_mixed_int8_and_early_exit_candidates(searched, glue_dir, tmp_path):
    """A mixed candidate keeps its most sensitive unit FP32 and is costed layer by layer at each
    layer's precision; an early-exit candidate (mixed too) is costed by the rows that reach each
    layer and each exit. The table is filled with figures set here (measuring is the table test's)."""
    from compressor.auto.candidate import build_candidate
    from compressor.auto.config import AutoConfig
    from compressor.auto.latency import LatencyTable, layer_seqs, seq_bucket
    from compressor.auto.study import predict_latency
    from compressor.core.data import data_for, get_task, holdout
    from compressor.export.runtime import is_segments

    task = get_task("sst2")
    train_set, held = holdout.training_and_held(task, glue_dir, 64, data_for(searched.teacher, task, None),
                                                searched.teacher)
    config = AutoConfig(importance_rows=16, max_length=16, exit_epochs=1, device="cpu")
    table = LatencyTable(str(tmp_path / "table.json"), searched.teacher, task, held)
    seq = seq_bucket(searched.seq)
    cost = {"fp32": 3.0, "dynamic": 1.0}
    for precision, ms in cost.items():
        table.data["overhead"][table._overhead_key(precision, seq)] = 10 * ms
        table.data["layers"][table._layer_key(precision, seq, 4, 64)] = ms
        table.data["exits"][table._overhead_key(precision, seq)] = ms / 2   # one exit asked
    point = {"layers": 2, "layer_rule": "top", "heads": 0.0, "ffn": 0.0, "vocab": False, "tokens": 1.0,
             "precision": "mixed", "mixed_fp32": 1, "exit": "none", "exit_target": 0.9}

    mixed = build_candidate(searched.teacher, task, train_set, held, point, str(tmp_path / "mixed"), 2, config)
    (unit,) = mixed["fp32_units"]
    quantize = mixed["stages"][-1]["quantize"]
    assert quantize["method"] == "dynamic" and quantize["exclude"]   # the unit's nodes, named for the recipe
    assert json.load(open(os.path.join(mixed["folder"], "quantize.json")))["config"]["exclude"] == quantize["exclude"]
    fp32_layers = [i for i in range(2) if unit == f"layer.{i}"]
    assert mixed["precisions"] == ["fp32" if i in fp32_layers else "dynamic" for i in range(2)]
    rest = "dynamic" if fp32_layers else "fp32"   # embeddings or classifier FP32: the rest at FP32
    assert mixed["overhead_precision"] == rest
    _, ms = predict_latency(table, mixed, point, searched.seq)
    assert ms == pytest.approx(10 * cost[rest] + sum(cost[p] for p in mixed["precisions"]))

    exits = {**point, "exit": "entropy"}
    early = build_candidate(searched.teacher, task, train_set, held, exits, str(tmp_path / "exit"), 2, config)
    assert is_segments(early["folder"]) and 0 <= early["score"] <= 100
    histogram = early["exits"]["histogram"]
    assert sum(histogram.values()) == len(held) and len(early["fp32_units"]) == 1
    assert early["stages"][-1]["early_exit_export"]["fp32_units"] == early["fp32_units"]
    assert early["reach"][0] == 1.0 and early["reach"][1] == pytest.approx(
        sum(c for layer, c in histogram.items() if int(layer) >= 2) / len(held), abs=1e-4)
    _, ms = predict_latency(table, early, exits, searched.seq)
    rest = early["overhead_precision"]
    expected = 10 * cost[rest] + sum(share * cost[p] for share, p in zip(early["reach"], early["precisions"]))
    expected += early["reach"][0] * cost["fp32" if rest == "fp32" else "dynamic"] / 2   # the exit after layer 1
    assert ms == pytest.approx(expected, abs=1e-3)
    assert not mixed["prunes_tokens"] and not early["prunes_tokens"]

    # a token-pruned candidate tells the table so: its layers plus one pruning point and the graph's cost
    tokens = {**point, "tokens": 0.5, "precision": "fp32"}
    pruned = build_candidate(searched.teacher, task, train_set, held, tokens, str(tmp_path / "tokens"), 2, config)
    assert pruned["prunes_tokens"]
    seqs = layer_seqs(searched.seq, 2, 0.5)
    for s in seqs:
        table.data["layers"][table._layer_key("fp32", s, 4, 64)] = cost["fp32"]
        table.data["overhead"][table._overhead_key("fp32", s)] = 10 * cost["fp32"]
    table.data["tokens"][table._overhead_key("fp32", seqs[0])] = {"point": 0.25, "graph": 0.5}
    assert predict_latency(table, pruned, tokens, searched.seq) == (
        seqs, pytest.approx(10 * cost["fp32"] + 2 * cost["fp32"] + 0.25 + 0.5, abs=1e-3))


@pytest.mark.e2e
def test_a_killed_search_resumes_to_its_trials(searched, table_copy, glue_dir, tmp_path):
    """A search of one trial is resumed to three by a command killed inside its first new trial
    (it waits for the table, held locked); a second resume finishes the three, keeping the first."""
    out = tmp_path / "search"

    def args(table, trials):
        return auto_args(searched.teacher, out, table, glue_dir, "--trials", str(trials), "--seed", "7",
                         "--check-models", "0")

    cli(args(table_copy, 1))
    first = {t.number: (t.state.name, t.params) for t in trials_of(str(out))}
    assert [s for s, _ in first.values()] == ["COMPLETE"]
    # the next trial builds another model than the first (a repeat would take the first's figures)
    params = dict(first[0][1])
    params.update(layers=3 - params["layers"], heads=0.5 - params["heads"])
    study_of(out).enqueue_trial(params)
    empty = tmp_path / "empty.json"     # measures nothing: the killed run's trial waits for its lock
    env = {**os.environ, "COMPRESSOR_PROGRESS": "0"}
    with table_held(empty):
        proc = subprocess.Popen([sys.executable, "-m", "compressor", *args(empty, 3)], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            started = watch(out, out / "study.db", lambda trials: any(
                t.state.name == "RUNNING" and t.user_attrs.get("pid") == proc.pid for t in trials),
                lambda: proc.poll() is None)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
    assert started, f"the resumed command started no trial (exit {proc.returncode})"
    killed = [t.number for t in trials_of(str(out)) if t.state.name == "RUNNING"]
    assert killed == [1]   # left running by the killed command
    cli(args(table_copy, 3))
    after = {t.number: t for t in trials_of(str(out))}
    assert sum(1 for t in after.values() if t.state.name in ("COMPLETE", "PRUNED")) == 3
    assert all((after[n].state.name, after[n].params) == first[n] for n in first)   # not run again
    assert after[killed[0]].state.name == "FAIL"   # the killed trial is marked failed, not counted
    assert after[killed[0]].user_attrs["error"].startswith("its process stopped")
    assert not any(t.state.name == "RUNNING" for t in after.values())
    report = json.load(open(out / "report.json"))
    assert report["pick"] and report["counts"] == {"COMPLETE": 3, "PRUNED": 0, "FAIL": 1, "RUNNING": 0}


def running(trials) -> set:
    """The processes (pids) with a trial under way."""
    return {t.user_attrs["pid"] for t in trials if t.state.name == "RUNNING" and "pid" in t.user_attrs}


@pytest.mark.e2e
def test_two_workers_share_one_journal_storage(searched, table_copy, glue_dir, tmp_path):
    """Both processes run a trial: the table they need is held locked (as a process measuring it
    would hold it) until each has a trial of its own under way, so neither can run them all."""
    import torch

    from compressor.auto.study import run_auto

    out, journal = tmp_path / "search", tmp_path / "study.log"
    full = table_copy.read_text()
    data = json.loads(full)
    data["layers"], data["overhead"] = {}, {}
    table_copy.write_text(json.dumps(data))
    threads, failures = torch.get_num_threads(), []

    def work():
        try:
            run_auto(searched.teacher, str(out), {**SPACE, "trials": 2, "workers": 2, "seed": 3, "check_models": 0,
                                                  "storage": f"journal:{journal}", "latency_table": str(table_copy)},
                     data_dir=glue_dir, train_limit=64, dev_limit=16, log=lambda msg: None)
        except BaseException as exc:   # reported by the test below
            failures.append(exc)

    runner = threading.Thread(target=work, daemon=True)
    try:
        with table_held(table_copy):
            runner.start()
            started = watch(out, journal, lambda trials: len(running(trials)) == 2, runner.is_alive)
            assert started, f"the two workers did not both start a trial: {failures}"
            pids = running(trials_of(str(out)))
            tmp = f"{table_copy}.tmp"
            with open(tmp, "w") as f:
                f.write(full)     # measured meanwhile: the workers find every entry once the lock is free
            os.replace(tmp, table_copy)
    finally:
        runner.join(180)
        torch.set_num_threads(threads)
    assert not runner.is_alive() and not failures, failures
    assert journal.exists() and not (out / "study.db").exists()
    trials = trials_of(str(out))
    kept = [t for t in trials if t.state.name in ("COMPLETE", "PRUNED")]
    assert len(kept) == 2 and not any(t.state.name == "RUNNING" for t in trials)
    assert {t.user_attrs["pid"] for t in kept} == pids and os.getpid() in pids
    assert json.load(open(out / "report.json"))["pick"]


def test_bad_input_is_one_line(searched, glue_dir, tmp_path, monkeypatch, capsys):
    from compressor.auto.study import run_auto
    from compressor.cli import main

    # a teacher that held no rows out: the command says so in one line
    with pytest.raises(SystemExit) as exit_info:
        main(auto_args(searched.plain, tmp_path / "o1", tmp_path / "table.json", glue_dir))
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 1 and len(err) == 1, err
    assert err[0].startswith("error:") and "--holdout" in err[0]
    assert not (tmp_path / "table.json").exists()
    # a folder of something else is never written into
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    with pytest.raises(CompressorError, match="another --out"):
        run_auto(searched.teacher, str(tmp_path / "mine"), data_dir=glue_dir)
    assert os.listdir(tmp_path / "mine") == ["notes.txt"] and (tmp_path / "mine" / "notes.txt").read_text() == "keep"
    # no optuna: the pip command
    monkeypatch.setitem(sys.modules, "optuna", None)
    with pytest.raises(CompressorError, match=r"pip install 'compressor\[auto\]'"):
        run_auto(searched.teacher, str(tmp_path / "o2"), data_dir=glue_dir)


def test_the_auto_stage_hands_its_pick_to_the_next_stage(searched, table_copy, glue_dir, tmp_path):
    from compressor.export.runtime import open_graph
    from compressor.recipe import run_recipe

    recipe = tmp_path / "auto.yaml"
    recipe.write_text(f"""name: auto-stage
task: sst2
device: cpu
data: {{train_limit: 64, dev_limit: 16}}
teacher: {searched.teacher}
stages:
  - auto: {{trials: 1, max_drop: 100, heads: [0, 0.5], ffn: [0], tokens: [1], vocab: [false],
            precisions: [fp32], exits: [none], layer_rules: [top], importance_rows: 16, check_models: 0,
            recover_candidates: 0, latency_table: {table_copy}}}
""")
    manifest = run_recipe(str(recipe), str(tmp_path / "run"), data_dir=glue_dir)
    folder = os.path.join(str(tmp_path / "run"), manifest["stages"][-1]["model_dir"])
    stage = json.load(open(os.path.join(folder, "record.json")))
    assert manifest["stages"][-1]["kind"] == "onnx" and stage["split"] == "dev" and stage["latency_ms"] > 0
    assert stage["metrics"]["accuracy"] * 100 == pytest.approx(stage["score"]) and stage["examples"] == 16
    assert os.path.exists(os.path.join(folder, "search", "report.json"))
    assert open_graph(folder).logits(["a fine film"]).shape == (1, 2)
