"""Where a run's and a sweep's time goes: named phases, timed by one switchable object, as torchtune's profiler is.

A `Timer` adds up the seconds of each phase it times (a run's summary takes its eval_time and checkpoint_time
from them). With $LNBENCH_PHASES=FILE it also appends each phase as one JSON line to FILE; unset (the default),
it writes nothing and reads no wall clock: a phase costs two perf_counter reads and a dict update.

Every process of a sweep writes there (the sweep's process, joblib's workers, each job's forked child: the
variable is inherited), each line in one O_APPEND write, so lines from parallel processes never interleave.
A line: {"phase", "t0", "t1", "pid", "job"} with `job` the run directory where the process knows it (None in
a worker before its job's directory exists: such lines belong to the next job of the same pid).
`lnbench bench`'s job-cost rows (lnbench.bench.jobcost) read them back by the names below.

What Hydra does around a job (compose its config, make its directory, set up logging, write .hydra/*.yaml) has
no hook of its own: it is timed only as a whole, the span between one job's callbacks and the next's.
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

from lnbench import environment

ENV = "LNBENCH_PHASES"

# ---- the phases, by name -------------------------------------------------------------------------
# The sweep's own process, once per sweep:
SWEEP_START = "sweep: process start to lnbench.cli"
SWEEP_PREFLIGHT = "sweep: preflight"
SWEEP_HYDRA = "sweep: Hydra's start-up (the sweep's config, the sweeper)"
SWEEP_END = "sweep: the end-of-sweep block"
SWEEP = "sweep: "  # the prefix of the above
WORKER_START = "worker: start to its first job"  # a joblib worker, once
# Spans that hold others ([brackets]: lnbench.bench.jobcost subtracts what they hold):
HYDRA_JOB = "[hydra job]"  # Hydra's on_job_start to its on_job_end (lnbench.launch.sweep.end's callback)
TASK = "[task]"  # lnbench's task function, which Hydra calls between them (lnbench.launch.entry.Job)
# The job, around its run (lnbench.launch.entry, lnbench.launch.process):
JOB_CHECKS = "job: lock, imports=, validate"
JOB_RUNTIME = "job: runtime, names"
JOB_WARM_UP = "job: warm-up (imports once per process)"
JOB_READY = "job: modules and dataset made ready (once per config)"
JOB_FORK = "job: fork"
JOB_PICKLED = "job: its answer, pickled"
JOB_EXIT = "job: the child's exit"
JOB_UNPICKLED = "job: its answer, unpickled"
# The run (lnbench.training.recipe):
RUN_SETUP = "run: config, checkpoint read, config.yaml"
RUN_DATA = "run: data"
RUN_MODEL = "run: model (its modules, C++ kernels, init)"
RUN_OPTIMIZER = "run: optimizer"
RUN_TRACKER = "run: tracker (metrics.jsonl, sinks, W&B)"
RUN_PROVENANCE = "run: provenance"
TRAINING_STEPS = "run: training steps"
EVAL_VAL = "run: evaluation (val)"  # the summary's eval_time
EVAL_TEST = "run: evaluation (test)"
CHECKPOINTS = "run: checkpoints"  # the summary's checkpoint_time
RUN_END = "run: summary.json, end block"
WORK = (TRAINING_STEPS, EVAL_VAL, EVAL_TEST)  # computing the job's numbers; the rest is the job's fixed cost


class Timer:
    """Times named phases: `with timer.phase(NAME): ...`, or `add(NAME, seconds)` for a span measured
    elsewhere; `seconds[NAME]` is the total so far. `file`: where each phase is also written (None: nowhere);
    `job`: the run directory its lines name."""

    def __init__(self, file: str | None = None, job: str | Path | None = None):
        self.file, self.job = file or None, None if job is None else str(job)
        self.seconds: dict[str, float] = defaultdict(float)
        self.marks: dict[str, float] = {}

    @classmethod
    def from_env(cls, job: str | Path | None = None) -> "Timer":
        """On where $LNBENCH_PHASES names a file."""
        return cls(_file(), job)

    @property
    def on(self) -> bool:
        return self.file is not None

    @contextmanager
    def phase(self, name: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - start)

    def add(self, name: str, seconds: float) -> None:
        """`seconds` more of phase `name`, a span that ends now."""
        self.seconds[name] += seconds
        if self.file is not None:
            now = time.time()
            self.write(name, now - seconds, now)

    def mark(self, key: str) -> None:
        """Remember now as `key`, for a phase that ends elsewhere (in another function, or a forked child)."""
        self.marks[key] = time.perf_counter()

    def since(self, name: str, key: str) -> None:
        """Phase `name`: from mark `key` (now, if never marked) to now."""
        self.add(name, time.perf_counter() - self.marks.get(key, time.perf_counter()))

    def since_process_start(self, name: str) -> None:
        """Phase `name`: from this process's start (Linux: /proc, to 10 ms) to now. Only when on: it reads /proc."""
        if self.file is not None and (start := process_start()) is not None:
            self.add(name, time.time() - start)

    def write(self, name: str, t0: float, t1: float) -> None:
        line = {"phase": name, "t0": t0, "t1": t1, "pid": os.getpid(), "job": self.job}
        fd = os.open(self.file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps(line) + "\n").encode())
        finally:
            os.close(fd)


_process: list[Timer] = []  # this process's Timer (a forked child inherits it, with its marks)


def timer() -> Timer:
    """This process's Timer, for the launcher's phases (a run times its own: Timer.from_env in the recipe)."""
    if not _process or _process[0].file != _file():
        _process[:] = [Timer.from_env()]
    return _process[0]


def _file() -> str | None:
    where = environment.path(ENV)
    return None if where is None else str(where)


def process_start() -> float | None:
    """This process's start, wall clock (Linux: /proc, to 10 ms); None elsewhere."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        boot = time.time() - float(Path("/proc/uptime").read_text().split()[0])  # /proc/stat's btime: whole seconds
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
