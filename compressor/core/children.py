"""Processes a command starts end with it: data-parallel ranks, auto's workers, benchmark variants.

A parent stopped by a signal (Ctrl-C, SIGTERM) stops its children on the way out
(:func:`stopped_with`, or torchrun's agent for the ranks). A parent killed outright (SIGKILL, the
out-of-memory killer, a crash) cannot, so a child started with :func:`env` follows its parent
(:func:`follow_parent`): once the parent is gone it sends itself SIGTERM, which unwinds it like
Ctrl-C (temporary folders removed, one quiet exit) instead of training on alone.
"""
from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from typing import Iterator, Mapping, Optional, Sequence

PARENT = "COMPRESSOR_PARENT_PID"   # the process a child started with env() follows
_following = False


def env(base: Optional[Mapping[str, str]] = None) -> dict:
    """The environment for a child that should end with this process (``base``: os.environ)."""
    return {**(os.environ if base is None else base), PARENT: str(os.getpid())}


def follow_parent(interval: float = 0.5) -> None:
    """In a child started with :func:`env`: send this process SIGTERM once its parent is gone
    (checked every ``interval`` seconds by a daemon thread). Elsewhere a no-op. The variable is
    taken out of this process's environment, so its own children follow it, not its parent."""
    global _following
    expected = os.environ.pop(PARENT, None)
    if _following or not expected or not expected.isdigit():
        return
    parent = int(expected)

    def watch() -> None:
        while os.getppid() == parent:   # an orphan is handed to init (or a subreaper)
            time.sleep(interval)
        os.kill(os.getpid(), signal.SIGTERM)

    _following = True
    threading.Thread(target=watch, name="compressor-follow-parent", daemon=True).start()


@contextlib.contextmanager
def stopped_with(procs: Sequence) -> Iterator[None]:
    """If the block is left by an exception (Ctrl-C, SIGTERM, an error), send SIGTERM to each of
    ``procs`` (``subprocess.Popen``) still running, so waiting for them afterwards is short."""
    try:
        yield
    except BaseException:
        for proc in procs:
            if proc.poll() is None:
                try:
                    proc.terminate()
                except OSError:
                    pass
        raise
