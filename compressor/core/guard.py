"""What keeps a run folder safe: one run at a time, leftovers of dead runs cleaned,
finished stages checked byte for byte before they are trusted.

- ``run_lock`` takes an exclusive ``flock`` on ``OUT/.compressor.lock`` for as long
  as the run lasts. The kernel drops the lock when the process ends, however it
  ends (SIGKILL included), so a killed run never blocks the next one; a second
  run while the first is alive is refused with one line naming it. ``flock`` is
  per host: two machines sharing a network file system are not kept apart.
- ``clean_leftovers`` removes the temporary names that ``compressor.core.io`` writes
  (``.NN-stage.tmp-*``, ``.NN-stage.old-*``, ``.tmp-*``) and a dead run left
  behind; it runs under the lock, so no live writer owns them.
- ``digest_files`` / ``check_files`` record each stage's files (size and SHA-256)
  and compare them before a finished stage is skipped.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import socket
import stat
import sys
import time
from typing import Iterator, Optional

from compressor.core.errors import CompressorError

LOCK_FILE = ".compressor.lock"
# the names compressor.core.io's atomic writers use: mkstemp/mkdtemp add 8 characters
# (``..NN-stage.tmp-X.tmp-Y``: a writer's own temporary folder beside a stage's temporary one)
_LEFTOVER = re.compile(r"^\.{1,2}(\d\d-[^/]+\.(tmp|old)-|tmp-)[A-Za-z0-9_]{8}$")


@contextlib.contextmanager
def run_lock(out: str) -> Iterator[None]:
    """Hold ``OUT/.compressor.lock`` exclusively while the block runs, or refuse at once."""
    import fcntl

    path = os.path.join(out, LOCK_FILE)
    try:
        # never through a link: the lock file is emptied, and it must be this folder's own file
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as exc:
        if os.path.islink(path):
            raise CompressorError(f"{path} is a symbolic link, not the run's lock file; "
                                  "remove it (the file it points to is left as it is)") from None
        raise CompressorError(f"{path}: cannot open the run's lock file ({exc.strerror})") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        os.close(fd)
        what = "not a regular file" if not stat.S_ISREG(info.st_mode) else \
            f"a hard link shared with {info.st_nlink - 1} other name(s)"
        raise CompressorError(f"{path} is {what}, not the run's lock file; remove it")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = _describe_holder(fd)
        os.close(fd)
        raise CompressorError(
            f"{out} is in use by another compressor run ({holder}); wait for it to end "
            "or choose another --out") from None
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({
            "pid": os.getpid(), "host": socket.gethostname(),
            "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:])}).encode(), 0)
        yield
    finally:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _describe_holder(fd: int) -> str:
    try:
        holder = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
    except (OSError, ValueError):
        holder = {}
    if not holder.get("pid"):
        return "a process that has just started"
    return (f"pid {holder['pid']} on {holder.get('host', '?')}, started {holder.get('started', '?')}: "
            f"{holder.get('command', '?')}")


def clean_leftovers(out: str, log=None) -> list:
    """Remove the temporary files and folders an earlier, dead run left in ``out``."""
    removed = []
    for name in sorted(os.listdir(out)):
        if not _LEFTOVER.match(name):
            continue
        path = os.path.join(out, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        removed.append(name)
    if removed and log:
        log(f"removed {len(removed)} temporary item(s) an interrupted run left: {', '.join(removed)}")
    return removed


def digest_files(folder: str, skip=("record.json",)) -> dict:
    """``{relative path: {"bytes": n, "sha256": hex}}`` for every file under ``folder``."""
    files = {}
    for root, dirs, names in os.walk(folder):
        dirs.sort()
        for name in sorted(names):
            path = os.path.join(root, name)
            rel = os.path.relpath(path, folder)
            if rel in skip or os.path.islink(path):
                continue
            files[rel] = {"bytes": os.path.getsize(path), "sha256": file_sha256(path)}
    return files


def check_files(folder: str, recorded: Optional[dict]) -> Optional[str]:
    """None when every recorded file is there unchanged; otherwise what differs, in a few words."""
    if recorded is None:
        return "its record has no file hashes (an older version wrote it)"
    for rel, want in recorded.items():
        path = os.path.join(folder, rel)
        if not os.path.isfile(path):
            return f"{rel} is missing"
        size = os.path.getsize(path)
        if size != want["bytes"]:
            return f"{rel} has {size:,} bytes, {want['bytes']:,} when it was written"
        if file_sha256(path) != want["sha256"]:
            return f"{rel} has changed since it was written"
    return None


def file_sha256(path: str) -> str:
    """The SHA-256 of a file's bytes (hex), read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
