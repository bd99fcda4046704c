"""Command-line commands of this package; ``compressor.cli`` calls ``register``."""
import click

_TARGET_ONLY = {"openvino": ("int8", "calibration_rows", "inference_precision"),
                "triton": ("model_name", "max_batch_size", "preferred_batch_sizes", "max_queue_delay_us",
                           "instances", "triton_threads")}


def register(cli):
    """Add this package's commands to the ``compressor`` command group."""
    from compressor.cli import example, own_files_options
    from compressor.export.targets import formats

    @cli.command("export", epilog=example("compressor export runs/student --out runs/student-onnx",
                                          "compressor export runs/student-onnx --format openvino --int8 --out runs/student-ov",
                                          "compressor export runs/student-onnx --format triton --out runs/triton-repo"))
    @click.argument("model")
    @click.option("--out", required=True, type=click.Path(file_okay=False), help="Export folder to write.")
    @click.option("--format", "format_", type=click.Choice(formats()), default="onnx", show_default=True,
                  help="onnx; openvino (OpenVINO IR, from MODEL's ONNX graph); triton (a Triton model "
                       "repository for the ONNX Runtime backend). MODEL may be a checkpoint or an ONNX export.")
    @click.option("--task", default=None, help="Defaults to the task the checkpoint was trained on.")
    @click.option("--opset", type=int, default=17, show_default=True, help="ONNX opset version.")
    @click.option("--optimize/--no-optimize", default=None,
                  help="Fuse the graph with onnxruntime's transformer optimizer [default: on; off for "
                       "--format openvino, which fuses the graph itself].")
    @click.option("--parity/--no-parity", default=True, show_default=True,
                  help="Compare with the model exported from on the task's dev split (parity.json).")
    @click.option("--parity-limit", type=int, default=None,
                  help="Check on the first N dev rows only [default: all; openvino: 100].")
    @click.option("--exporter", type=click.Choice(["auto", "optimum", "torch"]), default="auto",
                  show_default=True, help="optimum, torch (torch.onnx), or auto: optimum for transformers models, else torch.")
    @click.option("--int8", is_flag=True, help="openvino: NNCF post-training INT8, calibrated on training rows.")
    @click.option("--calibration-rows", type=int, default=300, show_default=True,
                  help="openvino --int8: the first N rows of the training split.")
    @click.option("--inference-precision", type=click.Choice(["f32", "default"]), default="f32", show_default=True,
                  help="openvino: how the CPU computes what is not INT8 (default: OpenVINO's choice, bf16 "
                       "where the CPU has it).")
    @click.option("--model-name", default=None, help="triton: the model's name [default: the --out folder's name].")
    @click.option("--max-batch-size", type=int, default=32, show_default=True, help="triton: max_batch_size.")
    @click.option("--preferred-batch-sizes", default="8,16,32", show_default=True,
                  help="triton: the dynamic batcher's preferred sizes, a comma list.")
    @click.option("--max-queue-delay-us", type=int, default=2000, show_default=True,
                  help="triton: how long the dynamic batcher waits for a fuller batch.")
    @click.option("--instances", type=int, default=1, show_default=True, help="triton: CPU copies of the model.")
    @click.option("--triton-threads", type=int, default=None, help="triton: onnxruntime intra-op threads per copy.")
    @click.option("--data-dir", envvar="GLUE_DIR", default=None, show_envvar=True,
                  help="Folder in GLUE's layout, or 'embedded', for the parity check (and calibration).")
    @own_files_options("train", "dev")
    @click.option("--overwrite", is_flag=True, help="Replace a non-empty --out folder.")
    def export_cmd(model, out, format_, task, opset, optimize, parity, parity_limit, exporter, int8,
                   calibration_rows, inference_precision, model_name, max_batch_size, preferred_batch_sizes,
                   max_queue_delay_us, instances, triton_threads, data_dir, train_file, dev_file,
                   text_columns, label_column, overwrite):
        """Export MODEL: ONNX (model.onnx, tokenizer, config, manifest.json, parity.json), or from that
        graph OpenVINO IR or a Triton model repository."""
        import os

        from compressor.cli import _user_data
        from compressor.core.errors import CompressorError
        from compressor.export.targets import export_model

        given = {"int8": int8, "calibration_rows": calibration_rows != 300,
                 "inference_precision": inference_precision != "f32", "model_name": model_name is not None,
                 "max_batch_size": max_batch_size != 32, "preferred_batch_sizes": preferred_batch_sizes != "8,16,32",
                 "max_queue_delay_us": max_queue_delay_us != 2000, "instances": instances != 1,
                 "triton_threads": triton_threads is not None}
        for target, names in _TARGET_ONLY.items():
            wrong = [n for n in names if given[n] and format_ != target]
            if wrong:
                raise CompressorError(f"--{wrong[0].replace('_', '-')} is an option of --format {target}")
        user_data = _user_data(train_file, dev_file, text_columns, label_column, recorded=True)
        onnx_options = dict(task=task, opset=opset, data_dir=data_dir, exporter=exporter, user_data=user_data)
        if optimize is not None:
            onnx_options["optimize"] = optimize
        if format_ == "onnx":
            onnx_options.update(parity=parity, parity_limit=parity_limit)
            options = {}
        elif format_ == "openvino":
            options = dict(int8=int8, calibration_rows=calibration_rows, inference_precision=inference_precision,
                           parity_rows=(parity_limit or 100) if parity else 0, data_dir=data_dir,
                           user_data=user_data)
        else:
            try:
                sizes = [int(b) for b in preferred_batch_sizes.split(",") if b.strip()]
            except ValueError:
                raise CompressorError(f"--preferred-batch-sizes wants whole numbers, got {preferred_batch_sizes!r}") from None
            options = dict(model_name=model_name, max_batch_size=max_batch_size, preferred_batch_sizes=sizes,
                           max_queue_delay_us=max_queue_delay_us, instances=instances, threads=triton_threads)
        manifest = export_model(model, out, format=format_, overwrite=overwrite, onnx_options=onnx_options, **options)
        if format_ == "triton":
            t = manifest["triton"]
            click.echo(f"Triton model repository (onnxruntime backend): {os.path.abspath(out)} "
                       f"(model {t['model']}, version 1, max batch {t['max_batch_size']})")
            return
        if format_ == "openvino":
            click.echo(f"OpenVINO IR ({manifest['precision']}): {os.path.abspath(out)}")
        else:
            fusions = (manifest.get("optimization") or {}).get("fusions")
            click.echo(f"exported with {manifest['exporter']} (opset {opset}): {os.path.abspath(out)}")
            if fusions is not None:
                click.echo("fusions: " + (", ".join(f"{k} x{v}" for k, v in fusions.items()) or "none"))
            note = ((manifest.get("optimization") or {}).get("attention") or {}).get("note")
            if note:
                click.echo(f"note: {note}")
        p = manifest.get("parity")
        if p:
            against = "the ONNX graph" if format_ == "openvino" else "dev rows"
            line = (f"parity on {p['examples']} dev rows: max |logit diff| {p['max_abs_logit_diff']:.2e}, "
                    f"identical predictions {100 * p['identical_predictions']:.2f}%"
                    if p.get("identical_predictions") is not None else
                    f"parity on {p['examples']} dev rows: max |logit diff| {p['max_abs_logit_diff']:.2e}")
            if format_ == "openvino":
                line += f" (against {against}" + (f", tolerance {p['tolerance']:g})" if p.get("tolerance") else ")")
            click.echo(line)
