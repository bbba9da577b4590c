"""A pool of warm worker processes that run Hydra sweep jobs: started once (by `lnbench check`, for all its
rounds), each worker imports torch and lnbench once (lnbench.launch.process.isolate.warm_up) and then runs job
after job, each in a forked process of its own, exactly as a joblib worker runs them: Hydra composes the job's
config from the sweep's, `run_job` writes its `.hydra/` records and calls lnbench.launch.entry.Job. So a round
costs no Hydra start, no loky start and no worker imports (4-6 s a sweep before, docs/performance.md), and its
run directories are what a `lnbench train -m` sweep leaves.

The sweep's side (its config, its callbacks, the jobs' overrides) is composed by the caller
(lnbench.check.inprocess) and sent to a worker once per sweep, the first time the worker gets one of its jobs;
each job is then its number and overrides.

Signals: the workers run in a session of their own, so a Ctrl-C in the terminal reaches the caller only; the
caller passes a stop on to the workers that run a job (`signal_busy`), which pass it on to the job
(lnbench.launch.process.isolate.in_child_process): it writes its checkpoint and stops. An idle worker keeps
SIGINT and SIGTERM blocked. A worker exits when its connection closes: when the caller is done, or dies.
"""

from __future__ import annotations

import os
import pickle
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any

from hydra import version
from hydra.core.singleton import Singleton
from hydra.core.utils import JobStatus, setup_globals
from omegaconf.basecontainer import BaseContainer

from lnbench.config.launchers import cores_per_job
from lnbench.launch import hydra_job
from lnbench.launch.process.guardian import die_with_parent
from lnbench.launch.process.isolate import STOP_SIGNALS, warm_up


@dataclass
class SweepContext:
    """What every job of one sweep shares, as Hydra's joblib launcher hands it to each job."""

    key: str  # unique per sweep in this pool
    hydra_context: Any  # hydra.types.HydraContext: the config loader and the sweep's callbacks
    config: Any  # the sweep's config (multirun.yaml)
    task_function: Any
    singleton_state: dict
    ids: str = hydra_job.JOBLIB  # how the launcher named its jobs (hydra.job.id)
    version_base: str = "1.3"  # hydra.main's, which this process's Hydra keeps in a global


@dataclass
class JobDone:
    # completed (the task function returned), interrupted or not started (a stop reached it), failed (it
    # raised), error (Hydra could not run it)
    status: str
    error: str = ""
    seconds: float = 0.0  # the worker's time on it, composition included


@dataclass
class Worker:
    process: subprocess.Popen
    conn: Connection
    known: set[str] = field(default_factory=set)  # the sweeps whose context it holds
    job: Any = None  # the caller's ticket of the job it runs (None: idle)
    started: float = 0.0

    @property
    def pid(self) -> int:
        return self.process.pid


