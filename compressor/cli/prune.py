"""``compressor prune``; ``compressor.cli`` calls ``register``."""

import click

METHODS = ("structured", "layers", "vocab", "magnitude")


def register(cli):
    """Add this package's commands to the ``compressor`` command group."""
    from compressor.cli import example
    from compressor.cli.methods import RECOVER_HELP, checkpoint_method, key_values, recover_settings, run_method

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
        from compressor.prune.api import prune as run

        settings = {"method": method, **key_values(values, "set")}
        if recover:
            settings["recover"] = recover_settings(recover)
        run_method(run, settings, made="pruned model", **common)
