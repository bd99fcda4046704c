"""Files that are never half-written, and the facts every record carries."""
from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import tempfile
from typing import Iterator

from .errors import CompressorError


def write_json(path: str, data) -> None:
    """Write JSON to a temporary name beside ``path``, then rename it into place."""
    write_text(path, json.dumps(data, indent=2, default=_jsonable) + "\n")


def write_text(path: str, text: str) -> None:
    """Write ``text`` to a temporary name beside ``path``, then rename it into place."""
    write_bytes(path, text.encode("utf-8"))


def write_bytes(path: str, data: bytes) -> None:
    """Write ``data`` to a temporary name beside ``path``, then rename it into place."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes files private; keep the usual mode
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def read_json(path: str):
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        raise CompressorError(f"{path}: no such file") from None
    except json.JSONDecodeError as exc:
        raise CompressorError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None


@contextlib.contextmanager
def atomic_dir(path: str, overwrite: bool = True) -> Iterator[str]:
    """Yield a temporary folder that replaces ``path`` only once the block succeeds."""
    path = os.path.abspath(path)
    if os.path.exists(path) and not overwrite:
        raise CompressorError(f"{path} already exists")
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(path)}.tmp-", dir=parent)
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
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
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

    from . import __version__

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
