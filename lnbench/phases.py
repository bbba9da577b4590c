"""Where a job's time goes: named phases, each a (start, end) wall-clock pair, appended as one JSON line to the
file that $LNBENCH_PHASES names. Unset (the default), nothing is recorded and a phase costs one dict lookup.

Every process of a sweep writes there (the sweep's process, joblib's workers, each job's forked child: the
variable is inherited), each line in one O_APPEND write, so lines from parallel processes never interleave.
A line: {"phase", "t0", "t1", "pid", "job"} with `job` the run directory where the process knows it (None in
a worker before its job's directory exists: such lines belong to the next job of the same pid).
`lnbench bench`'s job-cost rows (lnbench.bench.jobcost) read them back into a table of ms per phase per job.
"""

from __future__ import annotations

import json
import os
import time
from contextlib import contextmanager
from pathlib import Path

ENV = "LNBENCH_PHASES"
_job: str | None = None  # the run directory of this process's current job
_marks: dict[str, float] = {}


def enabled() -> bool:
    return bool(os.environ.get(ENV))


def set_job(run_dir: str | Path | None) -> None:
    global _job
    _job = None if run_dir is None else str(run_dir)


def record(name: str, t0: float, t1: float | None = None) -> None:
    """Phase `name` from wall time t0 to t1 (now if None)."""
    path = os.environ.get(ENV)
    if not path:
        return
    line = {"phase": name, "t0": t0, "t1": time.time() if t1 is None else t1, "pid": os.getpid(), "job": _job}
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(line) + "\n").encode())
    finally:
        os.close(fd)


def mark(key: str) -> None:
    """Remember now as `key`, for a phase that ends elsewhere: record(name, marked(key))."""
    _marks[key] = time.time()


def marked(key: str) -> float:
    return _marks.get(key, time.time())


@contextmanager
def phase(name: str):
    """`with phase("data"): ...` records the block's wall time as `name` (nothing when $LNBENCH_PHASES is unset)."""
    if not os.environ.get(ENV):
        yield
        return
    t0 = time.time()
    try:
        yield
    finally:
        record(name, t0)


def process_start() -> float | None:
    """This process's start, wall clock (Linux: /proc, to 10 ms); None elsewhere."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        boot = time.time() - float(Path("/proc/uptime").read_text().split()[0])  # /proc/stat's btime: whole seconds
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
