"""What the fault and attack probe found (issue 30, item 7): each ends in one clear line, and
nothing of the user's (inside the run folder or outside it) is lost, emptied or copied.
"""
import json
import os
import shutil
import textwrap

import pytest

from test_faults_runner import run_cli
from compressor.core.guard import LOCK_FILE
from compressor.recipe import run_recipe

EMBEDDED_DEV = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                            "compressor", "core", "data", "embedded", "sst2", "dev.tsv")

RECIPE = """
name: probe
task: sst2
data: {{dir: embedded, train_limit: 16, dev_limit: 16}}
device: cpu
teacher:
  model: {model}
stages:
  - evaluate: {{split: dev}}
"""


def one_error_line(code, err, *words):
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert code == 1 and len(lines) == 1 and lines[0].startswith("error: "), (code, err)
    assert "Traceback" not in err, err
    for word in words:
        assert word in lines[0], err
    return lines[0]


def write(path, text) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip())
    return str(path)


def quiet(_):
    pass



@pytest.fixture
def recipe(tmp_path, checkpoint):
    return write(tmp_path / "r.yaml", RECIPE.format(model=checkpoint))


# -- 1. the run's lock file is never opened through a link -------------------------------

@pytest.mark.parametrize("link", ["symbolic", "hard"])
def test_a_lock_file_linked_to_a_file_elsewhere_is_refused_and_the_file_kept(capsys, tmp_path, recipe,
                                                                             link):
    precious = tmp_path / "elsewhere" / "precious.txt"
    precious.parent.mkdir()
    precious.write_text("the user's data")
    out = tmp_path / "run"
    out.mkdir()
    (os.symlink if link == "symbolic" else os.link)(precious, out / LOCK_FILE)
    code, _, err = run_cli(capsys, "run", recipe, "--out", str(out))
    one_error_line(code, err, str(out / LOCK_FILE), "symbolic link" if link == "symbolic" else "hard link")
    assert precious.read_text() == "the user's data"
    assert not (out / "00-teacher").exists()


# -- 2. quantize copies nothing from outside its input -------------------------------------

def test_quantize_leaves_out_a_side_file_linked_from_elsewhere(capsys, tmp_path, export_dir):
    secret = tmp_path / "elsewhere" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("not the model's")
    src = tmp_path / "exp"
    shutil.copytree(export_dir, src)
    os.symlink(secret, src / "notes.txt")
    out = tmp_path / "q"
    code, _, err = run_cli(capsys, "quantize", str(src), "--out", str(out), "--data-dir", "embedded",
                           "--dev-limit", "8")
    assert code == 0, err
    assert f"warning: {src / 'notes.txt'} is a symbolic link: not copied into {out}" in err
    assert not os.path.lexists(out / "notes.txt") and (out / "tokenizer.json").is_file()


def _with_external_data(export_dir, folder, data_folder):
    """A copy of the export whose weights live in ``data_folder/model.onnx_data``."""
    import onnx

    shutil.copytree(export_dir, folder)
    model = onnx.load(os.path.join(export_dir, "model.onnx"))
    os.makedirs(data_folder, exist_ok=True)
    staged = os.path.join(data_folder, "model.onnx")
    onnx.save(model, staged, save_as_external_data=True, location="model.onnx_data", size_threshold=0)
    shutil.move(staged, os.path.join(folder, "model.onnx"))
    return os.path.join(data_folder, "model.onnx_data")


def test_quantize_refuses_external_data_linked_from_elsewhere_before_reading_it(capsys, tmp_path,
                                                                                export_dir, monkeypatch):
    import onnx.external_data_helper as helper

    src = tmp_path / "exp"
    data = _with_external_data(export_dir, src, str(tmp_path / "elsewhere"))
    os.symlink(data, src / "model.onnx_data")
    read = []
    monkeypatch.setattr(helper, "load_external_data_for_tensor",
                        lambda *a, **k: read.append(a) or pytest.fail("external data was read"))
    out = tmp_path / "q"
    code, _, err = run_cli(capsys, "quantize", str(src), "--out", str(out), "--data-dir", "embedded",
                           "--dev-limit", "8")
    one_error_line(code, err, f"{src / 'model.onnx'}", "model.onnx_data is reached through a symbolic link")
    assert not read and not out.exists()


