"""The ``compressor`` command: a thin layer over the Python API."""
from __future__ import annotations

import dataclasses
import functools
import os
import sys
import typing
import warnings

import click

from compressor.core.children import follow_parent
from compressor.core.errors import CompressorError, terminate_cleanly

# Dependency noise a user cannot act on, silenced before anything imports torch (and only this):
# torch's pytree deprecations that transformers/torchao trigger (FutureWarning); torchao's
# "Failed to load ..._C_mxfp8...so" lines go through its logger, set to ERROR in compressor/__init__.
_PYTREE_WARNINGS = ("`torch.utils._pytree._register_pytree_node` is deprecated",
                    "`treespec.children_specs` is deprecated", "`isinstance(treespec, LeafSpec)` is deprecated")
for _message in _PYTREE_WARNINGS:
    warnings.filterwarnings("ignore", message=__import__("re").escape(_message), category=FutureWarning)


def _quiet_children() -> None:
    """The same filters for the processes a command starts (bench variants, torchrun ranks)."""
    # PYTHONWARNINGS is a comma list whose message field matches the start of a message
    extra = ",".join(f"ignore:{m.split(',')[0]}:FutureWarning" for m in _PYTREE_WARNINGS)
    current = os.environ.get("PYTHONWARNINGS")
    if extra not in (current or ""):
        os.environ["PYTHONWARNINGS"] = f"{current},{extra}" if current else extra


def example(*lines: str) -> str:
    """A command's ``--help`` epilog: one or more example command lines, kept as written."""
    return "\b\nExample:\n" + "\n".join(f"  {line}" for line in lines)


def model_argument(alias: str = "--model", name: str = "model"):
    """MODEL, the command's first positional argument (a checkpoint folder, alias or hub id);
    ``alias`` (the option older scripts pass) stays, hidden, with a one-line deprecation note."""
    dest = f"deprecated_{name}"

    def wrap(fn):
        @functools.wraps(fn)
        def call(*args, **kwargs):
            given, old = kwargs.pop(name), kwargs.pop(dest)
            ctx = click.get_current_context()
            if old is not None:
                if given is not None and given != old:
                    raise click.UsageError(f"give the model once: MODEL or {alias}, not both", ctx=ctx)
                click.echo(f"note: {alias} is deprecated: give the model first "
                           f"({ctx.command_path} MODEL ...)", err=True)
                given = old
            if given is None:
                raise click.UsageError("Missing argument 'MODEL'.", ctx=ctx)
            kwargs[name] = given
            return fn(*args, **kwargs)

        call = click.option(alias, dest, hidden=True, default=None,
                            help="Deprecated: give the model as the first argument (MODEL).")(call)
        return click.argument(name, required=False, metavar="MODEL")(call)
    return wrap


class ThreadCounts(click.ParamType):
    """``--threads``, one type everywhere: CPU thread counts (intra-op threads of PyTorch and
    onnxruntime) as a comma list, ``1,2,4``; a command that takes one count takes a list of one."""

    name = "N[,N...]"

    def __init__(self, several: bool = True):
        self.several = several

    def convert(self, value, param, ctx):
        if isinstance(value, list):
            return value
        try:
            counts = [int(v) for v in str(value).split(",") if v.strip()]
        except ValueError:
            self.fail(f"expected comma-separated thread counts, e.g. 1,2,4; got {value!r}", param, ctx)
        if not counts or min(counts) < 1:
            self.fail(f"thread counts are whole numbers from 1, got {value!r}", param, ctx)
        if not self.several and len(counts) > 1:
            self.fail(f"this command takes one thread count, got {value!r}", param, ctx)
        return counts


def threads_option(help: str, several: bool = True, default=None):
    """``--threads``: the same type and meaning in every command (see :class:`ThreadCounts`)."""
    return click.option("--threads", type=ThreadCounts(several), default=default,
                        show_default=default is not None, help=help)


