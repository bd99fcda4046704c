"""What a user meets at the command line: bad input is one line, a non-zero exit, no traceback."""
import os
import shutil
import subprocess
import sys

import pytest
import torch

from compressor.cli import main
from conftest import save_sst2_classifier


def run_cli(capsys, *args):
    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


def assert_one_line_error(code, err, message):
    assert code == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert message in lines[0], err
    assert "Traceback" not in err


def sst2_folder(tmp_path, glue_dir, bad_line=None):
    root = tmp_path / "glue"
    (root / "SST-2").mkdir(parents=True)
    with open(os.path.join(glue_dir, "SST-2", "train.tsv")) as f:
        lines = f.readlines()[:40]
    if bad_line:
        lines[2] = bad_line
    (root / "SST-2" / "train.tsv").write_text("".join(lines))
    shutil.copy(os.path.join(glue_dir, "SST-2", "dev.tsv"), root / "SST-2" / "dev.tsv")
    return str(root)


def test_missing_checkpoint(capsys, tmp_path):
    code, _, err = run_cli(capsys, "eval", str(tmp_path / "nope"), "--task", "sst2")
    assert_one_line_error(code, err, "checkpoint not found")


def test_corrupt_checkpoint(capsys, tmp_path, tiny_models, glue_dir):
    bad = tmp_path / "bad"
    shutil.copytree(tiny_models["bert"], bad)
    (bad / "model.safetensors").write_bytes(b"\0" * 64)
    code, _, err = run_cli(capsys, "eval", str(bad), "--task", "sst2", "--data-dir", glue_dir)
    assert_one_line_error(code, err, f"corrupt checkpoint {bad}")


def test_unknown_task(capsys, tmp_path, tiny_models):
    code, _, err = run_cli(capsys, "finetune", tiny_models["bert"], "--task", "sst9",
                           "--out", str(tmp_path / "o"))
    assert_one_line_error(code, err, "unknown task 'sst9'")


def test_data_folder_without_the_task(capsys, tmp_path, tiny_models):
    code, _, err = run_cli(capsys, "finetune", tiny_models["bert"], "--task", "rte",
                           "--out", str(tmp_path / "o"), "--data-dir", str(tmp_path))
    assert_one_line_error(code, err, "no RTE/train.tsv under")


def test_malformed_tsv_row_names_file_and_line(capsys, tmp_path, tiny_models, glue_dir):
    data = sst2_folder(tmp_path, glue_dir, bad_line="a fine film\tpositive\n")
    code, _, err = run_cli(capsys, "finetune", tiny_models["bert"], "--task", "sst2",
                           "--out", str(tmp_path / "o"), "--data-dir", data)
    assert_one_line_error(code, err, os.path.join(data, "SST-2", "train.tsv") + ":3:")


