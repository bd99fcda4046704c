"""``compressor prune`` (and the options every checkpoint-to-checkpoint method's command
shares: ``share`` and ``theseus`` use them too); ``compressor.cli`` calls ``register``."""
import os

import click

METHODS = ("structured", "layers", "vocab", "magnitude")


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
    from compressor.cli.distill import _settings
    from compressor.engine.recovery import RecoverSettings

    plain = [p for p in pairs if not p.startswith("losses.")]
    losses = [p[len("losses."):] for p in pairs if p.startswith("losses.")]
    out = _settings(plain, "recover")
    if losses:
        out["losses"] = _settings(losses, "recover")
    return in_sections(RecoverSettings, out)   # epochs=1 -> train: {epochs: 1}


RECOVER_HELP = ("Recovery training afterwards, repeatable: mode=distill|finetune|none, epochs=1, "
                "lr=5e-5, batch_size=32, layerdrop=0.1, losses.kd=1, losses.hidden=1 [default: "
                "mode=distill, epochs=1].")


def register(cli):
    """Add this package's commands to the ``compressor`` command group."""
    from compressor.cli.distill import _settings

    from compressor.cli import example

    @cli.command(epilog=example("compressor prune runs/teacher --method structured --set heads=0.5 --set ffn=0.5 "
                                "--out runs/pruned"))
    @checkpoint_method("prune")
    @click.option("--method", type=click.Choice(METHODS), default="structured", show_default=True,
                  help="structured: heads and FFN neurons; layers; vocab: word pieces; "
                       "magnitude: single weights.")
    @click.option("--set", "values", multiple=True, metavar="KEY=VALUE",
                  help="A setting of the method, repeatable: heads=0.5, ffn=0.5, "
                       "head_importance=gradient|magnitude, ffn_importance=taylor|magnitude, "
                       "scope=global|layer, iterations=2 (structured); rule=top|every_other|"
                       "importance|list, drop=3, layers=[1,3] (layers); corpus=[FILE], min_count=1 "
                       "(vocab); sparsity=0.9, schedule=oneshot|gradual (magnitude); "
                       "importance_rows=512, device=cpu, seed=42.")
    @click.option("--recover", "recover", multiple=True, metavar="KEY=VALUE",
                  help=RECOVER_HELP + " vocab: mode=none by default.")
    def prune(method, values, recover, **common):
        """Prune MODEL, a task checkpoint folder (and recover it); writes the smaller model and
        metrics.json to the --out folder."""
        from compressor.prune.stage import prune as run

        settings = {"method": method, **_settings(values, "set")}
        if recover:
            settings["recover"] = recover_settings(recover)
        run_method(run, settings, made="pruned model", **common)
