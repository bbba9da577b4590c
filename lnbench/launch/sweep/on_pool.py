"""`hydra/launcher=warm` (hydra_plugins/lnbench_warm.py): the sweep's jobs on a warm pool (lnbench.launch.process.pool),
as lnbench check runs its rounds, with the environment and job ids joblib's workers give them (so the run
directories and their records are a joblib sweep's). Each worker imports torch once and forks job after job.

A stop (Ctrl-C, SIGTERM) is taken by the sweep's process (lnbench.launch.sweep.stop.SweepStop marks the sweep
stopped); the workers run in a session of their own, so it is passed on to those that run a job, which checkpoint
and stop; the jobs not started yet see the mark and do not start. A second stop kills the workers and their jobs.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Sequence

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, setup_globals

from lnbench.launch import hydra_job
from lnbench.launch.failures import JobFailed
from lnbench.launch.process.pool import JobDone, SweepContext, WarmPool, joblib_env
from lnbench.launch.sweep import stop as sweep_stop

log = logging.getLogger("lnbench")


def launch(launcher, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list[JobReturn]:
    """Hydra's Launcher.launch: every job on the pool, at most n_jobs at once, in job order; the JobReturns in
    job order."""
    setup_globals()
    config = launcher.config
    configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    sweep_dir = Path(str(config.hydra.sweep.dir))
    sweep_dir.mkdir(parents=True, exist_ok=True)
    slots = launcher.lnbench_kind.job_slots(launcher.params)
    todo = [(idx, list(o)) for idx, o in enumerate(job_overrides, initial_job_idx)]
    context = SweepContext(
        str(sweep_dir), launcher.hydra_context, config, launcher.task_function, Singleton.get_state(), hydra_job.JOBLIB
    )
    pool = WarmPool(min(slots, len(todo)), joblib_env(slots))  # joblib's thread limits: cores // n_jobs
    done: dict[int, JobDone] = {}
    passed_on = False
    try:
        queue = list(todo)
        while queue or pool.busy:
            for worker in pool.idle:
                if queue:
                    idx, overrides = queue.pop(0)
                    log.info("\t#%d : %s", idx, " ".join(filter_overrides(overrides)))
                    pool.run(worker, idx, context, idx, overrides)
            signum = sweep_stop.stopped(sweep_dir)
            if signum is not None and not passed_on:  # the jobs not started yet see the mark themselves
                pool.signal_busy(signum)
                passed_on = True
            done.update(pool.results(0.05))
    except KeyboardInterrupt:  # a second stop: at once
        pool.kill()
        raise
    finally:
        pool.close()
    return [job_return(overrides, done[idx]) for idx, overrides in todo]


def job_return(overrides: list[str], done: JobDone) -> JobReturn:
    """Hydra's JobReturn for a job the pool ran: completed with its status (completed, interrupted, not started),
    or failed with the job's one line (lnbench.launch.entry.Job.job_ended said it already), which Hydra's sweeper
    raises once every job has run."""
    if done.status in ("failed", "error"):
        ret = JobReturn(overrides=overrides, status=JobStatus.FAILED)
        ret.return_value = JobFailed(done.error.removeprefix(f"{JobFailed.__name__}: "))
        return ret
    ret = JobReturn(overrides=overrides, status=JobStatus.COMPLETED)
    ret.return_value = {"status": done.status}
    return ret
