"""Command-line commands of this package; ``compressor.cli`` calls ``register``."""
import os

import click


def register(cli):
    """Add this package's commands to the ``compressor`` command group."""
    from compressor.cli import (_print_metrics, _relaunched, _train_config, _train_options, _user_data,
                       data_dir_option, example, model_argument, nproc_option, own_files_options)
    from compressor.cli.methods import key_values

    @cli.command(epilog=example("compressor distill runs/teacher --student num_layers=3 --out runs/student",
                                "compressor distill runs/teacher --student kind=config --student hidden_size=312 "
                                "--loss kd=1 --loss hidden=1 --out runs/tinybert",
                                "compressor augment runs/teacher --out runs/augmented && compressor distill "
                                "runs/teacher --augment runs/augmented --intermediate-epochs 4 --loss kd=1 "
                                "--loss hidden=1 --loss attention=1 --out runs/student"))
    @model_argument("--teacher", name="teacher")
    @click.option("--out", required=True, type=click.Path(file_okay=False), help="Student folder to write.")
    @click.option("--task", default=None, help="Defaults to the teacher's task.")
    @data_dir_option
    @own_files_options("train", "dev")
    @click.option("--student", "student", multiple=True, metavar="KEY=VALUE",
                  help="Student setting, repeatable: kind=layers|config|pretrained|bilstm|cnn, "
                       "num_layers=3, pick=every|first|last, layers=[2,4,6], hidden_size=312, "
                       "heads=12, ffn_size=1200, model=PATH, embedding_dim=64.")
    @click.option("--loss", "loss", multiple=True, metavar="NAME=WEIGHT",
                  help="A loss and its weight, or NAME.SETTING=VALUE, repeatable: kd=1, "
                       "kd.temperature=2, task=0.5, logits_mse=1, hidden=1, "
                       "hidden.mapping=uniform|skip|last|[2,4,6], embedding=1, attention=1, "
                       "attention.measure=mse|kl, hidden.layers=[3] (those student layers only), "
                       "cosine=1, minilm=1 [default: kd=1].")
    @click.option("--intermediate-epochs", type=float, default=0.0, show_default=True,
                  help="TinyBERT's two stages: epochs of layer losses alone before the prediction stage.")
    @click.option("--intermediate-lr", type=float, default=0.0, help="Learning rate of that stage [default: --lr].")
    @click.option("--progressive", is_flag=True,
                  help="MobileBERT: that first stage layer by layer, bottom up, the layers below fixed.")
    @click.option("--general-epochs", type=float, default=0.0, show_default=True,
                  help="General distillation first: epochs of layer losses over unlabelled text (the "
                       "training rows' and every other GLUE training file's sentences under --data-dir, "
                       "the task's dev sentences left out).")
    @click.option("--general-lr", type=float, default=0.0,
                  help="Learning rate of that stage [default: --intermediate-lr, else --lr].")
    @click.option("--general-rows", type=int, default=0,
                  help="At most N sentences of that text, a seeded sample [default: all; --train-limit if given].")
    @click.option("--general-teacher", default="teacher", show_default=True,
                  help="The general stage's teacher: 'teacher' (the task teacher) or a folder: the "
                       "pre-trained encoder the teacher was fine-tuned from, as TinyBERT and MiniLM do.")
    @click.option("--general-cache", default="",
                  help="A folder that keeps the general stage; a later run with the same student, settings, "
                       "general teacher and text (every task's dev sentences left out) loads it, for any task.")
    @click.option("--augment", "augment", default="", type=click.Path(file_okay=False),
                  help="A folder that `compressor augment` wrote for this teacher: its augmented rows "
                       "join the training rows in every stage (soft targets only).")
    @click.option("--no-cache", is_flag=True, help="Run the teacher on every batch instead of caching its logits.")
    @click.option("--train-limit", type=int, default=None, help="Use only the first N training rows.")
    @click.option("--dev-limit", type=int, default=None, help="Use only the first N dev rows.")
    @click.option("--overwrite", is_flag=True, help="Replace a non-empty --out folder.")
    @nproc_option
    @_train_options
    def distill(teacher, out, task, data_dir, train_file, dev_file, text_columns, label_column,
                student, loss, intermediate_epochs, intermediate_lr, progressive,
                general_epochs, general_lr, general_rows, general_teacher, general_cache, augment, no_cache, train_limit,
                dev_limit, overwrite, nproc, **kwargs):
        """Distil MODEL, the teacher (a task checkpoint folder), into a smaller student; writes the
        student and metrics.json to the --out folder."""
        from compressor.engine.distiller import DistillConfig, distill as run

        if _relaunched(nproc, kwargs["device"]):
            return

        student_values = key_values(student, "student") or {"kind": "layers", "num_layers": 3}
        config = DistillConfig(train=_train_config(kwargs), student=student_values,
                               losses=key_values(loss, "loss") or {"kd": 1},
                               intermediate_epochs=intermediate_epochs,
                               intermediate_lr=intermediate_lr, progressive=progressive,
                               general_epochs=general_epochs, general_lr=general_lr,
                               general_rows=general_rows, general_teacher=general_teacher,
                               general_cache=general_cache, cache_teacher_logits=not no_cache,
                               **({"augment": augment} if augment else {}))
        record = run(teacher, out, task=task, config=config, data_dir=data_dir,
                     train_limit=train_limit, dev_limit=dev_limit, overwrite=overwrite,
                     user_data=_user_data(train_file, dev_file, text_columns, label_column, recorded=True))
        _print_metrics(record)
        retention = "n/a (teacher scores 0)" if record["retention"] is None else f"{100 * record['retention']:.1f}%"
        click.echo(f"teacher score {record['teacher_score']:.2f}, retention "
                   f"{retention}, parameters {record['parameters']:,} "
                   f"(teacher {record['teacher_parameters']:,})")
        click.echo(f"student: {os.path.abspath(out)}")