def test_quantize_takes_external_data_that_is_a_file_of_the_folder(capsys, tmp_path, export_dir):
    src = tmp_path / "exp"
    data = _with_external_data(export_dir, src, str(src))
    assert os.path.isfile(data)
    out = tmp_path / "q"
    code, _, err = run_cli(capsys, "quantize", str(src), "--out", str(out), "--data-dir", "embedded",
                           "--dev-limit", "8")
    assert code == 0, err
    # the INT8 graph holds its own weights: the FP32 graph's data file is not copied beside it
    assert (out / "model.onnx").is_file() and not (out / "model.onnx_data").exists()


# -- 3. a YAML alias bomb ---------------------------------------------------------------------

BOMB = """
name: bomb
task: sst2
a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]
stages:
  - evaluate: {split: dev}
"""


def test_a_yaml_alias_bomb_is_one_line(capsys, tmp_path):
    path = write(tmp_path / "bomb.yaml", BOMB)
    code, _, err = run_cli(capsys, "recipe", "validate", path)
    assert code == 1 and err.strip() == (f"{path}:8: the recipe's aliases (*name) expand to more than "
                                         "100,000 values; write the values out instead"), err
    code, _, err = run_cli(capsys, "run", path, "--out", str(tmp_path / "out"))
    one_error_line(code, err, f"{path}:8: the recipe's aliases")
    assert not (tmp_path / "out").exists()


def test_a_self_referring_alias_is_one_line_and_a_small_anchor_still_works(capsys, tmp_path):
    from compressor.recipe.yamlfile import parse_yaml

    code, _, err = run_cli(capsys, "recipe", "validate",
                           write(tmp_path / "loop.yaml", "name: x\ntask: sst2\na: &a [1, *a]\n"))
    assert code == 1 and err.strip().endswith(":3: an alias refers to the block that holds it; "
                                              "write the value out"), err
    doc = parse_yaml("base: &t {epochs: 1, lr: 0.001}\nstages:\n  - finetune: *t\n")
    assert doc["stages"][0]["finetune"] == {"epochs": 1, "lr": 0.001}


# -- 6. what a killed export left inside the run folder -----------------------------------

def test_a_killed_exports_nested_temporary_folder_is_removed_on_resume(tmp_path, recipe):
    out = tmp_path / "run"
    run_recipe(recipe, str(out), log=quiet)
    # what SIGKILL during an export stage left: the exporter's own temporary folder beside the
    # stage's temporary folder, with optimum's working folder inside
    nested = out / "..02-export.tmp-ab12cd34.tmp-ef56gh78"
    (nested / ".optimum").mkdir(parents=True)
    (nested / ".optimum" / "model.onnx").write_bytes(b"half")
    (out / ".02-export.tmp-ab12cd34").mkdir()
    (out / "..my-notes").write_text("the user's")
    logs = []
    run_recipe(recipe, str(out), log=logs.append)
    assert not nested.exists() and not (out / ".02-export.tmp-ab12cd34").exists()
    assert (out / "..my-notes").read_text() == "the user's"
    assert any("removed 2 temporary item(s)" in line and nested.name in line for line in logs), logs


# -- 7. a damaged record.json; 10. a user's file inside a stage folder ----------------------

@pytest.mark.parametrize("damage", ["[]", "{not json", ""])
def test_a_damaged_stage_record_re_runs_the_stage_with_one_line(tmp_path, recipe, damage):
    out = tmp_path / "run"
    run_recipe(recipe, str(out), log=quiet)
    (out / "01-evaluate" / "record.json").write_text(damage)
    logs = []
    manifest = run_recipe(recipe, str(out), log=logs.append)
    assert "[01-evaluate] record.json is damaged (not a stage record): running it again" in logs, logs
    assert "[01-evaluate] running" in logs
    record = json.loads((out / "01-evaluate" / "record.json").read_text())
    assert record["stage"] == "evaluate" and manifest["stages"][-1]["score"] == record["score"]


def test_a_users_file_in_a_stage_folder_is_moved_aside_when_the_stage_re_runs(tmp_path, recipe):
    out = tmp_path / "run"
    run_recipe(recipe, str(out), log=quiet)
    (out / "01-evaluate" / "notes").mkdir()
    (out / "01-evaluate" / "notes" / "mine.txt").write_text("my notes")
    open(recipe, "a").write("  - evaluate: {split: dev, batch_size: 8}\n")
    run_recipe(recipe, str(out), log=quiet)   # the stage is unchanged: the file stays in place
    assert (out / "01-evaluate" / "notes" / "mine.txt").read_text() == "my notes"
    text = open(recipe).read().replace("evaluate: {split: dev}", "evaluate: {split: dev, batch_size: 4}")
    open(recipe, "w").write(text)
    logs = []
    run_recipe(recipe, str(out), log=logs.append)
    kept = out / "kept-01-evaluate"
    assert (f"[01-evaluate] 1 file(s) the stage did not write ({os.path.join('notes', 'mine.txt')}) "
            f"moved to {kept} before the folder is replaced") in logs, logs
    assert (kept / "notes" / "mine.txt").read_text() == "my notes"
    assert not (out / "01-evaluate" / "notes").exists() and (out / "01-evaluate" / "record.json").is_file()