def test_cuda_asked_for_where_none_exists(capsys, tmp_path, tiny_models, glue_dir, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    code, _, err = run_cli(capsys, "finetune", tiny_models["bert"], "--task", "sst2",
                           "--out", str(tmp_path / "o"), "--data-dir", glue_dir, "--device", "cuda")
    assert_one_line_error(code, err, "no CUDA GPU")


def test_bad_recipe_lists_every_problem(capsys, tmp_path):
    recipe = tmp_path / "bad.yaml"
    recipe.write_text("task: sst2\nteacher: {model: m}\nstages:\n  - shrink: {}\n"
                      "  - finetune: {epochs: lots}\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["recipe", "validate", str(recipe)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 1
    lines = err.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(f"{recipe}:4: unknown stage 'shrink'; known stages: ")
    assert "evaluate" in lines[0] and "finetune" in lines[0]
    assert lines[1] == f"{recipe}:5: stage 'finetune': epochs must be a number, got 'lots'"
    code, _, err = run_cli(capsys, "run", str(recipe), "--out", str(tmp_path / "run"))
    assert code == 1 and all(line.startswith("error: ") for line in err.splitlines())
    assert "Traceback" not in err


def test_output_folder_of_another_run(capsys, tmp_path, tiny_models, glue_dir):
    out = tmp_path / "run"
    out.mkdir()
    (out / "manifest.json").write_text('{"recipe": "someone-else", "task": "sst2", "stages": []}')
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"task: sst2\nteacher: {tiny_models['bert']}\n")
    code, _, err = run_cli(capsys, "run", str(recipe), "--out", str(out), "--data-dir", glue_dir)
    assert_one_line_error(code, err, "holds a run of recipe 'someone-else'")


def test_installed_command_prints_no_traceback(tmp_path):
    result = subprocess.run([sys.executable, "-m", "compressor", "eval", str(tmp_path / "nope")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert result.stderr.strip() == f"error: checkpoint not found: {tmp_path / 'nope'} (no such folder)"


def test_validate_accepts_a_good_recipe(capsys):
    from compressor.recipe.demo import demo_recipe_path
    main(["recipe", "validate", demo_recipe_path()])
    assert capsys.readouterr().out.strip().endswith(": ok")


def test_help_loads_no_training_stack_and_prints_no_warnings():
    """`compressor --help` answers at once: torch, transformers and the method modules load on use."""
    probe = ("import sys, io, contextlib\n"
             "from compressor.cli import main\n"
             "for args in (['--help'], ['finetune', '--help'], ['distill', '--help'],\n"
             "             ['quantize', '--help'], ['bench', '--help'], ['run', '--help']):\n"
             "    with contextlib.redirect_stdout(io.StringIO()):\n"
             "        try:\n"
             "            main(args)\n"
             "        except SystemExit:\n"
             "            pass\n"
             "print(sorted(m for m in ('torch', 'transformers', 'onnxruntime', 'neural_compressor')\n"
             "             if m in sys.modules))\n")
    result = subprocess.run([sys.executable, "-W", "default", "-c", probe], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
    assert result.stderr == ""


IMPORTED = ["compressor.engine.train", "compressor.engine.distiller", "compressor.quantize.api",
            "compressor.quantize.inc", "compressor.export.onnx", "compressor.bench.suite"]


@pytest.fixture(scope="module")
def imports():
    """Each module imported in a fresh process of its own, the processes started together: an
    import runs on one core, so the two cores take two at a time instead of one."""
    procs = {m: subprocess.Popen([sys.executable, "-c", f"import {m}"], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True) for m in IMPORTED}
    yield procs
    for proc in procs.values():   # one a failed test left unread
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


@pytest.mark.parametrize("module", IMPORTED)
def test_importing_the_toolkit_prints_nothing(module, imports):
    proc = imports[module]
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0 and stdout == "" and stderr == "", stderr


def test_an_interrupted_command_says_whether_running_it_again_resumes():
    from compressor.cli import _interrupted

    assert _interrupted(["run", "recipe.yaml", "--out", "r"]).endswith("again to resume")
    assert "incomplete" in _interrupted(["bench", "m", "--out", "x"])
    assert _interrupted(["finetune", "--task", "sst2"]).endswith("to start over")


# the command-line convention's check of stderr (tests/test_cli_convention.py), as a user
# runs it: a whole run in a process of its own, so e2e, not the unit tier
@pytest.mark.e2e
def test_a_run_prints_no_dependency_warnings(tmp_path, minilm_dir, glue_dir):
    model = save_sst2_classifier(tmp_path / "m", minilm_dir)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"task: sst2\nteacher: {{model: {model}}}\ndata: {{dev_limit: 8, train_limit: 8}}\n"
                      "stages:\n  - quantize_torch: {backend: torchao, method: dynamic}\n")
    env = dict(os.environ, PYTHONWARNINGS="default")   # what a user with warnings shown would see
    result = subprocess.run([sys.executable, "-m", "compressor", "run", str(recipe), "--out",
                             str(tmp_path / "run"), "--data-dir", glue_dir],
                            capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr
    for noise in ("Failed to load", "FutureWarning", "_pytree"):
        assert noise not in result.stderr, result.stderr
