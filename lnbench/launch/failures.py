"""The failure policy of `lnbench train`: what each kind of exception means for the user, in one table.

Input that validation refused (a config value, a path, data files) is the user's to fix: exit 2 and one
paragraph. The machine's own state (a full disk, a used-up quota, a read-only file system, wherever a run writes)
is named as such: exit 1, one paragraph, and the run resumable from its last checkpoint (written atomically). An
exception raised anywhere else, in lnbench's code or in a user's component (a model, normalizer or dataset
constructor, a forward pass), is a bug: exit 1, its traceback on stderr and in the
run's crash.log, and a line saying where to report it. Whatever ended a run, its summary.json says so.
"""

from __future__ import annotations

import errno
import logging
import os
import shlex
import sys
import traceback
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from hydra.errors import CompactHydraException

from lnbench.errors import Diverged, Interrupted, UserError
from lnbench.runs import CRASH_LOG, SUMMARY, Summary, read_summary, write_summary

REPORT_BUGS = (
    "this is a bug, not a mistake in your input: in lnbench, or in the component named by a _target_ or "
    "an `imports` module if it is your own. Report it to lnbench's maintainers (their issue tracker) with"
)


class JobFailed(CompactHydraException):
    """A sweep job's failure as Hydra records it: a CompactHydraException is printed as one line."""


class JobCrashed(Exception):
    """A sweep job's process ended without an answer: a signal (segfault, the OOM killer's SIGKILL) or an exit."""


@dataclass(frozen=True)
class Failure:
    status: str  # what the run's summary.json says
    exit_code: int  # of a single run (a sweep job is a failed job of its sweep)
    bug: bool  # a traceback, kept in crash.log, and where to report it


# First match wins. Interrupted carries its own exit code (128 + the signal).
POLICY: list[tuple[type[BaseException], Failure]] = [
    (UserError, Failure("failed", 2, False)),
    (Diverged, Failure("diverged", 1, False)),
    (Interrupted, Failure("interrupted", 130, False)),
    (KeyboardInterrupt, Failure("interrupted", 130, False)),
    (JobCrashed, Failure("failed", 1, False)),
    (BaseException, Failure("failed", 1, True)),
]


# The machine's state, not the input's nor a bug: what each errno says of the disk a run writes to.
DISK_STATES = {
    errno.ENOSPC: "is full",
    errno.EDQUOT: "has no room left in your disk quota",
    errno.EROFS: "is mounted read-only",
}
MACHINE_STATE = Failure("failed", 1, False)


def disk_state(error: BaseException) -> OSError | None:
    """The OSError saying the disk is full (or its quota used up, or read-only) that caused `error`, if one did:
    anywhere in its chain, since a write that fails inside torch.save or while a run stops is re-raised as
    another exception."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in DISK_STATES:
            return error
        error = error.__cause__ or error.__context__
    return None


def machine_state(error: BaseException, where: Path, again: str | None) -> str | None:
    """One paragraph naming the state of the disk holding `where` that `error` met (None where it met none): what
    was written before stays, and `again` goes on from there once there is room (None: nothing had started)."""
    cause = disk_state(error)
    if cause is None:
        return None
    what = (
        f"The run stopped; its last checkpoint and the lines logged before it are kept whole. Free some space "
        f"there, then continue with {again}."
        if again
        else "Nothing was started. Free some space there, then run the same command again."
    )
    return (
        f"the disk holding {where} {DISK_STATES[cause.errno]} ({cause.strerror}"
        f"{f': {cause.filename}' if cause.filename and Path(cause.filename) != Path(where) else ''}). {what}"
    )


def quiet_full_disk_logs() -> None:
    """The job's log files (Hydra's train.log) drop a line the disk cannot take instead of printing logging's
    "--- Logging error ---" traceback for each: the run's own next write names the disk (machine_state)."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler) and not isinstance(handler.handleError, partial):
            handler.handleError = partial(_unless_disk_state, handler.handleError)


def _unless_disk_state(handle_error, record: logging.LogRecord) -> None:
    if disk_state(sys.exc_info()[1]) is None:  # called by the handler inside its `except`
        handle_error(record)


def classify(error: BaseException) -> Failure:
    if not isinstance(error, (UserError, Interrupted, KeyboardInterrupt)) and disk_state(error) is not None:
        return MACHINE_STATE
    failure = next(f for kind, f in POLICY if isinstance(error, kind))
    if isinstance(error, Interrupted):
        return Failure(failure.status, error.exit_code, False)
    return failure


def full_error() -> bool:
    """HYDRA_FULL_ERROR=1: every error as its traceback, as Hydra does."""
    return os.environ.get("HYDRA_FULL_ERROR") == "1"


def traceback_text(error: BaseException) -> str:
    """The traceback of `error`; for one raised in a forked job, the child's (lnbench.launch.process.isolate
    sends it along)."""
    return getattr(error, "child_traceback", None) or "".join(traceback.format_exception(error))


def say(error: BaseException, crash_log: Path | None = None, run_dir: Path | None = None) -> int:
    """Tells the user what ended the command (the run in `run_dir`, where it began one), on stderr; returns its
    exit code."""
    failure = classify(error)
    if failure is MACHINE_STATE:
        where = run_dir or Path(disk_state(error).filename or ".")
        again = f"`lnbench train {shlex.quote(f'resume={run_dir}')}`" if run_dir else None
        print(f"lnbench: {machine_state(error, where, again)}", file=sys.stderr)
    elif isinstance(error, UserError):
        print(f"lnbench: error: {error}" + (f"\nlnbench: {error.hint}" if error.hint else ""), file=sys.stderr)
    elif isinstance(error, KeyboardInterrupt):
        print("lnbench: interrupted outside the train loop: nothing was checkpointed.", file=sys.stderr)
    elif failure.bug:
        where = f"{crash_log}, where its traceback is kept" if crash_log else "the traceback above"
        print(f"{traceback_text(error).rstrip()}\nlnbench: {REPORT_BUGS} {where}.", file=sys.stderr)
    else:
        print(f"lnbench: {error}", file=sys.stderr)
    return failure.exit_code


def one_line(job: int, overrides: list[str], error: BaseException, run_dir: Path) -> str:
    """A failed sweep job, as the sweep reports it."""
    what = "diverged" if isinstance(error, Diverged) else "failed"
    failure = classify(error)
    if failure is MACHINE_STATE:
        said = machine_state(error, run_dir, "the same sweep command: each job goes on from its checkpoint")
    elif failure.bug:
        said = f"{type(error).__name__}: {error}; {REPORT_BUGS} {run_dir / CRASH_LOG}"
    else:
        said = str(error)
    return f"lnbench: job {job} ({' '.join(overrides)}) {what}: {said}"


def keep_traceback(run_dir: Path, error: BaseException) -> None:
    """A bug's traceback, appended to the run's crash.log (faulthandler's native tracebacks go there too)."""
    try:
        with open(run_dir / CRASH_LOG, "a") as f:
            f.write(traceback_text(error))
    except OSError:
        pass  # the directory is gone or unwritable: stderr still has it


def record(run_dir: Path, error: BaseException, started: float = 0.0) -> None:
    """A run that failed before its train loop wrote a summary still leaves one saying why (replacing one an
    earlier attempt left, but not the one this attempt's loop wrote)."""
    summary = run_dir / SUMMARY
    running = read_summary(run_dir).get("status") == "running"  # its process died mid-run
    if running or not summary.exists() or summary.stat().st_mtime < started:
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            write_summary(run_dir, Summary(classify(error).status, error=f"{type(error).__name__}: {error}"))
        except OSError:
            pass  # an unwritable directory: the error itself says so
