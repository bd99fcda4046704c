"""One command-line convention: MODEL first, --out a folder, every option described, an example in
every --help, one error prefix (no dependency noise on a run's stderr: tests/test_cli.py, e2e)."""
import json

import click
import pytest
from click.testing import CliRunner

from compressor.cli import cli, main
from conftest import save_sst2_classifier

pytestmark = pytest.mark.unit

# the commands that work on one model: MODEL is their first positional argument
MODEL_COMMANDS = ("finetune", "distill", "prune", "share", "lowrank", "theseus", "early-exit",
                  "early-exit-export", "quantize", "export", "eval", "predict")


def walk(group=cli, path=("compressor",)):
    yield path, group
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from walk(command, path + (name,))
        else:
            yield path + (name,), command


def test_every_option_is_described_and_every_help_ends_with_an_example():
    missing, no_example = [], []
    for path, command in walk():
        ctx = click.Context(command, info_name=" ".join(path))
        for p in command.params:
            if isinstance(p, click.Option) and not p.hidden and not (p.help or "").strip():
                missing.append(f"{' '.join(path)} {p.opts[0]}")
        text = command.get_help(ctx).rstrip()
        tail = text[text.rfind("Example:"):] if "Example:" in text else ""
        if not tail or not all(line.strip().startswith("compressor") for line in tail.splitlines()[1:]):
            no_example.append(" ".join(path))
    assert not missing, f"options without help: {missing}"
    assert not no_example, f"--help without a closing example: {no_example}"


@pytest.mark.parametrize("name", MODEL_COMMANDS)
def test_the_model_is_the_first_positional_argument(name):
    command = cli.commands[name]
    arguments = [p for p in command.params if isinstance(p, click.Argument)]
    assert arguments and arguments[0].name in ("model", "teacher"), name
    usage = " ".join(command.collect_usage_pieces(click.Context(command)))
    assert usage.split()[1].startswith("MODEL"), usage


def test_out_is_a_folder_everywhere():
    for path, command in walk():
        for p in command.params:
            if isinstance(p, click.Option) and "--out" in p.opts:
                assert isinstance(p.type, click.Path) and not p.type.file_okay, " ".join(path)


def test_same_defaults_for_preset_device_threads():
    seen = {"--preset": set(), "--device": set(), "--threads": set()}
    for path, command in walk():
        if path[-1] in ("run", "demo"):   # their --device overrides the recipe's (which is auto)
            continue
        for p in command.params:
            for flag in seen:
                if isinstance(p, click.Option) and flag in p.opts:
                    seen[flag].add(type(p.type).__name__ if flag == "--threads" else p.default)
    assert seen["--preset"] == {"auto"}
    assert seen["--device"] == {"auto"}
    assert seen["--threads"] == {"ThreadCounts"}


def test_deprecated_model_option_still_works_with_a_note(capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        main(["prune", "--model", str(tmp_path / "nope"), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 1
    assert err[0].startswith("note: --model is deprecated"), err
    assert err[1].startswith("error: checkpoint not found"), err
    with pytest.raises(SystemExit):
        main(["distill", "--teacher", str(tmp_path / "nope"), "--out", str(tmp_path / "o")])
    assert "note: --teacher is deprecated" in capsys.readouterr().err


def test_one_error_prefix(capsys, tmp_path):
    for args in (["quantize"], ["bench", "m", "--threads", "x", "--out", "o"], ["distil"]):
        with pytest.raises(SystemExit) as exit_info:
            main(args)
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and err.startswith("error: compressor") and "Error:" not in err, err
    with pytest.raises(SystemExit):
        main(["eval", str(tmp_path / "nope")])   # a CompressorError
    assert capsys.readouterr().err.startswith("error: checkpoint not found")
    # click's standalone call (a script, CliRunner) prints the same line, not click's "Error:" block
    result = CliRunner().invoke(cli, ["quantize"])
    assert result.exit_code == 2 and result.output.startswith("error: compressor quantize: Missing argument")


def test_recipe_validate_suggests_a_close_stage_name(tmp_path, capsys):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("task: sst2\nteacher: {model: x}\nstages:\n  - distil: {}\n")
    with pytest.raises(SystemExit):
        main(["recipe", "validate", str(recipe)])
    assert "unknown stage 'distil'; did you mean 'distill'?" in capsys.readouterr().err


def test_eval_and_predict_write_inside_the_out_folder(tmp_path, minilm_dir, glue_dir, capsys):
    model = save_sst2_classifier(tmp_path / "m", minilm_dir)
    main(["eval", model, "--data-dir", glue_dir, "--limit", "8", "--out", str(tmp_path / "ev")])
    assert json.load(open(tmp_path / "ev" / "eval.json"))["examples"] == 8
    rows = tmp_path / "rows.tsv"
    rows.write_text("sentence\nfine film\nawful film\n")
    main(["predict", model, "--input", str(rows), "--text-column", "sentence", "--out", str(tmp_path / "pr")])
    assert len((tmp_path / "pr" / "predictions.tsv").read_text().splitlines()) == 3
    capsys.readouterr()
