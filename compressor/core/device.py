"""Which device and number format a run uses."""
from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from compressor.core import distributed
from compressor.core.errors import CompressorError
from compressor.core.settings import device_problem

if TYPE_CHECKING:
    import torch

PRECISIONS = ("fp32", "bf16", "fp16")


def resolve_device(name: str = "auto") -> torch.device:
    """``auto`` picks CUDA when present; asking for CUDA without it is an error, not a fallback."""
    import torch

    name = (name or "auto").lower()
    problem = device_problem(name)
    if problem:
        raise CompressorError(problem)
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise CompressorError(f"device '{name}' was asked for but this machine has no CUDA GPU "
                                  "that torch can use; pass --device cpu")
        if distributed.world_size() > 1:   # one GPU per process: the one torchrun numbered
            if name != "cuda":
                raise CompressorError(f"device '{name}' names one GPU, but each of the "
                                      f"{distributed.world_size()} processes takes its own; "
                                      "pass --device cuda or auto")
            return torch.device("cuda", distributed.local_rank())
        return torch.device(name)
    return torch.device("cpu")


def check_precision(precision: str, device: torch.device) -> str:
    if precision not in PRECISIONS:
        raise CompressorError(f"unknown precision '{precision}'; use one of {', '.join(PRECISIONS)}")
    if precision == "fp16" and device.type != "cuda":
        raise CompressorError("fp16 training needs a CUDA GPU; use bf16 or fp32 on the CPU")
    if precision == "bf16" and device.type == "cpu":
        _warn_emulated_bf16()
    return precision


_WARNED: set = set()


def _warn_emulated_bf16(flags=None, machine=None) -> bool:
    """bf16 on an x86 CPU without AVX-512 BF16 or AMX is emulated (measured on an AVX2-only AMD
    EPYC: a 256x384 by 384x1536 matmul 9x slower than fp32): one line on stderr, once per process.
    Returns whether it warned."""
    import platform
    import sys

    from compressor.core.presets import cpu_flags

    flags = cpu_flags() if flags is None else flags
    machine = (platform.machine() if machine is None else machine).lower()
    if machine not in ("x86_64", "amd64") or flags & {"avx512_bf16", "amx_bf16"} or "bf16" in _WARNED:
        return False
    _WARNED.add("bf16")
    print("warning: precision bf16 on this CPU (no AVX-512 BF16 or AMX) is emulated and trains several "
          "times slower than fp32; give precision fp32 here", file=sys.stderr)
    return True


def autocast(device: torch.device, precision: str):
    import torch

    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)
