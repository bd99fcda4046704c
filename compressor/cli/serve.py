"""``compressor serve``: an export folder behind HTTP (a thin layer over ``compressor.serve``)."""
import dataclasses

import click

HELP = {
    "host": "Address to listen on (0.0.0.0: every interface).",
    "port": "TCP port (0: any free one; the line printed at start names it).",
    "max_batch": "Most texts one batch gathers (1: no batching, each text runs as it comes).",
    "max_wait_ms": "Longest a text waits for others to share its batch (only while the server is busy: "
                   "a lone client's text runs at once).",
    "bucket": "A batch runs in groups of at most this many texts of like token count, each padded to "
              "its own longest (less padding computed).",
    "workers": "Server processes, each with its own model, batcher and /metrics counters.",
    "max_body_bytes": "Largest request body in bytes (413 beyond).",
    "max_texts": "Most texts in one request (413 beyond).",
    "max_chars": "Longest text in characters (413 beyond).",
    "rows": "together: a batch runs as one; alone: each text by itself; auto: alone for a dynamic "
            "INT8 graph (its activation ranges span the batch), together otherwise.",
    "shutdown_timeout": "On SIGTERM or Ctrl-C, the longest wait (seconds) for requests in flight.",
}


def _config_options(fn):
    from compressor.serve.config import ServeConfig

    for f in reversed([f for f in dataclasses.fields(ServeConfig) if f.name in HELP]):
        flag = "--" + f.name.replace("_", "-")
        kind = click.Choice(f.metadata["choices"]) if "choices" in f.metadata else type(f.default)
        fn = click.option(flag, f.name, type=kind, default=f.default, show_default=True, help=HELP[f.name])(fn)
    return fn


def register(cli):
    """Add ``serve`` to the ``compressor`` command group."""
    from compressor.cli import example, threads_option

    @cli.command("serve", epilog=example(
        "compressor serve runs/int8 --port 8000",
        "compressor serve runs/int8 --host 0.0.0.0 --max-batch 16 --max-wait-ms 10 --threads 2"))
    @click.argument("folder", type=click.Path(file_okay=False))
    @threads_option("Threads for the model (onnxruntime's, or OpenVINO's for an OpenVINO folder) "
                    "[default: OMP_NUM_THREADS, else the engine's].",
                    several=False)
    @_config_options
    def serve_cmd(folder, threads, **settings):
        """Serve an ONNX export folder (or an OpenVINO one) over HTTP: POST /predict (Hugging Face's
        text-classification JSON), /health, /ready, /metrics (Prometheus); dynamic batching; no torch."""
        from compressor.core.settings import from_values
        from compressor.serve.config import ServeConfig
        from compressor.serve.server import serve

        config = from_values(ServeConfig, dict(settings, threads=threads[0] if threads else None), "serve")
        serve(folder, config, on_listening=lambda url: click.echo(
            f"serving {folder} at {url} (POST /predict; /health /ready /metrics); "
            "Ctrl-C or SIGTERM stops", err=True))
        click.echo("stopped: every request in flight was answered", err=True)
