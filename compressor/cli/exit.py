"""``compressor early-exit`` and ``compressor early-exit-export``; ``compressor.cli`` calls ``register``."""
import os

import click


def register(cli):
    """Add this package's commands to the ``compressor`` command group."""
    from compressor.cli.methods import key_values
    from compressor.cli import example, in_sections
    from compressor.cli.methods import checkpoint_method, run_method

    @cli.command("early-exit", epilog=example("compressor early-exit runs/teacher --set rule=entropy --out runs/exits"))
    @checkpoint_method("add exits to")
    @click.option("--set", "values", multiple=True, metavar="KEY=VALUE",
                  help="A setting, repeatable: training=two_stage|self_distill|joint, "
                       "rule=auto|entropy|patience|max_prob, layers=[1,2,3], calibrate.rows=2000, "
                       "calibrate.split=train|holdout, calibrate.target=0.99, "
                       "calibrate.measure=score|agreement, epochs=2, "
                       "lr=5e-4, temperature=2, weighting=linear|uniform, cache=true, "
                       "batch_size=32, max_length=128, device=cpu, seed=42.")
    def early_exit(values, **common):
        """Exit heads after each of MODEL's layers, trained and calibrated on held-out training rows."""
        from compressor.exit.configs import EarlyExitConfig
        from compressor.exit.stage import early_exit as run

        record = run_method(run, in_sections(EarlyExitConfig, key_values(values, "set")),
                            made="early-exit model", **common)
        click.echo(f"rule {record['rule']} threshold {record['threshold']}: mean exit layer "
                   f"{record['dev']['mean_exit_layer']} of {record['layers']}, FLOPs saved "
                   f"{record['dev']['flops_saved']:.1%}")

    @cli.command("early-exit-export", epilog=example("compressor early-exit-export runs/exits --out runs/exits-onnx"))
    @click.argument("model")
    @click.option("--out", required=True, type=click.Path(file_okay=False), help="Folder to write.")
    @click.option("--int8/--no-int8", default=True, show_default=True, help="Dynamic INT8 segments.")
    @click.option("--preset", default="auto", show_default=True,
                  help="INT8 hardware preset: avx2, avx512_vnni, amx, arm64 or auto (from the CPU flags).")
    @click.option("--fp32-unit", "fp32_units", multiple=True, metavar="UNIT",
                  help="Keep this unit FP32 in the INT8 segments, repeatable: layer.7 (the eighth "
                       "encoder layer, as a mixed-precision search's sensitivity.md names it) or embeddings.")
    @click.option("--data-dir", envvar="GLUE_DIR", default=None, show_envvar=True,
                  help="Folder in GLUE's layout, or 'embedded', for the dev score.")
    @click.option("--dev-limit", type=int, default=None, help="Score only the first N dev rows.")
    @click.option("--overwrite", is_flag=True, help="Replace a non-empty --out folder.")
    def early_exit_export(model, out, int8, preset, fp32_units, data_dir, dev_limit, overwrite):
        """Export an early-exit model as chained ONNX segments (fused, INT8) and score them."""
        from compressor.exit.stage import export_exits

        manifest = export_exits(model, out, {"int8": int8, "preset": preset, "fp32_units": list(fp32_units)},
                                data_dir=data_dir, dev_limit=dev_limit, overwrite=overwrite)
        dev = manifest["dev"]
        click.echo(f"{manifest['task']} dev: score {dev['score']:.2f}, mean exit layer "
                   f"{dev['mean_exit_layer']} of {manifest['total_layers']}; parity "
                   f"{manifest.get('parity', {}).get('identical_predictions')}")
        click.echo(f"segments: {os.path.abspath(out)}")

