"""Errors a user can act on.

A ``CompressorError`` carries one line that says what is wrong and where; the
CLI prints it without a traceback and exits non-zero. Anything else reaching
the CLI is a bug in the toolkit and keeps its traceback.
"""
import contextlib
import signal
import threading
from typing import Iterator


class CompressorError(Exception):
    """A problem with the user's input, data, checkpoint or environment."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the process is, so temporary folders are removed on the way out."""


@contextlib.contextmanager
def terminate_cleanly() -> Iterator[None]:
    """Turn SIGTERM into :class:`Terminated` for the block (main thread only; elsewhere a no-op),
    so it unwinds like Ctrl-C and every temporary folder is removed on the way out."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def raise_terminated(signum, frame):
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def where(path, line=None) -> str:
    """Format a location as ``path:line`` for error messages."""
    return f"{path}:{line}" if line is not None else str(path)
