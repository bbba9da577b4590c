"""How a job starts, written once for a single run, a sweep job and a pack of sweep jobs (lnbench.launch.entry.Job,
lnbench.launch.sweep.pack): its directory locked, the user's modules imported and its config validated (`admit`),
the names a W&B user sees it by (`names`), its threads decided once (lnbench.launch.process.threads), then warmed up
and trained, in a forked process of its own or in this one, with a segfault's native traceback in its crash.log and
a bug's traceback added there (`start`).
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import Any, Callable

from lnbench import phases
from lnbench.config.validate import validate
from lnbench.errors import UserError
from lnbench.launch import failures, user_modules
from lnbench.launch.process.isolate import crash_log, in_child_process, warm_up
from lnbench.runs import RunLock
from lnbench.training.tracker import job_name, run_tags, sweep_group

LOCKED = "locked"  # admit's refusal where another process holds the run: not this job's to record
RAISED = "raised"  # admit's refusal for the job's own reason (bad input, a user module that fails to import)


def admit(cfg, run_dir: Path, held: ExitStack) -> tuple[str, BaseException] | None:
    """A sweep job's checks in its own process, once (preflight checked only the sweep's keys): `run_dir` locked
    (held by `held`), the user's modules imported, `cfg` validated. None where it passes, else (LOCKED or RAISED,
    why)."""
    try:
        held.enter_context(RunLock(run_dir))
    except UserError as e:
        return LOCKED, e
    try:
        user_modules.load(cfg.imports)
        validate(cfg)
    except BaseException as e:  # noqa: BLE001 - the caller's failure policy (lnbench.launch.failures) decides
        return RAISED, e
    return None


def names(hc, cfg, multirun: bool = True) -> dict[str, Any]:
    """What a W&B user sees the job as: its name, its sweep's group (a single run has none), its tags."""
    group = sweep_group(hc) if multirun else None
    return dict(name=job_name(hc), group=group, tags=run_tags(dict(hc.runtime.choices), cfg))


def start(run_dir: Path, train: Callable, *args, fork: bool, before_fork: Callable | None = None, keep=True, **kw):
    """`train(*args, **kw)` once this process is warm (lnbench.launch.process.isolate.warm_up): in a forked child of
    its own where `fork` (`before_fork` first: what the next jobs of this process can reuse), else here. A
    segfault or an OOM kill bypasses every except clause: the native traceback goes to stderr, and a forked job's
    to crash.log in `run_dir`; a bug's traceback is added to it (`keep`; a pack adds it to each of its jobs')."""
    with crash_log(run_dir):
        try:
            with phases.timer().phase(phases.JOB_WARM_UP):
                warm_up()  # in here: a Ctrl-C during its imports (~1 s) is an interrupted job, not a traceback
            if not fork:
                return train(*args, **kw)
            if before_fork is not None:
                before_fork()
            return in_child_process(run_dir, train, *args, **kw)
        except BaseException as e:
            if keep and failures.classify(e).bug:
                failures.keep_traceback(run_dir, e)
            raise