class WarmPool:
    def __init__(self, size: int, env: dict[str, str] | None = None):
        """`size` workers, each with os.environ updated by `env` (joblib_env: what joblib gives its workers)."""
        self.env = {**os.environ, **(env or {})}
        self.workers = [self._start() for _ in range(max(1, size))]

    def _start(self) -> Worker:
        ours, theirs = socket.socketpair()
        process = subprocess.Popen(
            [sys.executable, "-m", "lnbench.launch.process.pool", str(theirs.fileno())],
            pass_fds=[theirs.fileno()],
            env=self.env,
            preexec_fn=die_with_parent,  # a killed caller leaves no worker behind (and the worker's job checkpoints)
            start_new_session=True,
        )
        theirs.close()
        return Worker(process, Connection(ours.detach()))

    @property
    def idle(self) -> list[Worker]:
        return [w for w in self.workers if w.job is None]

    @property
    def busy(self) -> list[Worker]:
        return [w for w in self.workers if w.job is not None]

    def run(self, worker: Worker, ticket: Any, context: SweepContext, idx: int, overrides: list[str]) -> None:
        """Sends a job to an idle worker (with its sweep's context, the first time that worker sees the sweep)."""
        if context.key not in worker.known:
            worker.conn.send(("sweep", context.key, dumps(context)))
            worker.known.add(context.key)
        worker.conn.send(("job", context.key, idx, list(overrides)))
        worker.job, worker.started = ticket, time.time()

    def forget(self, key: str) -> None:
        """A sweep whose jobs have all run: its context is dropped by the workers that hold it."""
        for w in self.workers:
            if key in w.known:
                w.conn.send(("forget", key))
                w.known.discard(key)

    def results(self, timeout: float) -> list[tuple[Any, JobDone]]:
        """(ticket, outcome) of the jobs that ended within `timeout` seconds. A worker that died is replaced, and
        its job counts as an error (its own directory says what happened to it, lnbench.launch.process.isolate)."""
        conns = {w.conn: w for w in self.busy}
        if not conns:
            time.sleep(timeout)
            return []
        out = []
        for conn in wait(list(conns), timeout):
            w = conns[conn]
            try:
                done = conn.recv()
            except (EOFError, OSError):
                done = JobDone("error", f"its worker process (pid {w.pid}) died", time.time() - w.started)
                self._replace(w)
            out.append((w.job, done))
            w.job = None
        return out

    def _replace(self, dead: Worker) -> None:
        dead.conn.close()
        dead.process.wait()
        self.workers[self.workers.index(dead)] = self._start()

    def signal_busy(self, signum: int) -> None:
        """Passes a stop on to every worker that runs a job (which passes it on to the job)."""
        for w in self.busy:
            try:
                os.kill(w.pid, signum)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        """A second stop: every worker and the job it runs (each in a session of its own), at once."""
        for w in self.workers:
            try:
                os.killpg(w.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def close(self, timeout: float = 30.0) -> None:
        """Every worker told to exit (its connection closed); killed if it does not within `timeout` seconds."""
        for w in self.workers:
            w.conn.close()
        deadline = time.monotonic() + timeout
        for w in self.workers:
            try:
                w.process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                w.process.kill()
                w.process.wait()


def dumps(context: SweepContext) -> bytes:
    """The context pickled as joblib's loky pickles it (cloudpickle: OmegaConf's resolvers are local functions).
    Without cloudpickle the resolvers stay behind and the worker uses its own: Hydra's and lnbench's, registered
    on import, the same ones."""
    try:
        import cloudpickle  # noqa: PLC0415 (optional: submitit's dependency, as joblib's loky vendors it)
    except ImportError:
        state = {**context.singleton_state, "omegaconf_resolvers": None}
        return pickle.dumps(SweepContext(**{**context.__dict__, "singleton_state": state}))
    return cloudpickle.dumps(context)


def joblib_env(workers: int) -> dict[str, str]:
    """The environment joblib's loky backend gives its workers (joblib._parallel_backends' _prepare_worker_env): the
    native thread pools limited to a job's share of the cores (lnbench.config.launchers.cores_per_job, the same
    count joblib computes) unless already set, and TBB's IPC. A job's provenance records them, and torch's OpenMP
    reads them: the same here as under the joblib launcher."""
    threads = str(cores_per_job(workers))
    env = {var: os.environ.get(var, threads) for var in THREAD_VARS}
    if "ENABLE_IPC" not in os.environ:
        env["ENABLE_IPC"] = "1"
    return env


THREAD_VARS = (  # joblib's MAX_NUM_THREADS_VARS
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMBA_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)


# ---- the worker ---------------------------------------------------------------------------------------
def execute(context: SweepContext, idx: int, overrides: list[str]) -> JobDone:
    """One job, as hydra_plugins.hydra_joblib_launcher._core.execute_job runs it in a loky worker (or Hydra's
    basic launcher in its own process, for `ids` other than joblib)."""
    t0 = time.time()
    try:
        setup_globals()
        version.setbase(context.version_base)
        state = context.singleton_state
        if state.get("omegaconf_resolvers") is None:  # sent without them (dumps): this process's own
            import lnbench.config.schema  # noqa: F401, PLC0415 (registers lnbench's resolvers; only here)

            state = {**state, "omegaconf_resolvers": dict(BaseContainer._resolvers)}
        Singleton.set_state(state)
        config = hydra_job.compose(context.hydra_context.config_loader, context.config, overrides, idx, context.ids)
        ret = hydra_job.run(context.hydra_context, config, context.task_function)
    except Exception as e:  # noqa: BLE001 - Hydra could not compose or start it: the caller says so
        return JobDone("error", f"{type(e).__name__}: {e}", time.time() - t0)
    seconds = time.time() - t0
    if ret.status != JobStatus.COMPLETED:
        try:
            ret.return_value  # raises the job's exception
        except Exception as e:  # noqa: BLE001
            return JobDone("failed", f"{type(e).__name__}: {e}", seconds)
    value = ret.return_value if ret.status == JobStatus.COMPLETED else None
    said = value.get("status") if isinstance(value, dict) else None
    return JobDone(said if said in ("interrupted", "not started") else "completed", "", seconds)


def serve(conn: Connection) -> None:
    """The worker's loop: sweep contexts and jobs in, each job's outcome out, until the connection closes."""
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)  # idle: a stop waits (a job unblocks it for its child)
    warm_up()
    contexts: dict[str, SweepContext] = {}
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        kind, key, *rest = message
        if kind == "sweep":
            contexts[key] = pickle.loads(rest[0])
        elif kind == "forget":
            contexts.pop(key, None)
        elif kind == "job":
            idx, overrides = rest
            done = execute(contexts[key], idx, overrides)
            try:
                conn.send(done)
            except (BrokenPipeError, OSError):
                return


def main(argv: list[str]) -> int:
    conn = Connection(int(argv[0]))
    try:
        serve(conn)
    except KeyboardInterrupt:
        return 130
    finally:
        sys.stdout.flush(), sys.stderr.flush()
    return 0


if __name__ == "__main__":  # by its module's name, so that what it sends back unpickles as lnbench's classes
    from lnbench.launch.process import pool

    sys.exit(pool.main(sys.argv[1:]))
