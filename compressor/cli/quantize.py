"""``compressor quantize``: a thin layer over ``compressor.quantize.quantize``."""
from __future__ import annotations

import dataclasses
import os
import typing

import click

_HELP = {
    "method": "dynamic, static, qat, mixed, auto, fp16 (onnxruntime); dynamic, weight_only, fp16, bf16 "
              "(torchao); static, dynamic (inc).",
    "backend": "onnxruntime (writes an ONNX export folder), torchao or inc (PyTorch folders).",
    "preset": "Hardware to deploy to: avx2, avx512_vnni, amx, arm64, auto (from this CPU's flags).",
    "threads": "onnxruntime: CPU threads when scoring the result (one count) [default: onnxruntime's].",
    "calibration_samples": "Static INT8: training rows to calibrate on.",
    "percentile": "Static INT8 with --calibration percentile: the percentile kept.",
    "seed": "Random seed (which calibration/training rows; QAT training).",
    "epochs": "qat: passes over the training rows.",
    "lr": "qat: learning rate.",
    "batch_size": "qat: training batch size.",
    "max_length": "qat: longest input in tokens.",
    "max_steps": "qat: stop after this many optimiser steps (0: no limit).",
    "eval_every": "qat: optimiser steps between dev evaluations (0: once per epoch).",
    "temperature": "qat: softmax temperature of the FP32 model's soft targets.",
    "device": "qat: cpu, cuda, cuda:N or auto (CUDA when present).",
    "calibration": "Static INT8 calibration: minmax, entropy, percentile.",
    "max_drop": "mixed/auto: tolerated score drop in points on the search rows.",
    "search_on": "mixed/auto: choose on dev (the dev score reported is then a best-of-dev), on "
                 "--search-rows training rows drawn with --seed (dev scored once, at the end), or on "
                 "holdout: the training rows the model was fine-tuned without (finetune --holdout N).",
    "search_rows": "mixed/auto with --search-on train: how many training rows.",
    "min_agreement": "mixed/auto: share of search rows whose label must equal the FP32 graph's (regression: "
                     "Pearson r of the outputs with FP32's).",
    "confidence": "mixed/auto: --max-drop must hold for this quantile of the drop over bootstrap resamples "
                  "of the search rows (0: the measured drop alone).",
    "candidates": "auto: what it tries (repeatable): static, dynamic, dynamic_per_tensor, qat, mixed, fp32 "
                  "(qat: trained only when no post-training INT8 graph meets the criterion).",
    "latency_margin": "auto: a candidate with more products FP32 is kept only when faster by more than this "
                      "share (within it: all-INT8, then mixed, then FP32).",
    "qat_distill_alpha": "auto's qat candidate: weight of the teacher's soft targets (0: labels only).",
    "qat_temperature": "auto's qat candidate: the soft targets' temperature.",
    "qat_teacher": "auto's qat candidate: the soft targets' teacher: input (the FP32 model behind the export), "
                   "recipe or a folder.",
    "granularity": "mixed/auto: sensitivity per matrix, per layer, or refine (layers, then the products inside the layers kept FP32).",
    "sensitivity": "mixed/auto: order units by their measured drop (each quantised alone and scored) or by "
                   "hessian: Q-BERT's Hessian of the task loss on the same rows (needs the PyTorch checkpoint).",
    "hessian_score": "--sensitivity hessian: eigenvalue (Q-BERT's |mean|+std of the top eigenvalue over "
                     "batches), trace (Hutchinson, per weight) or weighted_trace (times the INT8 weight error).",
    "hessian_rows": "--sensitivity hessian: rows drawn with --seed from the search rows.",
    "hessian_batch_size": "--sensitivity hessian: rows a batch (one eigenvalue per batch).",
    "hessian_iterations": "--sensitivity hessian: power-iteration Hessian-vector products at most.",
    "hessian_tol": "--sensitivity hessian: stop when the eigenvalue moves by less than this share of itself.",
    "hessian_trace_samples": "--sensitivity hessian: Hutchinson vectors a batch and unit (0: no trace).",
    "exclude": "Keep this ONNX node / torch module in FP32 (repeatable).",
    "smoothquant_alpha": "inc, onnxruntime static/auto: apply SmoothQuant with this alpha before static "
                         "INT8 (0: off; onnxruntime's default 0.8, inc's 0).",
    "optimize": "onnxruntime: apply ORT's BERT fusions before quantising (export folders have them).",
    "embeddings_int8": "onnxruntime static/auto: store the word-embedding table INT8 (one scale per row), "
                       "as dynamic INT8 does; --no-embeddings-int8 keeps it FP32.",
    "distill_alpha": "qat: weight of the teacher's soft targets (0: labels only).",
    "teacher": "qat: the soft targets' teacher: input (the FP32 model as given) or a folder with its tokenizer.",
}


