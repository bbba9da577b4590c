"""A sweep stopped by Ctrl-C or SIGTERM: each running job checkpoints and stops, no job starts after it,
and the sweep's closing line comes once every job's checkpoint is on disk.

joblib answers an exception in the sweep's process (a KeyboardInterrupt; a job that raised Interrupted;
a worker that died of its own Ctrl-C while it waited for work) by SIGKILLing every worker with all its
children: jobs died mid-checkpoint, and the sweep counted them as interrupted with a checkpoint. So while a
sweep runs under the basic or joblib launcher (`SweepStop`):

- the sweep's process takes the signal without raising: it writes `<sweep dir>/.stopped`, which a job
  reads before it starts (lnbench.launch.entry), and lets the launcher wait for the running jobs;
- it blocks SIGINT and SIGTERM in its own thread and so in every worker process it starts: an idle
  worker keeps the signal pending instead of dying; a job takes it when it starts (passing it on to its
  forked process, lnbench.launch.process.isolate), and the train loop's StopSignals when it runs;
- a job interrupted this way returns {"status": "interrupted"} after its checkpoint, instead of raising.

submitit_local's jobs are processes of their own (their parent ignores SIGINT, lnbench.launch.entry); SLURM's
jobs go on without the sweep's process. A second signal, a second or more after the first, stops at once.
"""

from __future__ import annotations

import json
import logging
import shlex
import signal
import threading
import time
from pathlib import Path

from lnbench.atomic import write_json
from lnbench.config.overrides import shell_arg
from lnbench.launch.process.isolate import STOP_SIGNALS
from lnbench.runs import CHECKPOINT, LOCK, OVERRIDES, STOPPED, check_command, find_check_record, lock_held, read_summary

log = logging.getLogger("lnbench")
MARK = STOPPED


def stopped(sweep_dir: Path) -> int | None:
    """The signal that stopped the sweep in `sweep_dir` (None: it was not stopped)."""
    try:
        return int(json.loads((Path(sweep_dir) / MARK).read_text())["signal"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def mark(sweep_dir: Path, signum: int) -> None:
    if stopped(sweep_dir) is None:
        Path(sweep_dir).mkdir(parents=True, exist_ok=True)
        write_json(Path(sweep_dir) / MARK, {"signal": int(signum)})


def clear(sweep_dir: Path) -> None:
    (Path(sweep_dir) / MARK).unlink(missing_ok=True)


class SweepStop:
    """The sweep's process while its launcher runs: see the module's doc."""

    def __init__(self, sweep_dir: Path):
        self.sweep_dir, self.signum, self._first = Path(sweep_dir), None, 0.0
        self._done = threading.Event()

    def _handle(self, signum: int, frame) -> None:
        if self.signum is None:
            self.signum, self._first = signum, time.monotonic()
            mark(self.sweep_dir, signum)
            log.warning(
                "%s received: each running job writes a checkpoint and stops; no other job starts "
                "(send it again to stop at once).",
                signal.Signals(signum).name,
            )
        elif time.monotonic() - self._first > 1.0:  # sooner: the same request, passed on by another process
            raise KeyboardInterrupt

    def __enter__(self) -> "SweepStop":
        # Here, not at the top: multiprocessing (~12 ms) stays out of a single run's and a refused override's start-up.
        from multiprocessing import resource_tracker  # noqa: PLC0415 (start-up time)

        clear(self.sweep_dir)  # a re-run of a stopped sweep starts afresh
        # Started now, not by joblib later: the standard library's tracker unblocks SIGINT and SIGTERM in the
        # thread that starts it (SIG_UNBLOCK, not the mask it found), and workers started after would die of
        # a Ctrl-C while they wait for work. Once running, it is never started again.
        resource_tracker.ensure_running()
        # The signals go to a thread that does not block them (every thread started later inherits the
        # block, as do the processes they start); the handler itself always runs in the main thread.
        threading.Thread(target=self._done.wait, name="lnbench-signals", daemon=True).start()
        self._previous = {s: signal.signal(s, self._handle) for s in STOP_SIGNALS}
        self._mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        return self

    def __exit__(self, *exc: object) -> None:
        signal.pthread_sigmask(signal.SIG_SETMASK, self._mask)
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._done.set()


def wait_for_jobs(sweep_dir: Path, timeout: float = 120.0) -> None:
    """Until no job of the sweep holds its run's lock (a job ends by writing its checkpoint and summary,
    then letting go of the lock), or `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while any(lock_held(p) for p in Path(sweep_dir).glob(f"*/{LOCK}")) and time.monotonic() < deadline:
        time.sleep(0.1)


def job_states(sweep_dir: Path) -> dict[str, str]:
    """Each job directory's state, read from it: completed, interrupted (with a checkpoint), stopped early
    (interrupted before its first checkpoint), failed (failed or diverged) or not started."""
    states = {}
    for job in sorted(p.parent.parent for p in Path(sweep_dir).glob(f"*/{OVERRIDES}")):
        status = read_summary(job).get("status")
        if status == "interrupted":
            status = "interrupted" if (job / CHECKPOINT).exists() else "stopped early"
        states[job.name] = {
            "completed": "completed",
            "interrupted": "interrupted",
            "stopped early": "stopped early",
            None: "not started",
        }.get(status, "failed")
    return states


def message(sweep_dir: Path, signum: int, args: list[str]) -> str:
    """One paragraph: how many jobs completed, stopped with a checkpoint, failed or never started, and the
    command that resumes the sweep."""
    states = list(job_states(sweep_dir).values())
    count = {s: states.count(s) for s in ("completed", "interrupted", "failed", "not started", "stopped early")}
    said = f"{count['completed']} job(s) completed and {count['interrupted']} interrupted with a checkpoint"
    said += "".join(f", {count[s]} {s}" for s in ("failed", "not started") if count[s])
    if count["stopped early"]:
        said += f", {count['stopped early']} stopped before their first checkpoint"
    again = [a for a in args if not a.startswith("hydra.sweep.dir=")]
    command = " ".join([shlex.join(["lnbench", "train", *again]), shell_arg("hydra.sweep.dir", sweep_dir)])
    what = "it"
    if check := find_check_record(sweep_dir):  # a round of lnbench check: the check resumes it, and what follows
        command, what = check_command(check[1]), "the check"
    return (
        f"{signal.Signals(signum).name} received: the sweep in {sweep_dir} stopped with {said}. Resume {what} with "
        f"`{command}`: completed jobs are skipped, interrupted ones continue from their checkpoints, the others start."
    )
