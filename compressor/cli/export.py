"""Command-line commands of this package; ``compressor.cli`` calls ``register``."""
import click


def register(cli):
    """Add this package's commands to the ``compressor`` command group."""
    from compressor.cli import example, own_files_options

    @cli.command("export", epilog=example("compressor export runs/student --out runs/student-onnx"))
    @click.argument("model")
    @click.option("--out", required=True, type=click.Path(file_okay=False), help="Export folder to write.")
    @click.option("--task", default=None, help="Defaults to the task the checkpoint was trained on.")
    @click.option("--opset", type=int, default=17, show_default=True, help="ONNX opset version.")
    @click.option("--optimize/--no-optimize", default=True, show_default=True,
                  help="Fuse the graph with onnxruntime's transformer optimizer.")
    @click.option("--parity/--no-parity", default=True, show_default=True,
                  help="Compare with the PyTorch model on the task's dev split (parity.json).")
    @click.option("--parity-limit", type=int, default=None, help="Check on the first N dev rows only.")
    @click.option("--exporter", type=click.Choice(["auto", "optimum", "torch"]), default="auto",
                  show_default=True, help="optimum, torch (torch.onnx), or auto: optimum for transformers models, else torch.")
    @click.option("--data-dir", envvar="GLUE_DIR", default=None, show_envvar=True,
                  help="Folder in GLUE's layout, or 'embedded', for the parity check.")
    @own_files_options("dev")
    @click.option("--overwrite", is_flag=True, help="Replace a non-empty --out folder.")
    def export_cmd(model, out, task, opset, optimize, parity, parity_limit, exporter, data_dir,
                   dev_file, text_columns, label_column, overwrite):
        """Export MODEL to ONNX: model.onnx, tokenizer, config, manifest.json, parity.json."""
        import os

        from compressor.cli import _user_data
        from compressor.export.onnx import export_onnx

        manifest = export_onnx(model, out, task=task, opset=opset, optimize=optimize, parity=parity,
                               data_dir=data_dir, parity_limit=parity_limit, exporter=exporter,
                               overwrite=overwrite,
                               user_data=_user_data(None, dev_file, text_columns, label_column, recorded=True))
        fusions = (manifest.get("optimization") or {}).get("fusions")
        click.echo(f"exported with {manifest['exporter']} (opset {opset}): {os.path.abspath(out)}")
        if fusions is not None:
            click.echo("fusions: " + (", ".join(f"{k} x{v}" for k, v in fusions.items()) or "none"))
        note = ((manifest.get("optimization") or {}).get("attention") or {}).get("note")
        if note:
            click.echo(f"note: {note}")
        p = manifest.get("parity")
        if p:
            click.echo(f"parity on {p['examples']} dev rows: max |logit diff| {p['max_abs_logit_diff']:.2e}, "
                       f"identical predictions {100 * p['identical_predictions']:.2f}%")
