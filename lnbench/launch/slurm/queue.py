"""Where a SLURM job stands, asked quietly: submitit's status poller with squeue and scontrol where sacct cannot answer.

submitit asks `sacct` for its jobs' states. On a cluster with accounting off (many small ones) sacct fails
at every poll, and submitit logs `Bypassing sacct error ... status may be inaccurate` each time; worse,
every job then stays in state UNKNOWN, which it counts as unfinished, so a sweep whose job was cancelled
(no result file ever comes) waits forever. `QueueWatcher` tries sacct once; if it fails, it says so once
and asks `squeue --me --states=all` from then on (a finished job stays listed for the controller's
MinJobAge, 300 s by default, longer than the poll interval). A job that has left the queue without a
result is over: its state reads NOT_IN_QUEUE.
"""

from __future__ import annotations

import logging
import subprocess
import time
from typing import Optional

from submitit.slurm.slurm import SlurmInfoWatcher, SlurmJob

log = logging.getLogger("lnbench")

# States in which a job may still produce a result (SLURM's long names, as squeue %T and sacct print them).
# PREEMPTED stays open as in submitit >= 1.5.3 (submitit#1788): a preempted job that SLURM requeues shows PENDING next.
NOT_OVER = frozenset(
    {
        "PENDING",
        "CONFIGURING",
        "RUNNING",
        "COMPLETING",
        "SUSPENDED",
        "REQUEUED",
        "REQUEUE_HOLD",
        "REQUEUE_FED",
        "RESIZING",
        "SIGNALING",
        "STAGE_OUT",
        "STOPPED",
        "PREEMPTED",
        "READY",
        "UNKNOWN",
    }
)
GONE = "NOT_IN_QUEUE"
SQUEUE = ["squeue", "--me", "--noheader", "--array", "--states=all", "--format=%i|%T|%N"]
HEADER = "JobID|State|NodeList"  # sacct's columns, so that submitit's parser reads either


class QueueWatcher(SlurmInfoWatcher):
    """One command per poll for all of a sweep's jobs (sacct while it works, else squeue), at 2, 4, 8 ...
    seconds after a submission and then every `delay_s`; a failing command is reported once, not per poll."""

    def __init__(self, delay_s: int = 30) -> None:
        super().__init__(delay_s=delay_s)
        self.use_sacct = True
        self.said: set[str] = set()
        self.missing: dict[str, int] = {}  # job id -> polls in a row that did not list it

    def _make_command(self) -> Optional[list[str]]:
        if self.use_sacct:
            return super()._make_command()
        return SQUEUE if self._registered - self._finished else None

    def is_done(self, job_id: str, mode: str = "standard") -> bool:
        return self.get_state(job_id, mode=mode).upper().split(" ")[0] not in NOT_OVER

    def update(self) -> None:
        command = self._make_command()
        if command is None:
            return
        self._num_calls += 1
        try:
            out = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True).stdout
        except (OSError, subprocess.SubprocessError) as e:
            if self.use_sacct:  # accounting off: say it once, then ask squeue
                self.use_sacct = False
                self._say(
                    "sacct",
                    f"sacct is unavailable ({_why(e)}): "
                    "lnbench follows its SLURM jobs with squeue and scontrol instead.",
                )
                return self.update()
            self._say("squeue", f"squeue failed ({_why(e)}); job states may lag until it answers again.")
        else:
            self._output = out.encode()
            found = self.read_info(out if self.use_sacct else f"{HEADER}\n{out}")
            self._info_dict.update(found)
            if not self.use_sacct:
                self._mark_gone(found)
        self._last_status_check = time.time()
        self._finished |= {j for j in self._registered - self._finished if self.is_done(j, mode="cache")}

    def _mark_gone(self, listed: dict) -> None:
        """A job squeue no longer lists, twice in a row (not a job too new to be listed), is over."""
        for job in self._registered - self._finished:
            if job in listed:
                self.missing.pop(job, None)
            elif (n := self.missing.get(job, 0) + 1) >= 2:
                self._info_dict[job] = {"JobID": job, "State": GONE}
            else:
                self.missing[job] = n

    def _say(self, key: str, message: str) -> None:
        if key not in self.said:
            self.said.add(key)
            log.warning(message)


def _why(e: BaseException) -> str:
    if isinstance(e, subprocess.CalledProcessError):
        text = (e.stderr or e.stdout or "").strip().splitlines()
        return text[-1] if text else f"exit code {e.returncode}"
    return f"{type(e).__name__}: {e}"


class QuietJob(SlurmJob):
    """submitit's SLURM job, followed by a QueueWatcher (one shared by every job of this process)."""

    watcher = QueueWatcher()


def job_info(job_id: str) -> dict[str, str]:
    """SLURM's record of a job as its controller sees it now (`scontrol show job`: JobState, RunTime,
    TimeLimit, Restarts, ...); empty where it cannot say."""
    try:
        out = subprocess.run(
            ["scontrol", "show", "job", "--oneliner", job_id], capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    first = out.splitlines()[0] if out.strip() else ""  # one record per line; an array's id lists all its jobs
    return dict(word.split("=", 1) for word in first.split() if "=" in word)


def seconds(duration: str | None) -> float:
    """SLURM's [D-]HH:MM:SS (or MM:SS) in seconds; infinity for UNLIMITED or what it cannot read."""
    try:
        days, _, clock = (duration or "").rpartition("-")
        parts = [int(x) for x in clock.split(":")]
        return int(days or 0) * 86400 + sum(v * 60**i for i, v in enumerate(reversed(parts)))
    except ValueError:
        return float("inf")


def queued(job_ids: list[str]) -> dict[str, str]:
    """Job id -> state, for those of `job_ids` that are still pending or running (an empty dict where
    squeue cannot be asked: nothing is then taken for queued)."""
    if not job_ids:
        return {}
    try:
        out = subprocess.run(SQUEUE, capture_output=True, text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    states = dict(line.split("|")[:2] for line in out.splitlines() if line.count("|") >= 2)
    return {j: states[j] for j in job_ids if states.get(j, GONE) in NOT_OVER - {"UNKNOWN"}}
