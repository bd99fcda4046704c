"""``compressor lowrank``; ``compressor.cli`` calls ``register``."""
import click


def register(cli):
    """Add this package's commands to the ``compressor`` command group."""
    from compressor.cli import example
    from compressor.cli.methods import key_values
    from compressor.cli.methods import (
        RECOVER_HELP,
        checkpoint_method,
        recover_settings,
        run_method,
    )

    @cli.command(epilog=example("compressor lowrank runs/teacher --set linears=ffn --set energy=0.9 "
                                "--out runs/lowrank"))
    @checkpoint_method("lowrank")
    @click.option("--set", "values", multiple=True, metavar="KEY=VALUE",
                  help="A setting, repeatable: linears=all|attention|ffn|[query,key,value,"
                       "attention_output,ffn_in,ffn_out], layers=[0,1], energy=0.9 (share of squared "
                       "singular values kept), rank=64, ratio=0.25, by=energy|sensitivity, "
                       "tolerance=0.01 (sensitivity: mean KL per Linear), min_rank=1, "
                       "only_if_smaller=true, importance_rows=256, device=cpu, seed=42.")
    @click.option("--recover", "recover", multiple=True, metavar="KEY=VALUE", help=RECOVER_HELP)
    def lowrank(values, recover, **common):
        """Factorise MODEL's Linear layers into two smaller ones each (truncated SVD, rank by
        retained energy, a share, a fixed rank or measured sensitivity), then recover."""
        from compressor.lowrank.stage import lowrank as run

        settings = key_values(values, "set")
        if recover:
            settings["recover"] = recover_settings(recover)
        run_method(run, settings, made="factorised model", **common)
