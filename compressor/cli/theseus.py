"""``compressor theseus``; ``compressor.cli`` calls ``register``."""
import click


def register(cli):
    """Add this package's commands to the ``compressor`` command group."""
    from compressor.cli.methods import key_values
    from compressor.cli.methods import checkpoint_method, run_method

    from compressor.cli import example, in_sections

    @cli.command(epilog=example("compressor theseus runs/teacher --set num_layers=3 --out runs/theseus"))
    @checkpoint_method("compress by module replacing")
    @click.option("--set", "values", multiple=True, metavar="KEY=VALUE",
                  help="A setting, repeatable: num_layers=3, init=last|first|prefix, "
                       "schedule=constant|linear, rate=0.5, k=0, b=0.3, replacing_epochs=3, "
                       "finetune_epochs=1, finetune_lr=0, kd.weight=1, kd.temperature=2, lr=5e-5, "
                       "batch_size=32, max_length=128, eval_every=500, device=cpu, seed=42.")
    def theseus(values, **common):
        """BERT-of-Theseus: replace groups of MODEL's layers by one successor each, then fine-tune those."""
        from compressor.theseus.config import TheseusConfig
        from compressor.theseus.stage import theseus as run

        run_method(run, in_sections(TheseusConfig, key_values(values, "set")), made="compressed model", **common)
