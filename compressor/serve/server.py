"""``serve(folder, config)``: run the application under uvicorn until SIGTERM or Ctrl-C.

On either signal uvicorn stops accepting connections, lets the requests in flight finish
(``shutdown_timeout`` at most), and the application's shutdown runs whatever texts are
still queued; then ``serve`` returns (the command exits 0).
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
from typing import Callable, Optional

from compressor.core.errors import CompressorError
from compressor.serve.config import ServeConfig


def require_server_packages() -> None:
    """One line naming the extra, where the server's packages are not installed."""
    import importlib

    missing = []
    for name in ("starlette", "uvicorn"):
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise CompressorError(f"compressor serve needs {' and '.join(missing)}: "
                              "pip install 'compressor[serve]'")


def serve(folder: str, config: Optional[ServeConfig] = None,
          on_listening: Optional[Callable[[str], None]] = None) -> None:
    """Serve the export ``folder`` over HTTP until stopped; ``on_listening(url)`` is told where."""
    config = config or ServeConfig()
    require_server_packages()
    import uvicorn

    from compressor.serve.app import configure_logging, create_app, open_model

    if not os.path.isdir(folder):
        raise CompressorError(f"export folder not found: {folder}")
    model = open_model(folder, config)   # a folder the runtime cannot run: one line, before listening
    sock = _bind(config.host, config.port)
    host, port = sock.getsockname()[:2]
    configure_logging()
    common = dict(lifespan="on", log_config=None, access_log=False,
                  timeout_graceful_shutdown=config.shutdown_timeout)
    if config.workers == 1:
        server = uvicorn.Server(uvicorn.Config(create_app(folder, config, model=model), **common))
    else:
        del model   # each worker opens its own
        os.environ["COMPRESSOR_SERVE"] = json.dumps(
            {"folder": os.path.abspath(folder), "config": config.__dict__})
        uconfig = uvicorn.Config("compressor.serve.app:app_from_environment", factory=True,
                                 workers=config.workers, **common)
    if on_listening:
        on_listening(f"http://{'[' + host + ']' if ':' in host else host}:{port}")
    with _quiet_signals():
        if config.workers == 1:
            server.run(sockets=[sock])
        else:
            from uvicorn.supervisors import Multiprocess

            Multiprocess(uconfig, sockets=[sock]).run()
    sock.close()


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on such sockets; without it a
    # keep-alive answer written in two parts (head, body) waits for the client's delayed ACK (40 ms)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise CompressorError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


@contextlib.contextmanager
def _quiet_signals():
    """uvicorn turns SIGTERM/SIGINT into a graceful stop and raises the signal again once done;
    that second one must not end the command as an interruption (exit 130): it stopped as asked."""
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