def _options(fn):
    """One option per setting of any quantisation method, so the CLI and recipes take the same
    settings; ``--backend`` and ``--method`` pick the config type, which must take the others given."""
    from compressor.cli import TRAIN_HELP
    from compressor.core.settings import flat_sections, variants
    from compressor.quantize.configs import QuantizeConfig

    fields, hints, defaults, helps = {}, {}, {}, dict(_HELP)
    for cls in variants(QuantizeConfig).values():
        sections = flat_sections(cls)
        for f in dataclasses.fields(cls):
            if not f.init or f.name in fields:
                continue
            if f.name in sections:   # qat's train section: its keys are flat options (--epochs, --lr ...)
                section = f.default_factory()
                for g in dataclasses.fields(section):
                    if g.name not in fields:
                        fields[g.name], hints[g.name] = g, typing.get_type_hints(type(section))[g.name]
                        defaults[g.name] = getattr(section, g.name)
                        text = TRAIN_HELP[g.name]
                        helps.setdefault(g.name, "qat: " + (text if any(c.isupper() for c in text.split()[0][1:])
                                                          else text[0].lower() + text[1:]))
                continue
            fields[f.name], hints[f.name] = f, typing.get_type_hints(cls)[f.name]
    for f in reversed(list(fields.values())):
        flag = "--" + f.name.replace("_", "-")
        hint = hints[f.name]
        args = typing.get_args(hint)
        if f.name == "threads":
            from compressor.cli import threads_option

            fn = threads_option(_HELP["threads"], several=False)(fn)
        elif f.name == "preset":   # the CLI's one default for every command with --preset
            fn = click.option(flag, f.name, default="auto", show_default=True, help=_HELP["preset"])(fn)
        elif typing.get_origin(hint) is list:
            fn = click.option(flag, f.name, multiple=True, help=helps.get(f.name))(fn)
        elif typing.get_origin(hint) is typing.Union and bool in args:
            fn = click.option(f"{flag}/--no-{f.name.replace('_', '-')}", f.name, default=None,
                              help=f"Override the preset ({f.name.replace('_', ' ')}).")(fn)
        elif hint is bool and f.default is True:   # on unless turned off
            fn = click.option(f"{flag}/--no-{f.name.replace('_', '-')}", f.name, default=True, show_default=True,
                              help=helps.get(f.name))(fn)
        elif hint is bool:
            fn = click.option(flag, f.name, is_flag=True, default=f.default, help=helps.get(f.name))(fn)
        else:
            kind = next((a for a in args if a is not type(None)), hint) if args else hint
            default = defaults.get(f.name, f.default if f.default is not dataclasses.MISSING else None)
            fn = click.option(flag, f.name, type=kind, default=default, show_default=default is not None,
                              help=helps.get(f.name))(fn)
    fn = click.option("--method", default="dynamic", show_default=True, help=_HELP["method"])(fn)
    return click.option("--backend", default="onnxruntime", show_default=True, help=_HELP["backend"])(fn)


