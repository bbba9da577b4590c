"""No orphans: when a sweep's process dies without its clean-up (kill -9, a lost terminal, an OOM kill), the
processes it started stop within seconds instead of training on unseen.

joblib's loky workers outlive their parent (an idle one waits for work for minutes, ignoring SIGTERM), and a
worker's job keeps training as long as the worker lives; a rerun then finds those jobs locked ("in use by
another lnbench process"). So while a sweep runs under the basic or joblib launcher, a guardian process
forked from the sweep's process notes its children every half second, and when the sweep's process is gone
(this process's parent changes) it SIGKILLs the ones in the sweep's process group: joblib's workers and
resource trackers. A job runs in a process group of its own (lnbench.launch.process.isolate), and its parent's death
sends it SIGTERM (PR_SET_PDEATHSIG): it checkpoints and stops, so that a rerun resumes it.

`lnbench check` starts each sweep so that the sweep gets SIGTERM when check dies (die_with_parent): the sweep
then stops as on Ctrl-C, each job after a checkpoint. Linux only (/proc and prctl); elsewhere nothing is watched.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

TICK_S = 0.5
DONE = b"done"


@contextmanager
def guarding() -> Iterator[None]:
    """While the block runs, a guardian watches this process; it exits quietly when the block ends."""
    if not sys.platform.startswith("linux") or not Path(f"/proc/{os.getpid()}/task").is_dir():
        yield
        return
    read_end, write_end = os.pipe()
    sys.stdout.flush(), sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(write_end)
            guard(read_end, os.getppid())
        except BaseException:  # noqa: BLE001 - the guardian never returns into the sweep's code
            code = 1
        finally:
            os._exit(code)
    os.close(read_end)
    try:
        yield
    finally:
        os.write(write_end, DONE)
        os.close(write_end)
        os.waitpid(pid, 0)


def guard(read_end: int, sweep_pid: int) -> None:
    """Notes the sweep's children until it says it is done (return) or dies (stop them, then return)."""
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # the terminal's signals are the sweep's to take
        signal.signal(s, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    seen: dict[int, str] = {}
    while os.getppid() == sweep_pid:
        ready, _, _ = select.select([read_end], [], [], TICK_S)
        if ready and os.read(read_end, len(DONE)) == DONE:
            return
        seen.update(children(sweep_pid))
    stop(seen, os.getpgid(0))


def children(pid: int) -> dict[int, str]:
    """The child processes of `pid` (of any of its threads), each with its start time (a pid can be reused)."""
    found: dict[int, str] = {}
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            pids = Path(f"/proc/{pid}/task/{task}/children").read_text().split()
        except OSError:
            continue
        for child in map(int, pids):
            if (start := started(child)) is not None:
                found[child] = start
    return found


def started(pid: int) -> str | None:
    """A process's start time in clock ticks since boot (field 22 of /proc/PID/stat), None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def stop(seen: dict[int, str], group: int) -> None:
    """SIGKILL each process noted that still runs (the same process: same start time) in the sweep's group."""
    stopped = []
    for pid, start in seen.items():
        if pid == os.getpid():
            continue
        try:
            if started(pid) == start and os.getpgid(pid) == group:
                os.kill(pid, signal.SIGKILL)
                stopped.append(pid)
        except OSError:  # gone meanwhile
            continue
    if stopped:
        try:
            print(
                f"lnbench: the sweep's process died; its {len(stopped)} helper process(es) (joblib's workers and "
                "trackers) were stopped, and each running job stops after a checkpoint: run the same command again "
                "to resume.",
                file=sys.stderr,
                flush=True,
            )
        except OSError:  # the terminal is gone too
            pass


def die_with_parent() -> None:
    """Linux: SIGTERM to this process when its parent dies (a killed launcher leaves no orphan training; a killed
    `lnbench check` no orphan sweep). Called in a child, between fork and its work."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
