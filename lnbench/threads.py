"""How many threads a job's torch uses, and how its idle threads wait.

On a machine shared with other processes, OpenMP threads that spin while they wait (libgomp's default)
fight the neighbours for the cores: a 2-thread run next to one busy process ran 5-8x slower than alone.
So every lnbench process waits passively (`passive_waiting()`, before torch loads libgomp), and each job
takes only the cores that are free when it starts (`choose()`), within its launcher's share.

One thread pool: the C kernels of `lnbench.nn.ckernel` link libgomp.so.1, which resolves to the copy
torch already loaded, and they use at most torch's thread count, so torch and the kernels share one pool.
"""
from __future__ import annotations

import logging
import os
import time
from typing import Optional

log = logging.getLogger("lnbench")

SAMPLE_S = 0.25  # how long a job watches /proc/stat to see how busy the other processes keep its cores


def passive_waiting() -> None:
    """Idle OpenMP threads sleep instead of spinning (unless the user chose a policy). Must run before
    torch (and so libgomp) is imported; subprocesses (parallel launcher workers) inherit it."""
    if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
        os.environ["OMP_WAIT_POLICY"] = "passive"


def usable_cores() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return list(range(os.cpu_count() or 1))


def _cpu_times(cores: list[int]) -> Optional[tuple[float, float]]:
    """(busy, total) jiffies summed over `cores`, from /proc/stat's per-cpu lines."""
    want = {f"cpu{c}" for c in cores}
    busy = total = 0.0
    try:
        with open("/proc/stat") as f:
            for line in f:
                name, *vals = line.split()
                if name in want:
                    v = [float(x) for x in vals[:8]]
                    idle = v[3] + v[4]  # idle + iowait
                    total += sum(v)
                    busy += sum(v) - idle
    except (OSError, ValueError, IndexError):
        return None
    return (busy, total) if total else None


def busy_elsewhere(cores: list[int], seconds: float = SAMPLE_S) -> Optional[float]:
    """Cores' worth of CPU time that other processes used on `cores` over the next `seconds` (None where
    /proc/stat cannot be read). This process's own CPU time in the window is subtracted."""
    a, own_a = _cpu_times(cores), time.process_time()
    if a is None:
        return None
    time.sleep(seconds)
    b, own_b = _cpu_times(cores), time.process_time()
    if b is None or b[1] <= a[1]:
        return None
    share = (b[0] - a[0]) / (b[1] - a[1])  # fraction of the cores' time that was busy
    wall_share = (own_b - own_a) / (seconds * len(cores))
    return max(0.0, share - wall_share) * len(cores)


def parallel_job_threads(hc) -> Optional[int]:
    """Torch threads for one job of a parallel launcher, so that jobs sharing the cores do not fight:
    submitit gives each job `cpus_per_task` cores; joblib's n_jobs=-1 means one job per core (-2 all but
    one, ...). None where jobs do not share the machine."""
    from omegaconf import OmegaConf

    if cpus := OmegaConf.select(hc, "launcher.cpus_per_task", default=None):
        return int(cpus)
    n_jobs = OmegaConf.select(hc, "launcher.n_jobs", default=None)
    if n_jobs is None:
        return None
    cores = os.cpu_count() or 1  # as joblib counts them
    jobs = cores + 1 + n_jobs if n_jobs < 0 else n_jobs
    return max(1, cores // max(jobs, 1))


def choose(requested: Optional[int], hc=None) -> tuple[int, str]:
    """(threads, why) for one job. `requested` (the threads= key) wins; otherwise the cores this process
    may use (affinity), capped by SLURM's cpus_per_task and the launcher's share, minus the cores other
    processes keep busy right now (at least 1)."""
    if requested is not None:  # validated with the rest of the config
        return int(requested), f"threads={requested} as configured"
    cores = usable_cores()
    n, why = len(cores), [f"{len(cores)} usable cores"]
    slurm = os.environ.get("SLURM_CPUS_PER_TASK")
    if slurm and slurm.isdigit() and int(slurm) < n:
        n = int(slurm)
        why.append(f"SLURM_CPUS_PER_TASK={slurm}")
    share = parallel_job_threads(hc) if hc is not None else None
    if share is not None and share < n:
        n = share
        why.append(f"the launcher's share per parallel job is {share}")
    busy = busy_elsewhere(cores) if n > 1 else None
    if busy is not None:
        free = max(1, min(n, int(len(cores) - busy + 0.5)))
        why.append(f"other processes keep {busy:.1f} of them busy")
        n = free
    return n, "; ".join(why)


def apply(requested: Optional[int], hc=None) -> int:
    """Choose the job's threads, log the choice and why; the caller sets torch.set_num_threads."""
    n, why = choose(requested, hc)
    wait = os.environ.get("OMP_WAIT_POLICY") or (f"GOMP_SPINCOUNT={os.environ['GOMP_SPINCOUNT']}"
                                                  if "GOMP_SPINCOUNT" in os.environ else "active")
    log.info("threads: %d (%s); idle threads wait %s", n, why, wait.lower())
    return n
