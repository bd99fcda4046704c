"""Command-line commands of this package; ``compressor.cli`` calls ``register``."""
import click


def _ints(value):
    try:
        return [int(v) for v in str(value).split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got {value!r}") from None


def _names(value):
    return [v.strip() for v in str(value).split(",") if v.strip() and v.strip() != "none"]


def register(cli):
    """Add this package's commands to the ``compressor`` command group."""
    from compressor.cli import own_files_options

    @cli.command("bench")
    @click.argument("models", nargs=-1)
    @click.option("--teacher", default=None, help="The teacher checkpoint: benchmarked, and the peers are made from it.")
    @click.option("--peers", default="pytorch-fp32,pytorch-int8,ort-fp32,ort-o2,ort-o2-int8", show_default=True,
                  help="Peers applied to the teacher: pytorch-fp32, pytorch-int8, ort-fp32, ort-o2, "
                       "ort-o2-int8, inc-int8 (or none).")
    @click.option("--preset", default="auto", show_default=True,
                  help="Hardware preset for ort-o2-int8, as for compressor quantize: avx2, avx512_vnni, amx, arm64, "
                       "auto (from the CPU flags).")
    @click.option("--engines", default="pytorch", show_default=True,
                  help="PyTorch engines for checkpoints: pytorch, pytorch-compile (export folders run on onnxruntime).")
    @click.option("--precisions", default="fp32", show_default=True, help="fp32, bf16, fp16 (CUDA), int8-dynamic.")
    @click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
    @click.option("--threads", default="1", show_default=True, help="Thread counts, e.g. 1,2.")
    @click.option("--sentences", type=int, default=200, show_default=True, help="Dev sentences timed at batch 1.")
    @click.option("--batch-sizes", default="32", show_default=True, help="Throughput batch sizes (or none).")
    @click.option("--throughput-batches", type=int, default=4, show_default=True,
                  help="Batches timed per batch size and variant.")
    @click.option("--block", type=int, default=20, show_default=True,
                  help="Sentences a variant times per turn (each variant runs in its own process; "
                       "the variants take turns in rounds).")
    @click.option("--pause", type=float, default=0.1, show_default=True,
                  help="Seconds between turns, so the last variant's idle threads stop spinning.")
    @click.option("--no-score", is_flag=True, help="Skip the dev metric.")
    @click.option("--no-memory", is_flag=True, help="Skip peak memory (one subprocess per variant).")
    @click.option("--task", default=None)
    @click.option("--data-dir", envvar="GLUE_DIR", default=None, show_envvar=True)
    @own_files_options("dev")
    @click.option("--out", required=True, type=click.Path(dir_okay=False), help="Results JSON to write.")
    @click.option("--work-dir", default=None, help="Where the peers' models go [default: OUT's folder/peers].")
    def bench_cmd(models, teacher, peers, preset, engines, precisions, device, threads, sentences, batch_sizes,
                  throughput_batches, block, pause, no_score, no_memory, task, data_dir, dev_file, text_columns,
                  label_column, out, work_dir):
        """Latency (p50/p90/p99, batch 1), throughput, memory, size and dev score of MODELS and peers."""
        from compressor.cli import _user_data
        from compressor.core.results import command_line

        from compressor.bench.harness import BenchConfig
        from compressor.bench.report import print_rows
        from compressor.bench.suite import run_benchmark

        config = BenchConfig(sentences=sentences, threads=_ints(threads),
                             batch_sizes=_ints(batch_sizes) if batch_sizes != "none" else [],
                             throughput_batches=throughput_batches, score=not no_score,
                             memory=not no_memory, block=block, pause_s=pause)
        doc = run_benchmark(models, teacher=teacher, peers=_names(peers), task=task, data_dir=data_dir,
                            config=config, engines=_names(engines), precisions=_names(precisions),
                            device=device, work_dir=work_dir, out=out, preset=preset,
                            command=command_line(),
                            user_data=_user_data(None, dev_file, text_columns, label_column, recorded=True))
        print_rows(doc["rows"])
        click.echo(f"results: {out}")

    @cli.command("report")
    @click.argument("paths", nargs=-1, required=True)
    @click.option("--out", default=None, type=click.Path(file_okay=False),
                  help="Folder for report.md and report.html [default: the first PATH if it is a run folder].")
    @click.option("--json", "as_json", is_flag=True, help="Print one JSON row per variant instead.")
    @click.option("--threads", type=int, default=None,
                  help="Show only this thread count's latency [default: every count measured; "
                       "the plot and --json use the fewest].")
    def report_cmd(paths, out, as_json, threads):
        """Report on run folders and results files: markdown, HTML with the latency-vs-score plot, or JSON."""
        import json

        from compressor.bench.report import collect, json_rows, write_report_files

        rows = collect(paths)
        if as_json:
            for r in json_rows(rows, threads):
                click.echo(json.dumps(r))
            return
        written = write_report_files(paths, out, threads=threads, rows=rows)
        for path in written:
            click.echo(f"written: {path}")
