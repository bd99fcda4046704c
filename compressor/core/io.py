"""Files that are never half-written, and the facts every record carries."""
from __future__ import annotations

import contextlib
import errno
import json
import os
import platform
import shutil
import tempfile
from typing import Iterator

from compressor.core.errors import CompressorError


def file_version(path: str) -> tuple:
    """What tells one state of a file from another without reading it: (absolute path, size,
    modification time in ns, inode). A key for what a process parsed from the file once; raises
    OSError when the file cannot be looked at."""
    st = os.stat(path)
    return os.path.abspath(path), st.st_size, st.st_mtime_ns, st.st_ino


def write_json(path: str, data) -> None:
    """Write JSON to a temporary name beside ``path``, then rename it into place."""
    write_text(path, json.dumps(data, indent=2, default=_jsonable) + "\n")


def write_text(path: str, text: str) -> None:
    """Write ``text`` to a temporary name beside ``path``, then rename it into place."""
    write_bytes(path, text.encode("utf-8"))


def save_figure(fig, path: str, dpi: int = 110) -> str:
    """Write a matplotlib figure as PNG (temporary name, then renamed) and close it."""
    import io

    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    plt.close(fig)
    write_bytes(path, buf.getvalue())
    return path


def write_bytes(path: str, data: bytes) -> None:
    """Write ``data`` to a temporary name beside ``path``, then rename it into place."""
    folder = os.path.dirname(os.path.abspath(path))
    tmp = None
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=folder)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes files private; keep the usual mode
        os.replace(tmp, path)
    except BaseException as exc:
        if tmp is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        _raise_if_disk_full(exc, path)
        raise


class DiskFull(CompressorError):
    """The disk (or the user's quota) filled up while the toolkit was writing ``path``."""

    def __init__(self, path: str, detail: str):
        self.path, self.detail = path, detail
        super().__init__(f"no space left on device while writing {path} ({detail}); "
                         "free some space and run the command again")


_DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
# writers in Rust or C++ (safetensors, onnx, torch) report a full disk in their message only
_DISK_FULL_TEXTS = ("No space left on device", "Disk quota exceeded", "os error 28")


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` (or an error it was raised from) says the disk or quota is full."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, DiskFull):
            return True
        if isinstance(exc, OSError) and exc.errno in _DISK_FULL_ERRNOS:
            return True
        if isinstance(exc, Exception) and not isinstance(exc, CompressorError) and \
                any(t in str(exc) for t in _DISK_FULL_TEXTS):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _raise_if_disk_full(exc: BaseException, path: str) -> None:
    """A full disk is one line naming what was being written, wherever in a writer it struck."""
    if isinstance(exc, DiskFull):
        raise DiskFull(path, exc.detail) from None
    if is_disk_full(exc):
        lines = str(exc).strip().splitlines() or [type(exc).__name__]
        name = getattr(exc, "filename", None)
        detail = (f"{os.path.basename(str(name))}: " if name else "") + lines[0][:200]
        raise DiskFull(path, detail) from None


def read_json(path: str):
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        raise CompressorError(f"{path}: no such file") from None
    except json.JSONDecodeError as exc:
        raise CompressorError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None


def check_output_dir(path: str, overwrite: bool = False) -> None:
    """Refuse to write over a file or a non-empty folder unless the user said ``--overwrite``.

    An empty folder is fine (the user may have made it for us); a user's files are
    never replaced by accident.
    """
    if overwrite or not os.path.lexists(path):
        return
    if not os.path.isdir(path):
        raise CompressorError(f"output {path} is a file, not a folder")
    if os.listdir(path):
        raise CompressorError(f"output folder {path} is not empty; pass --overwrite or choose another")


@contextlib.contextmanager
def atomic_dir(path: str, overwrite: bool = True) -> Iterator[str]:
    """Yield a temporary folder that replaces ``path`` only once the block succeeds.

    With ``overwrite=False`` an existing file or non-empty folder is refused.
    """
    path = os.path.abspath(path)
    check_output_dir(path, overwrite)
    parent = os.path.dirname(path)
    try:
        os.makedirs(parent, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(path)}.tmp-", dir=parent)
    except OSError as exc:
        _raise_if_disk_full(exc, path)
        raise
    os.chmod(tmp, 0o777 & ~_umask())
    try:
        yield tmp
        if os.path.exists(path):
            old = tempfile.mkdtemp(prefix=f".{os.path.basename(path)}.old-", dir=parent)
            os.replace(path, os.path.join(old, "x"))
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        # the outermost folder being written names the error, however deep the writer was
        _raise_if_disk_full(exc, path)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def versions() -> dict:
    """Library versions and hardware, so a figure can be traced to where it was made."""
    import numpy
    import torch
    import transformers

    from compressor.core.version import __version__

    info = {
        "compressor": __version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "numpy": numpy.__version__,
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
        info["cuda"] = torch.version.cuda
    return info


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _jsonable(obj):
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if hasattr(obj, "__fspath__"):
        return os.fspath(obj)
    raise TypeError(f"cannot write {type(obj).__name__} as JSON")
