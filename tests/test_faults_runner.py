"""The run folder under faults: a user's files are never deleted, one run at a time,
damaged stages are noticed, and what a killed run left is cleaned up."""
import glob
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from compressor.cli import main
from compressor.recipe import run_recipe
from compressor.core.guard import LOCK_FILE

GOOD = """
name: tiny
task: sst2
data:
  train_limit: {train}
  dev_limit: 32
device: cpu
teacher:
  model: {model}
  finetune: {{epochs: {epochs}, batch_size: 16, max_length: 32, lr: 1e-3}}
stages:
  - finetune: {{epochs: 1, batch_size: 16, max_length: 32, lr: 5e-4}}
  - evaluate: {{split: dev}}
"""


def recipe_file(tmp_path, model, train=48, epochs=1, name="r.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(GOOD.format(model=model, train=train, epochs=epochs)).lstrip())
    return str(path)


def run_cli(capsys, *args):
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(code, err, message):
    lines = err.strip().splitlines()
    assert code == 1 and len(lines) == 1 and lines[0].startswith("error: "), (code, err)
    assert message in lines[0], err
    assert "Traceback" not in err


def quiet(_):
    pass


@pytest.fixture
def finished_run(tmp_path, tiny_models, glue_dir):
    recipe = recipe_file(tmp_path, tiny_models["bert"])
    out = tmp_path / "run"
    run_recipe(recipe, str(out), data_dir=glue_dir, log=quiet)
    return recipe, out


def test_a_users_folder_named_like_a_stage_is_never_deleted(capsys, tmp_path, tiny_models, glue_dir):
    # the fault probe's case: an output folder holding only '07-archive/keep.txt'
    recipe = recipe_file(tmp_path, tiny_models["bert"])
    out = tmp_path / "out"
    (out / "07-archive").mkdir(parents=True)
    (out / "07-archive" / "keep.txt").write_text("x")
    code, _, err = run_cli(capsys, "run", recipe, "--out", str(out), "--data-dir", glue_dir)
    one_error_line(code, err, "holds other files (07-archive)")
    assert (out / "07-archive" / "keep.txt").read_text() == "x"


def test_a_users_folder_inside_a_finished_run_survives_reruns(finished_run, glue_dir, tmp_path):
    recipe, out = finished_run
    (out / "07-archive").mkdir()
    (out / "07-archive" / "keep.txt").write_text("x")
    (out / "99-notes").mkdir()
    run_recipe(recipe, str(out), data_dir=glue_dir, log=quiet)
    # a shorter recipe drops the stage folder the run made, and nothing else
    short = open(recipe).read().replace("  - evaluate: {split: dev}\n", "")
    open(recipe, "w").write(short)
    manifest = run_recipe(recipe, str(out), data_dir=glue_dir, log=quiet)
    assert not (out / "02-evaluate").exists()
    assert (out / "07-archive" / "keep.txt").read_text() == "x" and (out / "99-notes").is_dir()
    assert "02-evaluate" not in manifest["made"]


def test_a_users_folder_where_a_stage_would_go_is_refused_not_replaced(capsys, finished_run,
                                                                       glue_dir):
    recipe, out = finished_run
    longer = open(recipe).read() + "  - evaluate: {split: dev, batch_size: 8}\n"
    open(recipe, "w").write(longer)
    (out / "03-evaluate").mkdir()
    (out / "03-evaluate" / "mine.txt").write_text("mine")
    code, _, err = run_cli(capsys, "run", recipe, "--out", str(out), "--data-dir", glue_dir)
    one_error_line(code, err, f"{out / '03-evaluate'} was not made by a run of this recipe")
    assert (out / "03-evaluate" / "mine.txt").read_text() == "mine"


HOLD = """
import sys, time
from compressor.core.guard import run_lock
with run_lock(sys.argv[1]):
    print("held", flush=True)
    time.sleep(120)
"""


def test_a_second_run_on_the_same_folder_is_refused_and_a_killed_one_does_not_block(
        capsys, finished_run, glue_dir):
    recipe, out = finished_run
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        code, _, err = run_cli(capsys, "run", recipe, "--out", str(out), "--data-dir", glue_dir)
        one_error_line(code, err, f"{out} is in use by another compressor run (pid {holder.pid} on ")
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    # the kernel released the dead process's lock: the next run goes ahead
    code, out_text, err = run_cli(capsys, "run", recipe, "--out", str(out), "--data-dir", glue_dir)
    assert code == 0 and "report:" in out_text, err
    assert (out / LOCK_FILE).exists() and (out / LOCK_FILE).read_text() == ""


def test_a_truncated_stage_file_is_noticed_and_the_stage_runs_again(finished_run, glue_dir):
    recipe, out = finished_run
    weights = out / "01-finetune" / "model.safetensors"
    size = weights.stat().st_size
    with open(weights, "r+b") as f:
        f.truncate(size // 2)
    logs = []
    run_recipe(recipe, str(out), data_dir=glue_dir, log=logs.append)
    assert logs[0] == "[00-teacher] unchanged since its last run: skipped"
    assert (f"[01-finetune] model.safetensors has {size // 2:,} bytes, {size:,} when it was "
            "written: running it again") in logs
    assert "[02-evaluate] running" in logs  # what follows a re-made stage runs again too
    assert weights.stat().st_size == size
    # same size, other bytes: caught by the hash
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    logs.clear()
    run_recipe(recipe, str(out), data_dir=glue_dir, log=logs.append)
    assert "[01-finetune] model.safetensors has changed since it was written: running it again" in logs
    record = json.loads((out / "01-finetune" / "record.json").read_text())
    assert set(record["files"]) >= {"model.safetensors", "config.json"}


def test_leftovers_of_a_dead_run_are_removed(finished_run, glue_dir):
    recipe, out = finished_run
    (out / ".01-finetune.tmp-ab12cd34").mkdir()
    (out / ".01-finetune.tmp-ab12cd34" / "model.safetensors").write_bytes(b"half")
    (out / ".01-finetune.old-zz99yy88").mkdir()
    (out / ".tmp-k3j4h5g6").write_text("{")
    (out / ".my-notes").write_text("the user's hidden file")
    logs = []
    run_recipe(recipe, str(out), data_dir=glue_dir, log=logs.append)
    assert sorted(p for p in os.listdir(out) if p.startswith(".")) == [LOCK_FILE, ".my-notes"]
    assert any("removed 3 temporary item(s)" in line for line in logs)


def _start_run(recipe, out, glue_dir):
    env = {**os.environ, "COMPRESSOR_PROGRESS": "0"}
    return subprocess.Popen([sys.executable, "-m", "compressor", "run", recipe, "--out", str(out),
                             "--data-dir", glue_dir], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def _wait_for_temp_folder(out, proc, timeout=120):
    end = time.time() + timeout
    while time.time() < end and proc.poll() is None:
        found = glob.glob(os.path.join(out, ".00-teacher.tmp-*"))
        if found:
            return found[0]
        time.sleep(0.02)
    raise AssertionError(f"no temporary folder appeared; the run said {proc.communicate()}")


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_a_killed_run_leaves_nothing_half_written_after_it_resumes(tmp_path, tiny_models,
                                                                   glue_dir, sig):
    recipe = recipe_file(tmp_path, tiny_models["bert"], train=4000, epochs=3)
    out = tmp_path / "run"
    proc = _start_run(recipe, out, glue_dir)
    temp = _wait_for_temp_folder(out, proc)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert not (out / "00-teacher").exists()
    if sig == signal.SIGTERM:
        # the run stops at once and takes its temporary folder with it
        assert proc.returncode == 130 and "Traceback" not in err, err
        assert err.strip().splitlines()[-1] == "interrupted: run the same command again to resume"
        assert not os.path.exists(temp)
    else:
        assert proc.returncode == -signal.SIGKILL and os.path.exists(temp)
    short = open(recipe).read().replace("train_limit: 4000", "train_limit: 48").replace(
        "epochs: 3", "epochs: 1")
    open(recipe, "w").write(short)
    run_recipe(recipe, str(out), data_dir=glue_dir, log=quiet)
    assert not glob.glob(os.path.join(out, ".*.tmp-*")) and (out / "02-evaluate").is_dir()