def _given(settings: dict) -> dict:
    """The settings the user typed (defaults come from the method's own config type)."""
    from click.core import ParameterSource

    ctx = click.get_current_context()
    given = {k: list(v) if isinstance(v, tuple) else v for k, v in settings.items()
             if ctx.get_parameter_source(k) not in (ParameterSource.DEFAULT, None)}
    if isinstance(given.get("threads"), list):
        given["threads"] = given["threads"][0]
    return given


def register(cli):
    """Add this package's commands to the ``compressor`` command group."""
    from compressor.cli import example, own_files_options

    @cli.command("quantize", epilog=example("compressor quantize runs/student-onnx --method dynamic --out runs/int8",
                                            "compressor quantize runs/student-onnx --method static "
                                            "--calibration entropy --out runs/int8-static"))
    @click.argument("model")
    @click.option("--out", required=True, type=click.Path(file_okay=False), help="Folder to write.")
    @click.option("--task", default=None, help="The task, when the model does not say.")
    @click.option("--data-dir", envvar="GLUE_DIR", default=None, show_envvar=True,
                  help="GLUE folder (or 'embedded') for the dev score and calibration/training rows.")
    @click.option("--train-limit", type=int, default=None, help="Use only the first N training rows.")
    @click.option("--dev-limit", type=int, default=None, help="Score only the first N dev rows.")
    @own_files_options("train", "dev")
    @click.option("--overwrite", is_flag=True, help="Replace a non-empty --out folder.")
    @_options
    def quantize_command(model, out, task, data_dir, train_limit, dev_limit, train_file, dev_file,
                         text_columns, label_column, overwrite, backend, method, **kwargs):
        """Quantise a checkpoint or ONNX export folder (INT8, mixed precision, FP16/BF16)."""
        from compressor.cli import _user_data
        from compressor.core.data import load_for_model
        from compressor.engine.scoring import _task_for
        from compressor.quantize.api import quantize
        from compressor.quantize.configs import quantize_config

        given = _given(kwargs)
        from compressor.core.settings import variants
        from compressor.quantize.configs import QuantizeConfig

        chosen = variants(QuantizeConfig).get((backend, method))
        if chosen is not None:   # qat: --epochs, --lr ... fill its train section
            from compressor.cli import in_sections

            given = in_sections(chosen, given)
        config = quantize_config(backend, method, **given)
        if "preset" not in given and getattr(config, "preset", None) not in (None, "auto"):
            config = quantize_config(backend, method, **given, preset="auto")   # the CLI's default
        user_data = _user_data(train_file, dev_file, text_columns, label_column, recorded=True)
        task_spec, _ = _task_for(model, task) if os.path.isdir(model) else (None, None)
        train = dev = None
        if task_spec is not None and (train_limit is not None or dev_limit is not None):
            if train_limit is not None:
                train = load_for_model(model, task_spec, "train", data_dir, train_limit, user_data)
            dev = load_for_model(model, task_spec, "dev", data_dir, dev_limit, user_data)
        record = quantize(model, out, config, task=task, data_dir=data_dir, train_set=train, dev_set=dev,
                          overwrite=overwrite, user_data=user_data)
        if record.get("metrics"):
            metrics = ", ".join(f"{k} {v:.4f}" for k, v in record["metrics"].items())
            click.echo(f"{record['task']} dev: {metrics} ({record['examples']} examples, "
                       f"score {record['score']:.2f})")
        elif record.get("unscored"):
            click.echo(f"not scored: {record['unscored']}")
        search = record.get("search") or {}
        if search.get("chosen"):
            click.echo(f"chose: {search['chosen']}")
        if search.get("fp32_units") is not None:
            click.echo(f"kept in FP32: {', '.join(search['fp32_units']) or 'nothing'}")
        click.echo(f"written: {os.path.abspath(out)} ({record['size_bytes'] / 1e6:.1f} MB)")