# -- 9. a damaged manifest.json in an export folder --------------------------------------------

@pytest.mark.parametrize("damage", ['{"format": ', "[]"])
@pytest.mark.parametrize("command", ["eval", "predict", "bench"])
def test_a_damaged_export_manifest_is_one_line(capsys, tmp_path, export_dir, command, damage):
    bad = tmp_path / "bad"
    shutil.copytree(export_dir, bad)
    (bad / "manifest.json").write_text(damage)
    argv = {"eval": ["eval", str(bad), "--data-dir", "embedded", "--limit", "8"],
            "predict": ["predict", str(bad), "--onnx", "--input", EMBEDDED_DEV, "--output",
                        str(tmp_path / "p")],
            "bench": ["bench", str(bad), "--out", str(tmp_path / "b"), "--data-dir", "embedded",
                      "--peers", "none", "--no-memory", "--no-score", "--sentences", "4",
                      "--batch-sizes", "none"]}[command]
    code, _, err = run_cli(capsys, *argv)
    err = "\n".join(line for line in err.splitlines() if not line.startswith("note: --output is deprecated"))
    one_error_line(code, err, f"{bad / 'manifest.json'}", "damaged", "export the model again")


def test_the_runtime_says_a_damaged_manifest_in_one_line(tmp_path, export_dir):
    from compressor.export.runtime import ExportError, open_graph

    bad = tmp_path / "bad"
    shutil.copytree(export_dir, bad)
    (bad / "manifest.json").write_text("{")
    with pytest.raises(ExportError, match="manifest.json:1: damaged, not valid JSON"):
        open_graph(str(bad))


# -- 4, 5. two processes: a prune stage runs in both; a killed rank is one line ------------------
# (4: a prune stage under --nproc 2 runs in test_theseus.py's two-process launch, after theseus)

def test_a_killed_rank_is_one_line_naming_it(capsys):
    from types import SimpleNamespace

    from compressor.core import distributed

    killed = SimpleNamespace(exitcode=-9)
    distributed._say_who_died({0: SimpleNamespace(exitcode=distributed.QUIET_EXIT), 1: killed}, 2,
                              ["run", "r.yaml", "--out", "o"])
    assert capsys.readouterr().err == (
        "error: rank 1 of 2 was killed (SIGKILL); the other process(es) stopped with it: run the same "
        "command again to resume from the last finished stage\n")
    # a rank that ended with an error has said it itself
    distributed._say_who_died({0: SimpleNamespace(exitcode=1), 1: SimpleNamespace(exitcode=-15)}, 2, ["run"])
    assert capsys.readouterr().err == ""


def test_a_rank_whose_peer_died_leaves_it_to_the_launcher_or_says_it_in_one_line(monkeypatch):
    from compressor.core import distributed
    from compressor.core.errors import Terminated

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    gloo = RuntimeError("[../gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:20702")
    assert distributed.peer_lost(gloo) and not distributed.peer_lost(RuntimeError("shape mismatch"))
    assert str(distributed.peer_lost_error()).startswith("rank 1 of this 2-process run stopped")
    monkeypatch.setenv(distributed.LAUNCHED, "1")
    assert distributed.quiet_exit(gloo) and distributed.quiet_exit(Terminated())
    assert not distributed.quiet_exit(RuntimeError("shape mismatch"))


# -- 11. invalid UTF-8 is reported on its own line ---------------------------------------------

@pytest.mark.parametrize("bad_line", [5, 11, 501])
def test_invalid_utf8_is_reported_on_its_line(tmp_path, bad_line):
    from compressor.core.data import get_task
    from compressor.core.data.readers import read_glue_file
    from compressor.core.errors import CompressorError

    lines = [b"sentence\tlabel"] + [b"a fine and rather long sentence number %d\t1" % i for i in range(2, 700)]
    lines[bad_line - 1] = b"caf\xe9 au lait\t0"
    path = tmp_path / "train.tsv"
    path.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(CompressorError) as err:
        read_glue_file(get_task("sst2"), str(path), "train")
    assert str(err.value) == f"{path}:{bad_line}: not UTF-8 text"


