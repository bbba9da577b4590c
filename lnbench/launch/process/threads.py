"""How many threads a job's torch uses: decided once, before the job runs, from the cores it may use.

Never from the machine's load: torch's reductions (sums to a scalar, batch norm's statistics, the
gradient norm) round differently on 1 and 2 threads, so a thread count that followed the neighbours
would make a run's numbers follow them too (docs/performance.md lists the ops; lnbench.training.free_cores
follows them only below this count, and only where no number can change with it). The count is the
smallest of: the cores this process may run on (its CPU affinity, which taskset, cgroups and SLURM's
binding set), SLURM's `SLURM_CPUS_PER_TASK`, and a parallel launcher's share per job (its kind's,
lnbench.config.launchers: submitit's `cpus_per_task`, joblib's cores / n_jobs, the cores counted with a CPU
quota). `threads=N` overrides it. `decide` puts the count and why, with the heap's policy
(lnbench.launch.process.heap) and `threads_follow`, into the run's Runtime record (lnbench.config.runtime), which
the recipe carries down; the summary records it. A resume keeps the count the run began with
(lnbench.training.checkpoint.resumed_runtime).

How idle OpenMP threads wait and which allocator runs are the launcher's business: set OMP_WAIT_POLICY
or LD_PRELOAD a malloc yourself; the summary's provenance records them.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Optional

from omegaconf import OmegaConf

from lnbench.config import launchers
from lnbench.config.runtime import Runtime, usable_cores
from lnbench.launch.process import heap

log = logging.getLogger("lnbench")


def parallel_job_threads(hc) -> Optional[int]:
    """Torch threads for one job of a parallel launcher, so that jobs sharing the cores do not fight: its kind's
    share (lnbench.config.launchers: submitit's `cpus_per_task`, joblib's cores / n_jobs). None where jobs do not
    share the machine."""
    launcher = OmegaConf.select(hc, "launcher", default=None)
    return None if launcher is None else launchers.of_config(launcher).job_cores(launcher)


def choose(requested: Optional[int], hc=None) -> tuple[int, str]:
    """(threads, why) for one job: `requested` (the threads= key) if given, else the cores the job may use
    (affinity, SLURM's cpus_per_task, the launcher's share)."""
    if requested is not None:  # validated with the rest of the config
        cores = len(usable_cores())
        if requested > cores:  # legitimate (an experiment on oversubscription), but rarely meant
            log.warning(
                "threads=%d is more than the %d cores this job may use: torch runs %d threads that take turns "
                "on them, usually slower than threads=%d (or threads=null: lnbench's choice).",
                requested,
                cores,
                requested,
                cores,
            )
        return int(requested), f"threads={requested} as configured"
    n = len(usable_cores())
    why = [f"{n} usable cores"]
    slurm = os.environ.get("SLURM_CPUS_PER_TASK")
    if slurm and slurm.isdigit() and 0 < int(slurm) < n:
        n = int(slurm)
        why.append(f"SLURM_CPUS_PER_TASK={slurm}")
    share = parallel_job_threads(hc) if hc is not None else None
    if share is not None and share < n:
        n = share
        why.append(f"the launcher's share per parallel job is {share}")
    return n, "; ".join(why)


def decide(cfg: Any, hc=None) -> Runtime:
    """The job's Runtime: its threads (`choose`, logged with why), its heap's policy (freed memory kept, unless the
    user set malloc's own), `threads_follow`, and the cores it may use. Decided once, before the run."""
    n, why = choose(cfg.get("threads"), hc)
    log.info("threads: %d (%s)", n, why)
    follow = cfg.get("threads_follow")
    return Runtime(n, why, keeps_freed_memory=heap.keep_freed_memory(), follow=follow, cores=tuple(usable_cores()))
