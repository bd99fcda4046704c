"""What the commands of the methods share: ``KEY=VALUE`` options read as settings, the options of
a command that turns a task checkpoint into another, running such a method and printing its
scores, and the ``--recover`` option. One home, so no method's command borrows another's."""
import os

import click


def key_values(pairs, what):
    """``KEY=VALUE`` options as a mapping; values read as YAML (numbers, true/false, [1, 3]).

    A dotted key is a setting inside a section: ``kd.temperature=2`` with ``kd=1`` is
    ``{kd: {weight: 1, temperature: 2}}``.
    """
    import yaml

    from compressor.core.errors import CompressorError

    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise CompressorError(f"--{what} takes KEY=VALUE, got '{pair}'")
        try:
            value = yaml.safe_load(value) if value.strip() else ""
        except yaml.YAMLError:
            pass
        section, dot, name = key.strip().partition(".")
        if not dot:
            if isinstance(out.get(section), dict):
                out[section]["weight"] = value
            else:
                out[section] = value
            continue
        inner = out.get(section)
        if not isinstance(inner, dict):
            inner = out[section] = {} if inner is None else {"weight": inner}
        inner[name] = value
    return out


def checkpoint_method(what: str):
    """The options of a command that turns a task checkpoint into another (``what`` it does)."""
    from compressor.cli import data_dir_option, model_argument, own_files_options

    def wrap(f):
        for option in reversed([
                model_argument(),
                click.option("--out", required=True, type=click.Path(file_okay=False), help="Folder to write."),
                click.option("--task", default=None, help="Defaults to the model's task."),
                data_dir_option,
                own_files_options("train", "dev"),
                click.option("--train-limit", type=int, default=None, help="Use only the first N training rows."),
                click.option("--dev-limit", type=int, default=None, help="Use only the first N dev rows."),
                click.option("--overwrite", is_flag=True, help="Replace a non-empty --out folder.")]):
            f = option(f)
        return f
    return wrap


def run_method(run, settings: dict, model, out, task, data_dir, train_file, dev_file, text_columns,
               label_column, train_limit, dev_limit, overwrite, made: str) -> dict:
    """Run ``run(model, out, settings, ...)`` (a method's Python call) and print its scores."""
    from compressor.cli import _user_data

    record = run(model, out, settings, task=task, data_dir=data_dir, train_limit=train_limit,
                 dev_limit=dev_limit, overwrite=overwrite,
                 user_data=_user_data(train_file, dev_file, text_columns, label_column, recorded=True))
    metrics = ", ".join(f"{k} {v:.4f}" for k, v in record["metrics"].items())
    before = f"; before {record['score_before']:.2f}" if record.get("score_before") is not None else ""
    click.echo(f"{record['task']} dev: {metrics} (score {record['score']:.2f}{before})")
    if record.get("parameters_before"):
        click.echo(f"parameters {record['parameters']:,} (before {record['parameters_before']:,})")
    click.echo(f"{made}: {os.path.abspath(out)}")
    return record


def recover_settings(pairs) -> dict:
    """``--recover`` pairs; ``losses.NAME=W`` and ``losses.NAME.SETTING=V`` make the losses section."""
    from compressor.cli import in_sections
    from compressor.engine.recovery import RecoverSettings

    plain = [p for p in pairs if not p.startswith("losses.")]
    losses = [p[len("losses."):] for p in pairs if p.startswith("losses.")]
    out = key_values(plain, "recover")
    if losses:
        out["losses"] = key_values(losses, "recover")
    return in_sections(RecoverSettings, out)   # epochs=1 -> train: {epochs: 1}


RECOVER_HELP = ("Recovery training afterwards, repeatable: mode=distill|finetune|none, epochs=1, "
                "lr=5e-5, batch_size=32, layerdrop=0.1, losses.kd=1, losses.hidden=1 [default: "
                "mode=distill, epochs=1].")