# -- 8. a tokenizer larger than the model's embedding table ---------------------------------------

def test_a_tokenizer_larger_than_the_embedding_table_is_one_line(checkpoint, tmp_path, capsys):
    import transformers

    grown = tmp_path / "grown"
    shutil.copytree(checkpoint, grown)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(grown))
    tokenizer.add_tokens([f"extra{i}" for i in range(50)])
    tokenizer.save_pretrained(str(grown))
    rows = tmp_path / "rows.tsv"
    rows.write_text("sentence\nextra7 extra42 a gripping film\n")
    code, _, err = run_cli(capsys, "predict", str(grown), "--input", str(rows), "--out", str(tmp_path / "p"))
    one_error_line(code, err, "tokenizer has", "embedding", str(grown))
    assert not (tmp_path / "p" / "predictions.tsv").exists()


# -- 12. a legacy pickle checkpoint: the refusal alone, no warnings before it ---------------------

def test_a_pickle_checkpoint_is_refused_with_no_warning_lines_first(checkpoint, tmp_path):
    import subprocess
    import sys

    import torch
    from safetensors.torch import load_file

    legacy = tmp_path / "legacy"
    shutil.copytree(checkpoint, legacy)
    state = load_file(str(legacy / "model.safetensors"))
    os.remove(legacy / "model.safetensors")

    # anything but tensors (a reference to a function, here) is refused by the restricted unpickler
    torch.save({**state, "x": print}, legacy / "pytorch_model.bin", _use_new_zipfile_serialization=False)
    done = subprocess.run([sys.executable, "-m", "compressor", "eval", str(legacy), "--task", "sst2",
                           "--data-dir", "embedded", "--out", str(tmp_path / "e")],
                          capture_output=True, text=True, env={**os.environ, "PYTHONWARNINGS": "default"})
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 1 and len(lines) == 1, done.stderr
    assert lines[0].startswith("error: ") and "pickle" in lines[0], done.stderr


# -- 13. what cannot work is said before the run folder is touched ---------------------------------

def _recipe_file(tmp_path, teacher, device="cpu"):
    path = tmp_path / "r.yaml"
    path.write_text(RECIPE.format(model=teacher).replace("device: cpu", f"device: {device}"))
    return str(path)


def test_a_cuda_recipe_on_a_machine_without_cuda_is_one_line_and_no_folder(checkpoint, tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    out = tmp_path / "run"
    code, _, err = run_cli(capsys, "run", _recipe_file(tmp_path, checkpoint, "cuda"), "--out", str(out))
    one_error_line(code, err, "r.yaml", "device", "CUDA")
    assert not out.exists()


def test_a_pickled_teacher_is_refused_before_the_run_folder_is_made(checkpoint, tmp_path, capsys):
    import torch
    from safetensors.torch import load_file

    from compressor.core.models import refuse_pickle_only

    legacy = tmp_path / "legacy"
    shutil.copytree(checkpoint, legacy)
    state = load_file(str(legacy / "model.safetensors"))
    os.remove(legacy / "model.safetensors")
    torch.save(state, legacy / "pytorch_model.bin")
    refuse_pickle_only(str(legacy))          # tensors alone: the restricted unpickler takes them
    torch.save({**state, "x": print}, legacy / "pytorch_model.bin")
    out = tmp_path / "run"
    code, _, err = run_cli(capsys, "run", _recipe_file(tmp_path, str(legacy)), "--out", str(out))
    one_error_line(code, err, "pytorch_model.bin", "pickle")
    assert not out.exists()


def test_a_relative_path_found_only_beside_the_recipe_says_where_paths_are_read_from(
        checkpoint, tmp_path, monkeypatch, capsys):
    sub = tmp_path / "recipes"
    sub.mkdir()
    shutil.copytree(checkpoint, sub / "teacher")
    (sub / "r.yaml").write_text(RECIPE.format(model="teacher"))
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(capsys, "recipe", "validate", str(sub / "r.yaml"))
    assert code == 1 and "from the working directory" in err and str(sub / "teacher") in err, err
    monkeypatch.chdir(sub)   # from the recipe's folder the same recipe is fine
    code, _, err = run_cli(capsys, "recipe", "validate", "r.yaml")
    assert code == 0, err
