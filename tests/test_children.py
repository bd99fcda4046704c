"""Processes a command starts end with it: a child follows its parent when the parent is killed
outright, a data-parallel run stopped by a signal says so in one line, and auto's workers are
stopped with the process that started them."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from compressor.core import children
from compressor.core.errors import Terminated

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (killed, not yet reaped by init) counts as gone
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_gone(pid: int, seconds: float) -> bool:
    end = time.time() + seconds
    while time.time() < end:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return not _alive(pid)


FOLLOW = "from compressor.core.children import follow_parent; follow_parent(interval=0.1)\n"
PARENT = textwrap.dedent("""
    import subprocess, sys, time
    from compressor.core import children
    child = subprocess.Popen([sys.executable, "-c", {code!r}], env=children.env())
    print(child.pid, flush=True)
    time.sleep(60)
""")


@pytest.mark.e2e
@pytest.mark.parametrize("follows", [True, False])
def test_a_child_ends_with_its_parent_killed_outright(follows):
    code = (FOLLOW if follows else "") + "import time; time.sleep(60)"
    parent = subprocess.Popen([sys.executable, "-c", PARENT.format(code=code)], cwd=ROOT,
                              stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    try:
        time.sleep(0.5)   # the child has started following
        assert _alive(child)
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        # the control (no follow_parent) shows the test can fail: that child outlives its parent
        assert _wait_gone(child, 5) is follows
    finally:
        if _alive(child):
            os.kill(child, signal.SIGKILL)
        parent.stdout.close()


@pytest.mark.unit
def test_follow_parent_passes_the_variable_to_no_grandchild(monkeypatch):
    monkeypatch.setenv(children.PARENT, str(os.getppid()))
    monkeypatch.setattr(children, "_following", True)   # no thread in the test process
    children.follow_parent()
    assert children.PARENT not in os.environ
    assert children.env()[children.PARENT] == str(os.getpid())


@pytest.mark.unit
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_data_parallel_run_stopped_by_a_signal_is_one_line(sig, monkeypatch, capsys, tmp_path):
    # torchrun's agent turns Ctrl-C/SIGTERM into SignalException after stopping the ranks; the
    # command used to end with its traceback and status 1
    import torch.distributed.run as torchrun
    from torch.distributed.elastic.multiprocessing.api import SignalException

    from compressor.cli import main

    told = []

    def agent(args):
        told.append(os.environ.get(children.PARENT))   # what the ranks inherit
        raise SignalException(f"Process {os.getpid()} got signal: {int(sig)}", sigval=sig)

    monkeypatch.setattr(torchrun, "run", agent)
    recipe = tmp_path / "r.yaml"
    recipe.write_text("name: r\n")
    with pytest.raises(SystemExit) as stopped:
        main(["run", str(recipe), "--out", str(tmp_path / "o"), "--nproc", "2", "--device", "cpu"])
    err = capsys.readouterr().err
    assert stopped.value.code == 130 and "Traceback" not in err and "SignalException" not in err, err
    assert err.strip().splitlines() == ["interrupted: run the same command again to resume"], err
    assert told == [str(os.getpid())] and children.PARENT not in os.environ   # ranks follow this process


@pytest.mark.unit
def test_a_rank_leaves_an_interrupt_to_the_launching_process(monkeypatch):
    from compressor.core import distributed

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv(distributed.LAUNCHED, "1")
    # the agent passes Ctrl-C on to the ranks as SIGINT: each would print its own line
    assert distributed.quiet_exit(KeyboardInterrupt()) and distributed.quiet_exit(Terminated())


@pytest.mark.integration
def test_auto_stops_its_other_workers_when_it_is_stopped(monkeypatch, tmp_path):
    from compressor.auto import study

    started, envs = [], []
    real_popen = subprocess.Popen

    def popen(args, **kwargs):   # a worker that would search for a minute
        envs.append((kwargs.get("env") or {}).get(children.PARENT))   # they follow this process
        started.append(real_popen([sys.executable, "-c", "import time; time.sleep(60)"], **kwargs))
        return started[-1]

    def search(out, worker, log=None):
        raise Terminated()   # SIGTERM to this process while it searches

    monkeypatch.setattr(study.subprocess, "Popen", popen)
    monkeypatch.setattr(study, "require_optuna", lambda: None)
    monkeypatch.setattr(study, "prepare", lambda *a: {"out": str(tmp_path)})
    monkeypatch.setattr(study, "search", search)
    begun = time.time()
    with pytest.raises(Terminated):
        study.run_auto("teacher", str(tmp_path), {"workers": 3}, log=lambda msg: None)
    assert len(started) == 2 and time.time() - begun < 20   # not the workers' whole minute
    assert all(p.returncode == -signal.SIGTERM for p in started)
    assert envs == [str(os.getpid())] * 2


@pytest.mark.unit
def test_an_auto_worker_stopped_by_a_signal_exits_quietly(monkeypatch, capsys):
    from compressor.auto import study

    def search(out, worker, log=None):
        raise Terminated()

    monkeypatch.setattr(study, "search", search)
    try:
        code = study.main(["/nowhere", "1"])
    except KeyboardInterrupt:
        pytest.fail("the worker's interrupt escaped its main: Python prints a traceback for it")
    assert code == 130
    assert capsys.readouterr().err == ""
