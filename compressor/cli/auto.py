"""``compressor auto``: a thin layer over ``compressor.auto.run_auto``; ``compressor.cli`` calls ``register``."""
import click


def _floats(text: str) -> list:
    return [float(v) for v in text.split(",") if v.strip()]


def _bools(text: str) -> list:
    return [v.strip().lower() in ("1", "true", "yes", "on") for v in text.split(",") if v.strip()]


def _words(text: str) -> list:
    return [v.strip() for v in text.split(",") if v.strip()]


def _ints(text: str) -> list:
    return [int(v) for v in text.split(",") if v.strip()]


def _lengths(text: str) -> list:
    """``--seq-len``: one length or several (comma-separated); 0 (the held-out rows' mean) is none."""
    from compressor.core.errors import CompressorError

    try:
        values = _ints(text)
    except ValueError:
        raise CompressorError(f"--seq-len {text!r}: give token counts such as 13 or 13,54,11") from None
    if any(v < 0 for v in values):
        raise CompressorError(f"--seq-len {text!r}: token counts are not negative")
    return [v for v in values if v]


# option -> (setting, parser) for the search space, given as comma lists
SPACE = {"heads": _floats, "ffn": _floats, "tokens": _floats, "vocab": _bools, "precisions": _words,
         "layer_rules": _words, "mixed_fp32": _ints, "exits": _words, "exit_targets": _floats}


