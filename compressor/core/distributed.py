"""Several processes training one model (data parallel): who is who, what only rank 0 does,
and relaunching a command under torchrun.

A command started by ``torchrun`` (or ``accelerate launch``, or ``--nproc N``, which
relaunches under torchrun) finds ``WORLD_SIZE``, ``RANK`` and ``LOCAL_RANK`` in its
environment. Every process runs the same training steps on its share of each batch;
rank 0 alone writes files. On CPUs the processes talk through gloo, on GPUs through
NCCL (one GPU a process), both set up by ``accelerate``.
"""
from __future__ import annotations

import datetime
import os
from typing import Any, List, Optional, Sequence

from compressor.core.errors import CompressorError

# NVLink multicast (NVLS) can take a host's GPUs out of service; the GPU machines this
# project measures on require it off, in every process we start too.
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                 "NVSHMEM_DISABLE_NVLS": "1"}
# Ranks wait in a collective while rank 0 alone runs a stage that does not train (export,
# quantisation, a benchmark): long enough for those, short enough that a real hang ends.
WAIT = datetime.timedelta(hours=3)


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1") or 1)


def rank() -> int:
    return int(os.environ.get("RANK", "0") or 0)


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0") or 0)


def is_main() -> bool:
    """Whether this process writes files and prints progress (always, in one process)."""
    return rank() == 0


def init(device: str = "auto"):
    """Join the process group (once); returns accelerate's ``PartialState``, or None alone."""
    if world_size() <= 1:
        return None
    import torch
    from accelerate import PartialState

    cpu = (device or "auto").lower() == "cpu" or not torch.cuda.is_available()
    if cpu:
        os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // world_size())))
    for key, value in MULTICAST_OFF.items():
        os.environ.setdefault(key, value)
    return PartialState(cpu=cpu, timeout=WAIT)


def _group_ready() -> bool:
    if world_size() <= 1:
        return False
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def barrier() -> None:
    if _group_ready():
        import torch.distributed as dist

        dist.barrier()


