"""How many threads a job's torch uses: where jobs share the machine, each gets its share of the cores."""
from __future__ import annotations

import os


def parallel_job_threads(hc) -> int | None:
    """Torch threads for one job of a parallel launcher, so that jobs sharing the cores do not fight.

    submitit gives each job `cpus_per_task` cores; joblib's n_jobs=-1 means one job per core (-2 all but
    one, ...). None where jobs do not share the machine.
    """
    from omegaconf import OmegaConf

    if cpus := OmegaConf.select(hc, "launcher.cpus_per_task", default=None):
        return int(cpus)
    n_jobs = OmegaConf.select(hc, "launcher.n_jobs", default=None)
    if n_jobs is None:
        return None
    cores = os.cpu_count() or 1
    jobs = cores + 1 + n_jobs if n_jobs < 0 else n_jobs
    return max(1, cores // max(jobs, 1))
