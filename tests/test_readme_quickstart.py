"""The README's quick start runs as written: a model fine-tuned on a CSV goes through distil,
prune, export, INT8, bench and report with no data flags after fine-tuning."""
import csv
import os
import re
import shlex

import pytest

from compressor.cli import main

pytestmark = pytest.mark.e2e
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def quick_start_commands() -> list:
    text = open(os.path.join(ROOT, "README.md")).read()
    section = text[text.index("## Quick start"):]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    joined = block.replace("\\\n", " ")
    return [shlex.split(line.split("#")[0]) for line in joined.splitlines() if line.strip()]


def _write(path, rows):
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["review", "sentiment"])
        writer.writerows(rows)


def test_the_readme_quick_start_runs_as_written(minilm_dir, glue_dir, tmp_path, monkeypatch):
    import torch
    import transformers

    from conftest import tiny_config
    from compressor.core.data import load_split

    # MODEL: a tiny random 4-layer encoder with MiniLM's tokenizer (the quick start keeps 3 layers)
    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    config = tiny_config("bert")
    config.vocab_size, config.num_hidden_layers = tokenizer.vocab_size, 4
    torch.manual_seed(0)
    model_dir = str(tmp_path / "encoder")
    transformers.BertModel(config).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)

    train = load_split("sst2", "train", data_dir=glue_dir, limit=160).examples
    dev = load_split("sst2", "dev", data_dir=glue_dir, limit=32).examples
    names = {0: "neg", 1: "pos"}
    _write(tmp_path / "train.csv", [(e.texts[0], names[int(e.label)]) for e in train])
    _write(tmp_path / "dev.csv", [(e.texts[0], names[int(e.label)]) for e in dev])
    monkeypatch.chdir(tmp_path)
    commands = quick_start_commands()
    assert [c[1] for c in commands] == ["finetune", "distill", "prune", "export", "quantize", "bench", "report"]
    for command in commands:
        args = [model_dir if a == "MODEL" else a for a in command[1:]]
        if args[0] == "bench":
            args += ["--sentences", "8", "--rounds", "1"] if "--rounds" in _options("bench") else ["--sentences", "8"]
        if args[0] in ("finetune", "distill"):
            args += ["--epochs", "1", "--device", "cpu"]
        if args[0] == "prune":
            args += ["--recover", "epochs=1", "--set", "device=cpu"]
        try:
            main(args)
        except SystemExit as exc:
            assert exc.code in (0, None), f"{' '.join(command)} exited {exc.code}"
    assert os.path.isfile("runs/int8/model.onnx")
    assert os.path.isfile("runs/report/report.md")


def _options(command: str) -> str:
    from click.testing import CliRunner

    from compressor.cli import cli

    return CliRunner().invoke(cli, [command, "--help"]).output
