"""``compressor share``; ``compressor.cli`` calls ``register``."""
import click


def register(cli):
    """Add this package's commands to the ``compressor`` command group."""
    from compressor.cli.methods import key_values
    from compressor.cli.methods import RECOVER_HELP, checkpoint_method, recover_settings, run_method

    from compressor.cli import example

    @cli.command(epilog=example("compressor share runs/teacher --set share=all --set group=2 --out runs/shared"))
    @checkpoint_method("share")
    @click.option("--set", "values", multiple=True, metavar="KEY=VALUE",
                  help="A setting, repeatable: share=all|attention|ffn|none, group=2 (layers per "
                       "group; 0: the whole stack), init=mean|index, index=0, embedding_rank=128, "
                       "adapter_rank=8, device=cpu, seed=42.")
    @click.option("--recover", "recover", multiple=True, metavar="KEY=VALUE", help=RECOVER_HELP)
    def share(values, recover, **common):
        """Share MODEL's layer weights across layers (ALBERT) and/or factorise its word embedding,
        then recover."""
        from compressor.share.stage import share as run

        settings = key_values(values, "set")
        if recover:
            settings["recover"] = recover_settings(recover)
        run_method(run, settings, made="shared model", **common)
