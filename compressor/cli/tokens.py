"""``compressor token-prune``; ``compressor.cli`` calls ``register``."""
import click


def register(cli):
    """Add this package's commands to the ``compressor`` command group."""
    from compressor.cli import example
    from compressor.cli.methods import key_values
    from compressor.cli.methods import checkpoint_method, run_method

    @cli.command("token-prune", epilog=example(
        "compressor token-prune runs/student --set threshold=0.01 --set kept_weight=0.1 "
        "--train epochs=1 --out runs/tokens"))
    @checkpoint_method("token-prune")
    @click.option("--set", "values", multiple=True, metavar="KEY=VALUE",
                  help="A setting, repeatable: by=threshold|ratio, threshold=0.01 (or [t1,t2,...] one "
                       "per layer but the last), keep=0.7 (by ratio; or a list), learn=true (LTP's "
                       "soft phase), temperature=0.001, kept_weight=0.1, threshold_lr=0.01, "
                       "hard_epochs=1 (0: no tuning), kd_weight=1, kd_temperature=2, "
                       "teacher=input|FOLDER; search_on=holdout (with learn=false: choose among "
                       "candidates=[0.9,0.7,[0.6,0.6,0.6,1,1]] on the teacher's held-out rows the "
                       "fewest tokens within max_drop=1 points).")
    @click.option("--train", "train", multiple=True, metavar="KEY=VALUE",
                  help="Training settings of the soft phase (and the hard phase's others), repeatable: "
                       "epochs=1, lr=5e-5, batch_size=32, max_length=128, device=cpu, seed=42.")
    def token_prune(values, train, **common):
        """Make MODEL drop tokens between layers by the attention they receive (learned
        thresholds, LTP, or fixed keep ratios); [CLS], separators and both texts of a pair stay.
        Export the folder to get one ONNX graph that drops them at run time."""
        from compressor.tokens.stage import token_prune as run

        settings = key_values(values, "set")
        if train:
            settings["train"] = key_values(train, "train")
        record = run_method(run, settings, made="token-pruned model", **common)
        search = record.get("search")
        if search:
            chosen = search["chosen"] if search["chosen"] is not None else "none (nothing dropped)"
            click.echo(f"searched on {search['search_rows']} held-out rows (unpruned {search['unpruned_score']:.2f}, "
                       f"max drop {search['max_drop']:g}): chose {chosen}, values {search['values']}")
