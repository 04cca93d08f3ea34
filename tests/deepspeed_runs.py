"""What every test that launches DeepSpeed on this machine shares: the launch environment a node gives it, a
master port that no other run holds, and the shared-memory buffers its ranks leave behind.

Tests run in parallel (pytest-xdist workers, and the mutation benchmark's parallel copies), so two DeepSpeed jobs
may start at the same moment: each needs its own rendezvous port, and a test may delete only its own jobs'
buffers. Nothing here is read by trainfleet itself.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

VENV_BIN = Path(sys.executable).parent

# Master ports come from below the kernel's ephemeral range (net.ipv4.ip_local_port_range, 32768-60999 by
# default), so no outgoing connection or port-0 server (moto, the metadata stand-ins) is ever given one.
MASTER_PORTS = range(20000, 32000)
_LOCKS = Path(tempfile.gettempdir()) / "trainfleet-test-master-ports"
_held: dict[int, int] = {}  # port -> the fd holding its lock file, for this process's lifetime
_cleaned: set[int] = set()  # ports whose jobs' buffers are gone


# What makes this machine's CPU ranks stand in for a node's GPUs: DeepSpeed's CPU accelerator, gloo over loopback,
# and torch.compile off. The trainer compiles nothing; DeepSpeed alone calls torch.compile, at import, on Muon's
# Newton-Schulz kernel (runtime/zero/muon/original_muon.py, imported by every ZeRO engine's optimizer check and never
# run by an AdamW job), and on CPU that loads the whole inductor: 1.5 s of CPU per rank, 46 ranks a suite. A GPU
# node's compiler is another backend (triton) that this machine could not test anyway.
CPU_RANKS = {"DS_ACCELERATOR": "cpu", "GLOO_SOCKET_IFNAME": "lo", "TORCHDYNAMO_DISABLE": "1"}


def launch_env(**extra: str) -> dict[str, str]:
    """This process's environment as a node's launch sees it: the training venv first on PATH (its `deepspeed`
    launcher, and the `ninja` DeepSpeed builds its CPU ops with), CPU ranks talking over loopback (CPU_RANKS).

    The venv first, always: this machine also has Debian's ninja 1.11 beside pip's 1.13, whose build logs hash
    commands differently, so runs that found one or the other rebuilt DeepSpeed's shm op (a minute of CPU) in
    turn, and two of those builds could run at once."""
    return {
        **os.environ,
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        **CPU_RANKS,
        **extra,
    }


def _bindable(port: int) -> bool:
    """Nothing listens on `port` now (torch's TCPStore binds every address, so this does too)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("", port))
        except OSError:
            return False
    return True


def master_port() -> int:
    """A port for one DeepSpeed job's rendezvous, held for this process's lifetime by a lock file that every
    other test process (another worker, another pytest run) respects; never handed out twice."""
    _LOCKS.mkdir(exist_ok=True)
    for port in MASTER_PORTS:
        if port in _held:
            continue
        fd = os.open(_LOCKS / str(port), os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        if not _bindable(port):
            os.close(fd)  # someone else's (not a test's): leave it
            continue
        _held[port] = fd
        return port
    raise RuntimeError(f"no free master port in {MASTER_PORTS.start}-{MASTER_PORTS.stop - 1}")


# DeepSpeed's CPU accelerator builds a shared-memory all-reduce (csrc/cpu/comm/shm.cpp shm_initialize) whose
# buffers are named deepspeed_allreduce_buffer_<uid>_<master addr>_<master port>_<rank> and stay in /dev/shm
# (memory: 66 MB per rank and run) after the run ends.
SHM = Path("/dev/shm")


def remove_finished_buffers() -> None:
    """Unlink the buffers of every job this process gave a master port. Called between tests: no job outlives the
    test (or the fixture) that started it, and a port is never given twice."""
    if not SHM.is_dir():
        return
    for port in set(_held) - _cleaned:
        for buffer in SHM.glob(f"deepspeed_allreduce_buffer_{os.getuid()}_*_{port}_*"):
            buffer.unlink(missing_ok=True)
        _cleaned.add(port)


def run_job(argv: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    """Run a DeepSpeed launcher to its end in a session of its own. On timeout its whole process group (the
    launcher's ranks too, which outlive a plain subprocess.run timeout) is killed and the test fails with the
    output so far."""
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"still running after {timeout}s: {argv}\n{(out + err)[-4000:]}") from None
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # a rank its launcher left behind
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)
