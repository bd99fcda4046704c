"""Command-line commands of this package; ``compressor.cli`` calls ``register``."""
import click


def _ints(value):
    try:
        return [int(v) for v in str(value).split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got {value!r}") from None


def _names(value):
    return [v.strip() for v in str(value).split(",") if v.strip() and v.strip() != "none"]


def _batching(value):
    ways = _names(value)
    from compressor.core.grouping import BATCHINGS as known
    bad = [w for w in ways if w not in known]
    if bad or not ways or len(set(ways)) != len(ways):
        raise click.BadParameter(f"expected a comma list of {', '.join(known)} (each once), got {value!r}",
                                 param_hint="--batching")
    return ways


def _results_in(path: str) -> str:
    """A ``compressor bench --out`` folder stands for the results file in it."""
    import os

    inside = os.path.join(path, "bench.json")
    if os.path.isdir(path) and not os.path.isfile(os.path.join(path, "manifest.json")) and os.path.isfile(inside):
        return inside
    return path


def register(cli):
    """Add this package's commands to the ``compressor`` command group."""
    from compressor.cli import example, out_file, own_files_options, threads_option

    @cli.command("bench", epilog=example("compressor bench runs/student-int8 --teacher runs/teacher --threads 1,4 "
                                         "--out runs/bench"))
    @click.argument("models", nargs=-1)
    @click.option("--teacher", default=None, help="The teacher checkpoint: benchmarked, and the peers are made from it.")
    @click.option("--peers", default="pytorch-fp32,pytorch-int8,ort-fp32,ort-o2,ort-o2-int8", show_default=True,
                  help="Peers applied to the teacher: pytorch-fp32, pytorch-int8, ort-fp32, ort-o2, "
                       "ort-o2-int8, inc-int8, openvino-fp32, openvino-int8 (or none).")
    @click.option("--preset", default="auto", show_default=True,
                  help="Hardware preset for ort-o2-int8, as for compressor quantize: avx2, avx512_vnni, amx, arm64, "
                       "auto (from the CPU flags).")
    @click.option("--engines", default="pytorch", show_default=True,
                  help="PyTorch engines for checkpoints: pytorch, pytorch-compile (export folders run on "
                       "onnxruntime, OpenVINO folders on OpenVINO).")
    @click.option("--precisions", default="fp32", show_default=True, help="fp32, bf16, fp16 (CUDA), int8-dynamic.")
    @click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True,
                  help="Where checkpoints run: cpu, cuda or auto (CUDA when present); export folders run "
                       "on onnxruntime's CPU provider, OpenVINO folders on OpenVINO's CPU plugin.")
    @threads_option("CPU threads to time with, a comma list: each count is measured in turn, e.g. 1,4.",
                    default="1")
    @click.option("--sentences", type=int, default=200, show_default=True, help="Dev sentences timed at batch 1.")
    @click.option("--batch-sizes", default="32", show_default=True, help="Throughput batch sizes (or none).")
    @click.option("--throughput-batches", type=int, default=4, show_default=True,
                  help="Batches timed per batch size and variant.")
    @click.option("--batching", default="padded", show_default=True,
                  help="How throughput batches are formed, a comma list, each timed on the same rows: "
                       "padded (rows as they come, padded to the longest), sorted or bucketed (grouped "
                       "by token count: padding-free). E.g. padded,sorted adds the padding-free "
                       "throughput and its speed-up.")
    @click.option("--block", type=int, default=20, show_default=True,
                  help="Sentences a variant times per turn (each variant runs in its own process; "
                       "the variants take turns in rounds).")
    @click.option("--pause", type=float, default=0.1, show_default=True,
                  help="Seconds between turns, so the last variant's idle threads stop spinning.")
    @click.option("--no-score", is_flag=True, help="Skip the dev metric.")
    @click.option("--no-memory", is_flag=True, help="Skip peak memory (one subprocess per variant).")
    @click.option("--task", default=None, help="Defaults to the task the models were trained on.")
    @click.option("--data-dir", envvar="GLUE_DIR", default=None, show_envvar=True,
                  help="Folder in GLUE's layout, or 'embedded', for the timed sentences and the dev score.")
    @own_files_options("dev")
    @click.option("--out", required=True, type=click.Path(file_okay=False),
                  help="Folder to write the results in: OUT/bench.json.")
    @click.option("--work-dir", default=None, help="Where the peers' models go [default: OUT/peers].")
    def bench_cmd(models, teacher, peers, preset, engines, precisions, device, threads, sentences, batch_sizes,
                  throughput_batches, batching, block, pause, no_score, no_memory, task, data_dir, dev_file, text_columns,
                  label_column, out, work_dir):
        """Latency (p50/p90/p99, batch 1), throughput, memory, size and dev score of MODELS and peers."""
        from compressor.cli import _user_data
        from compressor.core.results import command_line

        from compressor.bench.harness import BenchConfig
        from compressor.bench.report import print_rows
        from compressor.bench.suite import run_benchmark

        if device == "auto":
            import torch

            device = "cuda" if torch.cuda.is_available() else "cpu"
        out = out_file(out, "bench.json")
        config = BenchConfig(sentences=sentences, threads=threads,
                             batch_sizes=_ints(batch_sizes) if batch_sizes != "none" else [],
                             throughput_batches=throughput_batches, batching=_batching(batching),
                             score=not no_score,
                             memory=not no_memory, block=block, pause_s=pause)
        doc = run_benchmark(models, teacher=teacher, peers=_names(peers), task=task, data_dir=data_dir,
                            config=config, engines=_names(engines), precisions=_names(precisions),
                            device=device, work_dir=work_dir, out=out, preset=preset,
                            command=command_line(),
                            user_data=_user_data(None, dev_file, text_columns, label_column, recorded=True))
        print_rows(doc["rows"])
        click.echo(f"results: {out}")

    @cli.command("report", epilog=example("compressor report runs/sst2", "compressor report runs/bench --out runs/report"))
    @click.argument("paths", nargs=-1, required=True)
    @click.option("--out", default=None, type=click.Path(file_okay=False),
                  help="Folder for report.md and report.html [default: the first PATH if it is a run folder].")
    @click.option("--json", "as_json", is_flag=True, help="Print one JSON row per variant instead.")
    @threads_option("Show only this thread count's latency (one count) [default: every count measured; "
                    "the plot and --json use the fewest].", several=False)
    def report_cmd(paths, out, as_json, threads):
        """Report on run folders and results files: markdown, HTML with the latency-vs-score plot, or JSON."""
        import json

        from compressor.bench.report import collect, json_rows, write_report_files

        threads = threads[0] if threads else None
        paths = [_results_in(p) for p in paths]
        rows = collect(paths)
        if as_json:
            for r in json_rows(rows, threads):
                click.echo(json.dumps(r))
            return
        written = write_report_files(paths, out, threads=threads, rows=rows)
        for path in written:
            click.echo(f"written: {path}")
