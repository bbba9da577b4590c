"""A sweep's progress, shown by the sweep's own process from its jobs' files (lnbench.launch.sweep.status): a line
when a job starts and when it ends, and a total at a steady interval ("12 of 72 done, 2 running, 1 failed,
~14 min left"); on a terminal the total comes more often, with a line per running job labelled with its
swept values.

Whole lines only, each written at once: the jobs (joblib's workers, submitit's processes) write to the same
terminal, and a redrawn bar would split their lines. A job draws no bar of its own in a sweep
(lnbench.training.tracker.Console). It works under every launcher, SLURM's included: it reads files only.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

from lnbench.launch.sweep import status

POLL_S = 2.0
TOTAL_EVERY_S = {True: 10.0, False: 30.0}  # on a terminal, in a log file
ENDED = ("completed", "failed", "diverged", "stopped", "unreadable")  # unreadable: a damaged record (its error says)


class SweepProgress:
    def __init__(self, sweep_dir: Path, out=None, terminal: bool | None = None, clock=time.monotonic, title: str = ""):
        self.sweep_dir, self.out, self.clock = Path(sweep_dir), out or sys.stdout, clock
        self.head = f"sweep {title}: " if title else "sweep: "  # a title tells overlapping sweeps apart (a check's)
        self.terminal = self.out.isatty() if terminal is None else terminal
        self.states: dict[str, str] | None = None  # job -> state at the last look (None: not looked yet)
        self.cache: dict = {}  # what the last looks read (lnbench.launch.sweep.status.jobs_in)
        self.last_total = clock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="lnbench-sweep-progress", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stops looking, after a last look for the jobs that ended since the previous one."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
            self.last_total = self.clock()  # the end-of-sweep block comes next: no total before it
            try:
                self.look()
            except Exception:  # noqa: BLE001 - the end block still says how every job ended
                pass

    def _run(self) -> None:
        while not self._stop.wait(POLL_S):
            try:
                self.look()
            except Exception:  # noqa: BLE001 - a file mid-write, a job directory just removed: the next look
                continue

    def look(self, now: float | None = None) -> list[str]:
        """One look at the sweep's files: the lines it says (also written out)."""
        wall = time.time() if now is None else now
        jobs = status.jobs_in(self.sweep_dir, wall, self.cache)
        lines = self.changes(jobs)
        try:
            if self.clock() - self.last_total >= TOTAL_EVERY_S[self.terminal] and jobs:
                self.last_total = self.clock()
                lines += self.total(jobs, wall)
        finally:  # the changes are said even if the total could not be made
            if lines:
                self.out.write("".join(f"{line}\n" for line in lines))  # one write: not split by another process's line
                self.out.flush()
        return lines

    def changes(self, jobs: list[status.Job]) -> list[str]:
        """A line per job that started or ended since the last look (none for what the first look finds ended)."""
        now = {j.run.name: j.state for j in jobs}
        before, self.states = self.states, now
        lines = []
        for job in jobs:
            was = None if before is None else before.get(job.run.name)
            if job.state == was or (before is None and job.state in ENDED):
                continue
            if job.state == "running":
                lines.append(f"{self.head}job {status.label(job, jobs)} started")
            elif job.state in ENDED:
                lines.append(f"{self.head}job {status.label(job, jobs)} {job.state}" + ended_how(job))
        return lines

    def total(self, jobs: list[status.Job], wall: float) -> list[str]:
        count = status.tally(jobs, status.sweeps_in(self.sweep_dir))
        left = status.seconds_left(jobs, count.pending)
        lines = [f"{self.head}{count.text()}" + (f", ~{status.minutes(left)} left" if left is not None else "")]
        if self.terminal:
            lines += [f"  running  {status.label(j, jobs)}: {status.progress(j)}" for j in jobs if j.state == "running"]
        return lines


def ended_how(job: status.Job) -> str:
    if job.state == "completed":
        return f" in {status.minutes(job.seconds)}" if job.seconds else ""
    if job.state == "stopped":
        return f" at step {job.step} (a rerun resumes it)"
    why = job.run.summary.get("error") or (
        f"loss not finite at step {job.run.summary.get('diverged_at_step')}" if job.state == "diverged" else ""
    )
    return f": {' '.join(str(why).split())[:160]}" if why else ""
