"""A sweep job in a forked process of its own, so that a segfault or an OOM kill ends only that job; the
process warm-up every job shares; the crash.log a crashed job leaves.

Under the basic and joblib launchers the sweep's process (or a joblib worker) runs many jobs; submitit
starts a process per job already (lnbench.launch.entry does not fork there).
"""

from __future__ import annotations

import faulthandler
import gc
import logging
import os
import pickle
import signal
import sys
import threading
import traceback
from contextlib import contextmanager
from pathlib import Path

from lnbench import phases
from lnbench.errors import Interrupted
from lnbench.launch.failures import JobCrashed
from lnbench.launch.process.guardian import die_with_parent
from lnbench.launch.process.heap import keep_freed_memory
from lnbench.runs import CRASH_LOG

log = logging.getLogger("lnbench")
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def crash_log(run_dir: Path):
    """A native traceback on a segfault (faulthandler): on stderr, and for a forked sweep job in its crash.log,
    which its parent writes only when there is something to say (in_child_process), so that a run killed with
    kill -9 leaves no empty file behind. An empty crash.log an older lnbench left is removed. Called under the
    run's lock, so the file is never another process's."""
    path = run_dir / CRASH_LOG
    if path.is_file() and path.stat().st_size == 0:
        path.unlink()
    faulthandler.enable(sys.__stderr__)
    try:
        yield
    finally:
        faulthandler.disable()


def in_child_process(run_dir: Path, fn, *args, **kwargs):
    """`fn(*args, **kwargs)` in a forked child process: its return value or its exception (with the child's
    traceback as `child_traceback`) comes back through a pipe; a child killed by a signal (segfault, OOM
    kill, SIGKILL) becomes JobCrashed, noted in crash.log.

    Hand-written rather than multiprocessing: a fork costs milliseconds (a spawned interpreter would
    import torch again, ~2 s per job), and the parent must answer SIGINT/SIGTERM by passing them on to
    the job (which checkpoints) and waiting for it, not by dying first. The child keeps the parent's
    signal mask: in a sweep (lnbench.launch.sweep.stop) a stop request waits, blocked, until the train loop's
    StopSignals takes it, so that a job asked to stop while it starts still checkpoints.
    """
    warm_up()
    read_end, write_end = os.pipe()
    native_end, native_write = os.pipe()  # the child's faulthandler output, for its crash.log
    for h in [*logging.getLogger().handlers, *log.handlers]:  # or the child writes their buffers again
        h.flush()
    sys.stdout.flush(), sys.stderr.flush()
    timer = phases.timer()
    timer.mark(phases.JOB_FORK)
    pid = os.fork()
    if pid == 0:
        timer.since(phases.JOB_FORK, phases.JOB_FORK)
        os.close(native_end)
        os.set_blocking(native_write, False)  # a traceback longer than the pipe is cut, never a hang
        faulthandler.enable(native_write, all_threads=True)
        _child(read_end, write_end, fn, args, kwargs)  # never returns
    os.close(write_end)
    os.close(native_write)
    with passing_signals_on(pid) as received:
        with os.fdopen(read_end, "rb") as r:
            data = r.read()
        with timer.phase(phases.JOB_EXIT):
            _, status = os.waitpid(pid, 0)
    with os.fdopen(native_end, "rb") as r:
        native = r.read()
    if native:
        with open(run_dir / CRASH_LOG, "ab") as f:
            f.write(native)
    with timer.phase(phases.JOB_UNPICKLED):
        return _answer(data, status, received, run_dir)


def _child(read_end: int, write_end: int, fn, args, kwargs) -> None:
    """The child: runs the job, sends back what it returned or raised, never returns into the launcher."""
    code = 0
    try:
        os.close(read_end)
        os.setpgid(0, 0)  # Ctrl-C reaches it once, from the parent (two would mean "stop at once")
        die_with_parent()
        try:
            answer = ("returned", fn(*args, **kwargs))
        except BaseException as e:  # noqa: BLE001 - every outcome goes back to the parent
            e.child_traceback = traceback.format_exc()
            answer = ("raised", e)
        with phases.timer().phase(phases.JOB_PICKLED):
            try:
                data = pickle.dumps(answer)
            except Exception:  # noqa: BLE001 (an exception that cannot be pickled: its text and traceback go back)
                error = RuntimeError(f"{type(answer[1]).__name__}: {answer[1]}")
                error.child_traceback = getattr(answer[1], "child_traceback", None)
                data = pickle.dumps(("raised", error))
        with os.fdopen(write_end, "wb") as w:
            w.write(data)
    except BaseException:  # noqa: BLE001
        code = 1
    finally:
        logging.shutdown()
        sys.stdout.flush(), sys.stderr.flush()
        os._exit(code)


@contextmanager
def passing_signals_on(pid: int):
    """SIGINT and SIGTERM to this process are passed on to the job `pid` (which checkpoints and raises
    Interrupted, which comes back through the pipe); yields the signals received. Unblocked meanwhile:
    a sweep's process blocks them between jobs (lnbench.launch.sweep.stop)."""
    received: list[int] = []

    def pass_on(signum, frame):
        received.append(signum)
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    if threading.current_thread() is not threading.main_thread():
        yield received
        return
    previous = {s: signal.signal(s, pass_on) for s in STOP_SIGNALS}
    mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    try:
        yield received
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for s, handler in previous.items():
            signal.signal(s, handler)


def _answer(data: bytes, status: int, received: list[int], run_dir: Path):
    if data:
        kind, value = pickle.loads(data)
        if kind == "raised":
            raise value
        return value
    if received:  # the job ended on the signal before it could answer
        raise Interrupted(received[0], -1, run_dir)
    why = (
        f"its process was killed by {signal.Signals(-os.waitstatus_to_exitcode(status)).name}"
        if os.WIFSIGNALED(status)
        else f"its process exited with code {os.waitstatus_to_exitcode(status)}"
    )
    hint = " (the kernel's OOM killer sends SIGKILL when memory runs out; see `dmesg`)" if "SIGKILL" in why else ""
    with open(run_dir / CRASH_LOG, "a") as f:
        f.write(f"lnbench: {why}{hint} before the job finished.\n")
    raise JobCrashed(f"{why}{hint}: see {run_dir / CRASH_LOG}; re-run the sweep to retry it from its last checkpoint")


def warm_up() -> None:
    """Once per process: the imports every job needs, then their objects out of the garbage collector's way.

    torch's first optimizer imports torch._dynamo (~1 s on this machine): done here, a forked job finds it
    loaded. Then gc.freeze() moves the ~2,000 modules' objects to the permanent generation, which the
    collector never walks again: not in a job's full collections, not in the interpreter's exit, whose
    collections alone took 0.85 s with torch and torch._dynamo loaded (0.14 s frozen). A Hydra process
    or joblib worker pays that exit once per sweep, and the sweep waits for it. Frozen once, right
    after the imports, so no job's garbage is kept; a forked job inherits the frozen generation. Whether
    it is done is a flag (inherited by a forked job too): asking the process (gc.get_freeze_count) walks the
    ~300,000 frozen objects, 26 ms a call, twice a job.
    """
    global warmed
    if warmed:
        return
    import torch  # noqa: PLC0415 (torch: in the warm-up only)

    keep_freed_memory()  # a joblib worker did not start through lnbench.cli
    torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))])
    gc.freeze()
    warmed = True


warmed = False  # warm_up has run in this process (or in the parent it was forked from)