def out_file(out, name: str):
    """``--out`` is a folder and ``name`` the file the command writes inside it; a path ending
    in .json (the old form, a file) still works, with a note."""
    if out is None:
        return None
    if out.endswith(".json") and not os.path.isdir(out):
        click.echo(f"note: --out takes a folder now ({name} is written inside it); "
                   f"writing {out} as before", err=True)
        return out
    if os.path.exists(out) and not os.path.isdir(out):
        from compressor.core.errors import CompressorError

        raise CompressorError(f"--out {out} is a file; --out takes a folder ({name} is written inside it)")
    return os.path.join(out, name)   # the folder is made when the file is written: nothing on failure


device_option = click.option(
    "--device", default="auto", show_default=True,
    help="cpu, cuda, cuda:N or auto (CUDA when present).")


TRAIN_HELP = {
    "epochs": "Passes over the training rows (fractions allowed).",
    "lr": "Peak learning rate (AdamW, linear warmup then decay).",
    "batch_size": "Training batch size (the global one with --nproc).",
    "max_length": "Longest input in tokens; longer ones are cut.",
    "seed": "Random seed (initialisation, shuffling, sampled rows).",
    "warmup": "Share of the steps spent warming up the learning rate, in [0, 1).",
    "weight_decay": "AdamW weight decay.",
    "grad_accum": "Batches whose gradients add up before each optimiser step.",
    "max_grad_norm": "Clip the gradient norm to this (0: no clipping).",
    "eval_every": "Optimiser steps between dev evaluations (0: once per epoch).",
    "max_steps": "Stop after this many optimiser steps (0: no limit).",
    "device": "cpu, cuda, cuda:N or auto (CUDA when present).",
    "precision": "fp32, bf16 or fp16 (mixed precision; fp16 needs CUDA).",
    "report_to": "Log training to a tracker: none, tensorboard, mlflow or wandb.",
    "group_by_length": "Shuffled batches of rows of nearly one length (less padding).",
}


def _train_options(fn):
    """One option per TrainConfig field, so the CLI and recipes take the same settings."""
    from compressor.engine.train_config import TrainConfig

    hints = typing.get_type_hints(TrainConfig)
    for f in reversed(dataclasses.fields(TrainConfig)):
        flag = "--" + f.name.replace("_", "-")
        kind = {"is_flag": True} if hints[f.name] is bool else {"type": hints[f.name]}
        fn = click.option(flag, f.name, **kind, default=f.default, show_default=True,
                          help=TRAIN_HELP.get(f.name, f.name.replace("_", " ").capitalize() + "."))(fn)
    return fn


def _train_config(kwargs):
    from compressor.engine.train_config import TrainConfig

    names = [f.name for f in dataclasses.fields(TrainConfig)]
    return TrainConfig(**{k: kwargs.pop(k) for k in names})


def in_sections(cls, settings: dict) -> dict:
    """``settings`` typed flat on the command line (``--set lr=1e-4``, ``--epochs 2``) with the keys
    of ``cls``'s training section moved into it (``{train: {lr: 1e-4}}``): the options stay flat
    for users, the config composes its ``train`` section."""
    from compressor.core.settings import SettingsError, lift_flat_keys

    settings, _, problems = lift_flat_keys(cls, settings)
    if problems:   # --set lr=... beside --set train.lr=...
        raise SettingsError(problems)
    return settings


nproc_option = click.option(
    "--nproc", type=int, default=1, show_default=True,
    help="Train data-parallel in N processes on this host (one GPU each, or CPUs through gloo): "
         "the command runs again under torchrun; the global batch stays --batch-size.")


def _relaunched(nproc: int, device) -> bool:
    """With ``--nproc N`` (N > 1) run this same command in N processes; True once it has."""
    if nproc == 1:
        return False
    from compressor.core.distributed import launch

    root = click.get_current_context().find_root()
    argv = list((root.obj or {}).get("argv") or sys.argv[1:])
    argv = [a for i, a in enumerate(argv)   # drop --nproc N / --nproc=N
            if a != "--nproc" and not a.startswith("--nproc=") and (i == 0 or argv[i - 1] != "--nproc")]
    code = launch(nproc, argv, device)
    if code:
        sys.exit(code)
    return True


data_dir_option = click.option(
    "--data-dir", envvar="GLUE_DIR", default=None, show_envvar=True,
    help="Folder in GLUE's layout (SST-2/train.tsv ...), or 'embedded' for the packaged SST-2 slice.")