def broadcast(obj: Any) -> Any:
    """Rank 0's ``obj`` on every rank (anything picklable)."""
    if not _group_ready():
        return obj
    import torch.distributed as dist

    box = [obj if is_main() else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def gather(items: Sequence) -> List:
    """Every rank's ``items``, concatenated in rank order, on every rank."""
    if not _group_ready():
        return list(items)
    import torch.distributed as dist

    parts: List[Optional[list]] = [None] * world_size()
    dist.all_gather_object(parts, list(items))
    return [x for part in parts for x in part]


def shard(items: Sequence, index: Optional[int] = None, count: Optional[int] = None) -> Sequence:
    """This rank's contiguous share of ``items`` (the first ranks take one more when uneven),
    so that ``gather`` of the shares is ``items`` in order."""
    index = rank() if index is None else index
    count = world_size() if count is None else count
    base, extra = divmod(len(items), count)
    start = index * base + min(index, extra)
    return items[start:start + base + (index < extra)]


# what gloo and NCCL say when another process of the group died (killed, crashed, out of memory)
_PEER_LOST = ("Connection closed by peer", "Connection reset by peer", "Broken pipe",
              "remote process exited", "NCCL communicator was aborted", "ncclRemoteError")


def peer_lost(exc: BaseException) -> bool:
    """Whether ``exc`` is a collective failing because another process of the group is gone."""
    return world_size() > 1 and isinstance(exc, RuntimeError) and any(t in str(exc) for t in _PEER_LOST)


def peer_lost_error() -> CompressorError:
    """The one line for a run whose other process died: which one (when it can only be one) and
    that running the command again resumes it."""
    others = [r for r in range(world_size()) if r != rank()]
    who = f"rank {others[0]}" if len(others) == 1 else "another rank"
    return CompressorError(f"{who} of this {world_size()}-process run stopped (killed or crashed); "
                           "run the same command again to resume from the last finished stage")


_LEFT_GROUP = False   # this process joined a process group and has left it (shutdown)


def shutdown() -> None:
    """Leave the process group at the end of a command (torch warns when a process does not)."""
    global _LEFT_GROUP
    if _group_ready():
        import torch.distributed as dist

        dist.destroy_process_group()
        _LEFT_GROUP = True


def left_group() -> bool:
    """Whether this process was one rank of a process group that :func:`shutdown` has left."""
    return _LEFT_GROUP


def launch(nproc: int, argv: Sequence[str], device: Optional[str] = None) -> int:
    """Run ``python -m compressor ARGV`` in ``nproc`` processes on this host under torchrun
    (its elastic agent runs in this process); returns the exit status."""
    import logging
    import signal

    import torch
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.run import get_args_parser, run

    from compressor.core import children

    if world_size() > 1:
        raise CompressorError("--nproc starts the processes itself; this is already one of "
                              f"{world_size()} (torchrun or accelerate launch): drop --nproc")
    if nproc < 1:
        raise CompressorError(f"--nproc must be at least 1, got {nproc}")
    on_gpu = (device or "auto").lower() != "cpu" and torch.cuda.is_available()
    if on_gpu and nproc > torch.cuda.device_count():
        raise CompressorError(f"--nproc {nproc} needs {nproc} GPUs; this machine has "
                              f"{torch.cuda.device_count()} (or pass --device cpu)")
    for key, value in MULTICAST_OFF.items():
        os.environ.setdefault(key, value)
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
    # the ranks print their own errors; the agent's report of a failed child repeats them, and its
    # "Received 15 death signal, shutting down workers" says again what the interrupted line says
    # (its modules' loggers carry their own level, so each is set, not only the package's)
    for name in ["torch.distributed.elastic", *logging.root.manager.loggerDict]:
        if name.startswith("torch.distributed.elastic"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
    args = get_args_parser().parse_args(
        ["--standalone", f"--nproc-per-node={nproc}", "--module", "compressor", *argv])
    # the ranks leave a rank's death (and the agent's SIGTERM after it) to this process: one line;
    # they end with it too when it is killed outright (children.follow_parent, in the CLI's main)
    os.environ[LAUNCHED] = "1"
    os.environ[children.PARENT] = str(os.getpid())
    try:
        run(args)
    except SignalException as exc:
        # Ctrl-C or SIGTERM here: the agent has stopped the ranks (quietly, QUIET_EXIT); this
        # process says it as one command stopped by the user would, not with the agent's traceback
        from compressor.core.errors import Terminated

        raise (KeyboardInterrupt() if exc.sigval == signal.SIGINT else Terminated()) from None
    except Exception as exc:   # ChildFailedError: a rank ended with an error it has printed
        failures = getattr(exc, "failures", None)
        if not failures:
            raise
        _say_who_died(failures, nproc, argv)
        return next((f.exitcode for f in failures.values() if f.exitcode and f.exitcode != QUIET_EXIT),
                    1) or 1
    finally:
        os.environ.pop(LAUNCHED, None)
        os.environ.pop(children.PARENT, None)
    return 0


# A rank started by ``launch`` ends with this status, saying nothing, when another rank died
# (its collective failed, or the agent stopped it): the launcher says which one in one line.
LAUNCHED = "COMPRESSOR_NPROC_RANK"
QUIET_EXIT = 75


def quiet_exit(exc: BaseException) -> bool:
    """Whether this rank, started by ``launch``, should leave ``exc`` (another rank's death, or the
    signal the agent passes on to the ranks: SIGTERM after a death, Ctrl-C or SIGTERM sent to the
    launching process) unsaid and end with :data:`QUIET_EXIT`: the launching process says it once."""
    return bool(os.environ.get(LAUNCHED)) and world_size() > 1 and (
        isinstance(exc, KeyboardInterrupt) or peer_lost(exc))


def _say_who_died(failures: dict, nproc: int, argv: Sequence[str]) -> None:
    """One line for a rank killed by a signal (the others stopped with it, quietly); a rank that
    ended with an error has printed its own line."""
    import signal
    import sys

    dead = sorted((r, f) for r, f in failures.items() if f.exitcode != QUIET_EXIT)
    if not dead or any(f.exitcode > 0 and f.exitcode < 128 for _, f in dead):
        return
    r, failure = dead[0]
    code = failure.exitcode
    try:
        how = f"was killed ({signal.Signals(-code if code < 0 else code - 128).name})"
    except ValueError:
        how = f"ended with status {code}"
    resume = ("run the same command again to resume from the last finished stage"
              if any(a in ("run", "demo") for a in argv[:2]) else "run the same command again")
    print(f"error: rank {r} of {nproc} {how}; the other process(es) stopped with it: {resume}",
          file=sys.stderr)