def register(cli):
    """Add ``auto`` to the ``compressor`` command group."""
    from compressor.cli import example, threads_option

    @cli.command("auto", epilog=example(
        "compressor auto runs/teacher --task sst2 --max-drop 1.0 --target cpu --threads 1 --budget 4h --out runs/auto",
        "compressor auto runs/teacher --trials 40 --workers 2 --storage journal:runs/auto/study.log --out runs/auto",
        "compressor auto mpnet-base --task sst2 --measure-table --seq-len 13 --latency-table edge.json   # on the target",
        "compressor auto runs/teacher --target-table edge.json --device cuda --out runs/auto   # on the GPU machine",
        "compressor auto runs/teacher --student runs/chain/02-distill --proxy-recover steps=200 --out runs/auto"))
    @click.argument("model", type=click.Path())
    @click.option("--out", default=None, type=click.Path(file_okay=False),
                  help="The search's folder (study, trials, report, pick); run again to resume. "
                       "Required but with --measure-table.")
    @click.option("--measure-table", is_flag=True,
                  help="Measure every latency-table entry the search space can ask for on this machine "
                       "(into --latency-table, kept entries stay), then stop: the target's table for "
                       "--target-table elsewhere. MODEL: the teacher or any model of its family.")
    @click.option("--target-table", default="",
                  help="Another machine's latency table (made there with --measure-table), read only: latencies "
                       "are predicted for that machine, nothing is timed here, the whole-model checks are skipped.")
    @click.option("--seq-len", default="0", show_default=True,
                  help="Tokens the latency is taken at; 0: the held-out rows' mean. With --measure-table, "
                       "several (13,54,11): the lengths of several searches (tasks of one family) at once.")
    @click.option("--device", default="auto", show_default=True,
                  help="Where importance, exit heads and recovery train: cpu, cuda, cuda:N or auto; with cuda "
                       "and --workers N, local workers take the visible GPUs in turn.")
    @click.option("--score-rows", type=int, default=0, show_default=True,
                  help="Held-out rows a trial is scored on; 0: all.")
    @click.option("--task", default=None, help="The task; default: the one the teacher records.")
    @click.option("--data-dir", default=None, help="GLUE folder (default GLUE_DIR).")
    @click.option("--train-limit", type=int, default=None,
                  help="Use only the first N training rows (importance, calibration).")
    @click.option("--dev-limit", type=int, default=None, help="Verify the pick on the first N dev rows only.")
    @click.option("--max-drop", type=float, default=1.0, show_default=True,
                  help="Most score points the pick may lose against the teacher on the held-out rows.")
    @click.option("--target", type=click.Choice(["cpu", "gpu"]), default="cpu", show_default=True,
                  help="Where the latency table is measured.")
    @threads_option("onnxruntime threads the latency is measured at [default: 1].", several=False)
    @click.option("--budget", default="", help="Wall time of this run (90s, 30m, 4h); default: until --trials.")
    @click.option("--trials", type=int, default=20, show_default=True,
                  help="Trials of the whole study, all workers and runs together.")
    @click.option("--workers", type=int, default=1, show_default=True,
                  help="Local processes working on the one study.")
    @click.option("--storage", default="",
                  help="Where the study lives: sqlite:///OUT/study.db by default; a database URL or "
                       "journal:PATH that workers elsewhere join.")
    @click.option("--study", default="auto", show_default=True, help="The study's name in the storage.")
    @click.option("--sampler", type=click.Choice(["nsga2", "tpe"]), default="nsga2", show_default=True,
                  help="optuna's multi-objective sampler.")
    @click.option("--min-layers", type=int, default=1, show_default=True, help="Fewest layers a candidate keeps.")
    @click.option("--heads", default="0,0.25,0.5", show_default=True, help="Shares of heads removed per layer.")
    @click.option("--ffn", default="0,0.25,0.5", show_default=True, help="Shares of FFN neurons removed per layer.")
    @click.option("--tokens", default="1,0.8", show_default=True,
                  help="Shares of tokens each layer passes on (token pruning by ratio).")
    @click.option("--vocab", default="false,true", show_default=True,
                  help="Whether the vocabulary is cut to the task's word pieces.")
    @click.option("--precisions", default="fp32,dynamic,static,mixed", show_default=True,
                  help="Precisions of the exported graph (mixed: dynamic INT8 with the most sensitive units FP32).")
    @click.option("--mixed-fp32", default="1,2", show_default=True,
                  help="mixed: how many units (layers, embeddings, classifier) the held-out score is most "
                       "sensitive to stay FP32.")
    @click.option("--exits", default="none,entropy", show_default=True,
                  help="Early exit: none, or the rule (entropy, max_prob, patience) calibrated on the held-out rows.")
    @click.option("--exit-targets", default="0.99,0.97", show_default=True,
                  help="Share of the held-out score the exit threshold keeps.")
    @click.option("--exit-epochs", type=float, default=1.0, show_default=True,
                  help="Training of the exit heads (the model fixed).")
    @click.option("--recover-candidates", type=int, default=3, show_default=True,
                  help="Candidates that may enter the front rebuilt with recovery training after the search; 0: none.")
    @click.option("--recover-margin", type=float, default=1.0, show_default=True,
                  help="A candidate is recovered if its score this many points higher would put it on the front.")
    @click.option("--recover", "recover", multiple=True, metavar="KEY=VALUE",
                  help="Their recovery (pruning's recover:), repeatable: mode=distill|finetune, epochs=1, lr=5e-5, "
                       "losses.kd=1 [default: mode=distill, epochs=1].")
    @click.option("--proxy-recover", "proxy_recover", multiple=True, metavar="KEY=VALUE",
                  help="A short recovery of every trial's last pruning step before it is scored, as --recover "
                       "takes it: steps=200 (optimiser steps; distillation from the teacher), lr=5e-5 ... "
                       "[default: none].")
    @click.option("--student", default="",
                  help="A model of the teacher's family (a distilled student) that the trials compress instead "
                       "of the teacher; the teacher MODEL stays the reference (budget, distillation, report).")
    @click.option("--layer-rules", default="top,importance", show_default=True,
                  help="How the layers that go are chosen.")
    @click.option("--importance-rows", type=int, default=128, show_default=True,
                  help="Training rows pruning importance is measured on.")
    @click.option("--latency-table", default="",
                  help="The latency table's JSON file; default: one per CPU in ~/.cache/compressor/latency.")
    @click.option("--check-models", type=int, default=3, show_default=True,
                  help="Front members (the pick first) measured whole at the end beside their predicted "
                       "latency, the teacher too; 0: no check.")
    @click.option("--seed", type=int, default=42, show_default=True, help="The sampler's seed.")
    def auto(model, out, task, data_dir, train_limit, dev_limit, threads, recover, proxy_recover, measure_table,
             **settings):
        """Search across the toolkit's methods (layers, heads, FFN, vocabulary, tokens, INT8, early exit) for the
        fastest model within --max-drop of the teacher MODEL on its held-out rows (fine-tune it with
        --holdout N): the Pareto front, the pick as an ONNX folder (OUT/pick), the report."""
        from compressor.auto.study import run_auto
        from compressor.cli.methods import recover_settings
        from compressor.core.errors import CompressorError

        settings["threads"] = threads[0] if threads else 1
        if recover:
            settings["recover"] = recover_settings(recover)
        if proxy_recover:   # steps=N: N optimiser steps
            pairs = [f"max_{p}" if p.startswith("steps=") else p for p in proxy_recover]
            if not any(p.startswith("max_steps=") for p in pairs):
                raise CompressorError("--proxy-recover needs steps=N: a trial's recovery is N optimiser steps")
            settings["proxy_recover"] = recover_settings(pairs)
        for name, parse in SPACE.items():
            settings[name] = parse(settings[name])
        lengths = _lengths(settings.pop("seq_len"))
        if measure_table:
            from compressor.auto.target import measure_table as measure

            done = measure(model, task=task, data_dir=data_dir, log=lambda msg: click.echo(msg, err=True),
                           seq_lens=lengths, **settings)
            click.echo(f"latency table: {done['path']} ({sum(done['entries'].values())} entries for this space at "
                       f"{'/'.join(map(str, done['seq_lens']))} tokens, {done['measured']} measured now); give it "
                       "to the search elsewhere with --target-table")
            return
        if len(lengths) > 1:
            raise CompressorError("--seq-len takes several lengths with --measure-table only; a search has one")
        settings["seq_len"] = lengths[0] if lengths else 0
        if not out:
            raise CompressorError("compressor auto needs --out (the search's folder), but with --measure-table")
        report = run_auto(model, out, task=task, data_dir=data_dir, train_limit=train_limit, dev_limit=dev_limit,
                          log=lambda msg: click.echo(msg, err=True), **settings)
        pick = report.get("pick")
        if pick:
            click.echo(f"pick: trial {pick['trial']}, held-out {pick['score']:.2f}, dev {pick['dev_score']:.2f} "
                       f"(teacher {pick['teacher_dev_score']:.2f}), {pick['latency_ms']:.3f} ms predicted, "
                       f"{pick['size_bytes'] / 1e6:.2f} MB -> {pick['folder']}")
        else:
            click.echo("no candidate within the budget; see the report")
        click.echo(f"report: {out}/report.md")