class CompressorGroup(click.Group):
    """The ``compressor`` group: called as click's standalone ``cli()`` (a test's CliRunner, a
    script), it reports errors as :func:`main` does: one ``error: ...`` line, never click's
    ``Error:`` block."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        main(args)


@click.group(cls=CompressorGroup, context_settings={"help_option_names": ["-h", "--help"]},
             epilog=example("compressor finetune minilm-l6 --task sst2 --out runs/teacher",
                            "compressor COMMAND --help"))
@click.version_option(package_name="compressor")
def cli():
    """Compress transformer encoders: fine-tune, distil, prune, quantise, export, benchmark."""


text_column_option = click.option(
    "--text-column", "text_columns", multiple=True,
    help="Column holding the text in your own file (give it twice for sentence pairs).")


def own_files_options(*splits: str):
    """``--train-file``/``--dev-file`` (those of ``splits``), ``--text-column`` and ``--label-column``
    for a command that works on a model: what its ``compressor.json`` records is the default."""
    what = {"train": "training", "dev": "dev"}

    def wrap(fn):
        options = [click.option(f"--{s}-file", default=None, type=click.Path(dir_okay=False),
                                help=f"Your own labelled TSV/CSV/JSONL {what[s]} file [default: the one "
                                     "a model trained on your files records]") for s in splits]
        options += [text_column_option, click.option(
            "--label-column", default=None,
            help="Label column of your own files [default: the recorded one, else label].")]
        for option in reversed(options):
            fn = option(fn)
        return fn
    return wrap



@cli.command(epilog=example("compressor finetune minilm-l6 --task sst2 --out runs/teacher",
                            "compressor finetune minilm-l6 --train-file train.csv --dev-file dev.csv "
                            "--text-column review --label-column sentiment --out runs/reviews"))
@model_argument()
@click.option("--task", default=None,
              help="GLUE task: sst2, mrpc, rte, cola, stsb, wnli, ... (with --train-file: a name for yours).")
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Checkpoint folder to write.")
@data_dir_option
@click.option("--train-file", default=None, type=click.Path(dir_okay=False),
              help="Your own labelled TSV/CSV/JSONL training file, instead of a GLUE task.")
@click.option("--dev-file", default=None, type=click.Path(dir_okay=False),
              help="Your own labelled dev file (scored during training).")
@text_column_option
@click.option("--label-column", default="label", show_default=True, help="Label column of your own files.")
@click.option("--train-limit", type=int, default=None, help="Use only the first N training rows.")
@click.option("--dev-limit", type=int, default=None, help="Use only the first N dev rows.")
@click.option("--holdout", type=int, default=0, show_default=True,
              help="Leave N training rows (drawn with --seed) out of training and record them in the "
                   "checkpoint: later searches (quantize --search-on holdout) and recipes use them as "
                   "rows no model learned from.")
@click.option("--overwrite", is_flag=True, help="Replace a non-empty --out folder.")
@nproc_option
@_train_options
def finetune(model, task, out, data_dir, train_file, dev_file, text_columns, label_column,
             train_limit, dev_limit, holdout, overwrite, nproc, **kwargs):
    """Fine-tune MODEL (a checkpoint folder, alias such as minilm-l6, or hub id) on a GLUE task or
    your own files; writes the checkpoint and metrics.json to the --out folder."""
    from compressor.engine.train import finetune as run

    if _relaunched(nproc, kwargs["device"]):
        return

    user_data = _user_data(train_file, dev_file, text_columns, label_column)
    record = run(model, task, out, data_dir=data_dir, train_limit=train_limit,
                 dev_limit=dev_limit, config=_train_config(kwargs), overwrite=overwrite,
                 user_data=user_data, holdout=holdout)
    _print_metrics(record)
    click.echo(f"checkpoint: {os.path.abspath(out)}")


@cli.command("eval", epilog=example("compressor eval runs/teacher --split dev --out runs/teacher-eval"))
@click.argument("model")
@click.option("--task", default=None, help="Defaults to the task the checkpoint was trained on.")
@click.option("--split", default="dev", show_default=True, help="The split to score, e.g. dev or train.")
@data_dir_option
@click.option("--limit", type=int, default=None, help="Score only the first N rows.")
@click.option("--batch-size", type=int, default=64, show_default=True, help="Rows per forward pass.")
@click.option("--max-length", type=int, default=None,
              help="Longest input in tokens [default: the length the model was trained with].")
@device_option
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="Folder for the record, OUT/eval.json [default: MODEL/eval-TASK-SPLIT.json when "
                   "MODEL is a folder].")
@click.option("--input", "input_", default=None, type=click.Path(dir_okay=False),
              help="Score on your own labelled TSV/CSV/JSONL file instead of the split (a GLUE task's, "
                   "or for a model trained on your files, the file it records).")
@text_column_option
@click.option("--label-column", default=None,
              help="Label column of --input [default: the one the model was trained on, else label].")
def eval_(model, task, split, data_dir, limit, batch_size, max_length, device, out, input_,
          text_columns, label_column):
    """Score MODEL on a task split (or your own labelled file) and write the metrics."""
    from compressor.core.models import read_meta, resolve_model
    from compressor.engine.scoring import evaluate

    out = out_file(out, "eval.json")
    if out is None:
        path = resolve_model(model)
        name = task or (read_meta(path).get("task") if os.path.isdir(path) else None)
        if os.path.isdir(path) and os.access(path, os.W_OK) and name:
            out = os.path.join(path, f"eval-{name}-{'user' if input_ else split}.json")
    record = evaluate(model, task=task, split=split, data_dir=data_dir, limit=limit,
                      batch_size=batch_size, max_length=max_length, device=device, out=out,
                      input=input_, text_columns=text_columns, label_column=label_column)
    _print_metrics(record)
    if out:
        click.echo(f"written: {os.path.abspath(out)}")


@cli.command(epilog=example("compressor predict runs/teacher --input SST-2/test.tsv --out runs/predictions",
                            "compressor predict runs/teacher-onnx --onnx --input reviews.csv "
                            "--text-column review --out runs/predictions"))
@click.argument("model")
@click.option("--input", "input_", required=True, type=click.Path(dir_okay=False),
              help="The rows to label: a GLUE test split or your own TSV/CSV/JSONL file.")
@click.option("--out", default=None, type=click.Path(file_okay=False),
              help="Folder to write OUT/predictions.tsv in.")
@click.option("--output", default=None, type=click.Path(dir_okay=False), hidden=True,
              help="Deprecated: the predictions file itself; use --out FOLDER.")
@click.option("--task", default=None, help="Defaults to the task the checkpoint was trained on.")
@text_column_option
@click.option("--batch-size", type=int, default=64, show_default=True, help="Rows per forward pass.")
@click.option("--max-length", type=int, default=None,
              help="Longest input in tokens [default: the length the model was trained with].")
@device_option
@click.option("--onnx", is_flag=True,
              help="MODEL is an ONNX export folder (compressor export): run it with onnxruntime, no torch "
                   "(an OpenVINO folder: on OpenVINO).")
@click.option("--probabilities", is_flag=True,
              help="Also write each class's probability (columns p_LABEL), after the predicted label.")
def predict(model, input_, out, output, task, text_columns, batch_size, max_length, device, onnx, probabilities):
    """Label every row of a file (a GLUE test split, or your own TSV/CSV/JSONL) with the task's
    label names (SST-2: negative/positive); a row with no text gets an empty prediction."""
    if output is not None:   # the old form, a file: hidden, still taken
        if out is not None:
            raise click.UsageError("give --out FOLDER (or the deprecated --output FILE), not both",
                                   ctx=click.get_current_context())
    elif out is None:
        raise click.UsageError("Missing option '--out'.", ctx=click.get_current_context())
    else:
        os.makedirs(out, exist_ok=True)
        output = os.path.join(out, "predictions.tsv")
    if onnx:
        from compressor.export.onnx import predict_file

        result = predict_file(model, input_, output, text_columns=text_columns, probabilities=probabilities)
    else:
        from compressor.engine.scoring import predict as run

        result = run(model, input_, output, task=task, text_columns=text_columns, batch_size=batch_size,
                     max_length=max_length, device=device, probabilities=probabilities)
    empty = result.get("empty_rows") or []
    click.echo(f"{result['rows'] - len(empty)} rows labelled: {result['output']}")
    if empty:
        shown = ", ".join(empty[:10]) + (", ..." if len(empty) > 10 else "")
        click.echo(f"{len(empty)} row(s) with no text left unlabelled (empty prediction), index {shown}")


@cli.command(epilog=example("compressor run recipes/teacher-sst2.yaml --out runs/sst2"))
@click.argument("recipe", type=click.Path(dir_okay=False))
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Run folder (resumable).")
@data_dir_option
@click.option("--device", default=None,
              help="cpu, cuda, cuda:N or auto; overrides the recipe's device [default: the recipe's, auto].")
@click.option("--task", default=None, help="Overrides the recipe's task (one recipe, every GLUE task).")
@click.option("--teacher", default=None,
              help="Overrides the recipe's teacher with a task checkpoint (no fine-tuning).")
@nproc_option
def run(recipe, out, data_dir, device, task, teacher, nproc):
    """Run a recipe; re-running resumes from the first unfinished stage."""
    if not _relaunched(nproc, device):
        _run_and_print(recipe, out, data_dir, device, task=task, teacher=teacher)


@cli.command(epilog=example("compressor demo --out runs/demo"))
@click.option("--out", default="runs/demo", show_default=True, type=click.Path(file_okay=False),
              help="Run folder (resumable).")
@click.option("--data-dir", default="embedded", show_default=True,
              help="Where the SST-2 data comes from; the default is the slice inside the package.")
@click.option("--device", default=None,
              help="cpu, cuda, cuda:N or auto; overrides the recipe's device [default: the recipe's, auto].")
def demo(out, data_dir, device):
    """Run the default recipe on MiniLM-L6 and a small SST-2 slice."""
    from compressor.recipe.demo import demo_recipe_path

    _run_and_print(demo_recipe_path(), out, data_dir, device)


def _run_and_print(recipe, out, data_dir, device, task=None, teacher=None):
    from compressor.recipe import run_recipe

    manifest = run_recipe(recipe, out, data_dir=data_dir, device=device, task=task, teacher=teacher)
    for s in manifest["stages"]:
        score = f"{s['score']:.2f}" if s.get("score") is not None else "-"
        params = f"{s['parameters']:,}" if s.get("parameters") else "-"
        click.echo(f"{s['dir']:<24} score {score:>6}  parameters {params}")
    click.echo(f"report: {manifest['report']}")


@cli.group(epilog=example("compressor recipe validate recipes/teacher-sst2.yaml", "compressor recipe stages"))
def recipe():
    """Check recipes and list the stages they can use."""


@recipe.command("validate", epilog=example("compressor recipe validate recipes/teacher-sst2.yaml"))
@click.argument("path", type=click.Path(dir_okay=False))
def recipe_validate(path):
    """Report every problem in a recipe, each with its line."""
    from compressor.recipe import validate_recipe

    if not os.path.isfile(path):
        raise CompressorError(f"recipe not found: {path}")
    notes: list = []
    problems = validate_recipe(path, notes)
    if problems:
        for p in problems:
            click.echo(p, err=True)
        sys.exit(1)
    for line in notes:   # deprecated forms it still takes
        click.echo(f"note: {line}", err=True)
    click.echo(f"{path}: ok")


@recipe.command("stages", epilog=example("compressor recipe stages"))
def recipe_stages():
    """List the registered stages and their settings."""
    from compressor.recipe import all_stages
    from compressor.core.settings import describe

    for name, st in sorted(all_stages().items()):
        click.echo(f"{name:<12} {st.summary}")
        for line in describe(st.config_cls):
            click.echo(f"{'':<12} {line}")


@cli.command(epilog=example("compressor tasks"))
def tasks():
    """List the tasks, their metrics and labels."""
    from compressor.core.data import TASKS

    for t in TASKS.values():
        labels = ", ".join(t.labels) if t.labels else "regression"
        click.echo(f"{t.name:<8} {t.folder:<6} {'+'.join(t.metrics):<18} {labels}")


def _user_data(train_file, dev_file, text_columns, label_column, recorded: bool = False):
    """The user's files given as options; ``recorded``: for a command on a model, whose
    ``compressor.json`` may record files and columns that fill in what is left out."""
    from compressor.core.data import UserData

    if not (train_file or dev_file or (recorded and text_columns)):
        return None
    if not text_columns and not recorded:
        raise CompressorError("your own files need --text-column (twice for sentence pairs)")
    return UserData(train_file, dev_file, tuple(text_columns), label_column)


def _print_metrics(record):
    metrics = ", ".join(f"{k} {v:.4f}" for k, v in record["metrics"].items())
    click.echo(f"{record['task']} {record['split']}: {metrics} "
               f"({record['examples']} examples, score {record['score']:.2f})")


# Each method's package adds its own commands: a module here defines ``register(cli)``.
_COMMAND_MODULES = ("compressor.cli.distill", "compressor.cli.prune", "compressor.cli.share",
                    "compressor.cli.theseus", "compressor.cli.quantize",
                    "compressor.cli.export", "compressor.cli.bench", "compressor.cli.exit",
                    "compressor.cli.augment", "compressor.cli.lowrank", "compressor.cli.serve",
                    "compressor.cli.tokens", "compressor.cli.auto")


def _add_commands():
    import importlib

    for name in _COMMAND_MODULES:
        importlib.import_module(name).register(cli)


_add_commands()


def main(argv=None):
    """Entry point: a user's mistake is one line on stderr and exit status 1, never a traceback."""
    # transformers' advice ("You should probably TRAIN this model...") is noise at a command line
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    _quiet_children()
    follow_parent()   # a data-parallel rank ends with the process that launched it
    try:
        with terminate_cleanly():
            _main(argv)
    except SystemExit as exc:
        _leave(exc.code)
        raise
    _leave(0)


