"""``compressor augment``; ``compressor.cli`` calls ``register``."""
import os

import click


def register(cli):
    """Add this package's commands to the ``compressor`` command group."""
    from compressor.cli import data_dir_option, device_option, example, model_argument, own_files_options
    from compressor.cli.methods import key_values

    @cli.command(epilog=example("compressor augment runs/teacher --set copies=20 --out runs/augmented",
                                "compressor run recipes/mpnet/tinybert-6l-augmented.yaml --task cola "
                                "--teacher runs/teacher --out runs/tinybert-6l-cola"))
    @model_argument()
    @click.option("--out", required=True, type=click.Path(file_okay=False),
                  help="Folder for augmented.jsonl and augment.json; run again into it and unchanged rows are reused.")
    @click.option("--task", default=None, help="Defaults to the model's task.")
    @data_dir_option
    @own_files_options("train")
    @click.option("--train-limit", type=int, default=None,
                  help="Augment only the first N training rows (give the distillation the same limit).")
    @click.option("--set", "values", multiple=True, metavar="KEY=VALUE",
                  help="A setting, repeatable: copies=20 (N), replace_rate=0.4 (p), candidates=15 (K), "
                       "source=auto|mlm|embedding, mlm_model=FOLDER, max_length=128, batch_size=256, "
                       "seed=42, precision=fp32|bf16|fp16, cache=FOLDER.")
    @device_option
    @click.option("--overwrite", is_flag=True, help="Write into an --out folder that holds other files.")
    def augment(model, out, task, data_dir, train_file, text_columns, label_column, train_limit, values,
                device, overwrite):
        """TinyBERT's task data augmentation: N copies of each training row of MODEL's task, words
        replaced by a masked LM's guesses or the nearest words of MODEL's embedding table, labelled
        by MODEL (its logits; no labels). A distill stage (or DistillConfig) with augment: FOLDER trains on them."""
        from compressor.augment.api import augment as run
        from compressor.cli import _user_data

        record = run(model, out, {**key_values(values, "set"), "device": device}, task=task,
                     data_dir=data_dir, train_limit=train_limit, overwrite=overwrite,
                     user_data=_user_data(train_file, None, text_columns, label_column, recorded=True),
                     log=lambda msg: click.echo(msg, err=True))
        click.echo(f"{record['rows']} augmented rows from {record['augmented_from']} of {record['source_rows']} "
                   f"training rows ({100 * record['replaced_share']:.1f}% of words replaced, candidates "
                   f"from {record['candidates_from']}){'; reused' if record.get('reused') else ''}")
        click.echo(f"augmented rows: {os.path.abspath(out)}")