def _leave(code) -> None:
    """One of several processes (torchrun) ends here once its command is done and the process
    group is left: gloo's threads could race the interpreter's teardown and kill a finished rank
    with "terminate called without an active exception" (exit 250)."""
    from compressor.core.distributed import left_group

    if not left_group():
        return
    import logging

    if code is not None and not isinstance(code, int):   # sys.exit("message") prints it
        print(code, file=sys.stderr)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code if isinstance(code, int) else (0 if code is None else 1))


def _interrupted(args) -> str:
    """What a user stopping this command should know: whether running it again resumes."""
    command = next((a for a in args if not a.startswith("-")), "")
    if command == "bench":
        return ("interrupted: the results file holds the thread counts that finished (marked incomplete); "
                "run the same command again to measure them all")
    if command in ("run", "demo"):
        return "interrupted: run the same command again to resume"
    return "interrupted: nothing half-written is left; run the same command again to start over"


def _main(argv):
    args = list(sys.argv[1:] if argv is None else argv)
    rank = int(os.environ.get("RANK", "0") or 0)
    if rank:   # one of several processes (torchrun): rank 0 prints the results
        sys.stdout = open(os.devnull, "w")
    try:
        code = cli.main(args=argv, prog_name="compressor", standalone_mode=False,
                        obj={"argv": args})
        if isinstance(code, int) and code:
            sys.exit(code)
    except CompressorError as exc:
        for line in str(exc).splitlines():
            click.echo(f"error: {f'rank {rank}: ' if rank else ''}{line}", err=True)
        sys.exit(1)
    except click.exceptions.Abort:
        click.echo(_interrupted(args), err=True)
        sys.exit(130)
    except getattr(click.exceptions, "NoArgsIsHelpError", ()) as exc:
        click.echo(exc.format_message())  # a bare group: its help, as click shows it
        sys.exit(0)
    except click.UsageError as exc:
        # click's usage block is four lines; a user needs the one that says what is wrong
        command = exc.ctx.command_path if exc.ctx is not None else "compressor"
        click.echo(f"error: {command}: {exc.format_message()} (see {command} --help)", err=True)
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        click.echo(f"error: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        click.echo(_interrupted(args), err=True)
        sys.exit(130)
    finally:
        from compressor.core.distributed import shutdown

        shutdown()


if __name__ == "__main__":
    main()
