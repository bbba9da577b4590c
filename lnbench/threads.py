"""How many threads a job's torch uses, and how its idle threads wait.

On a machine shared with other processes, OpenMP threads that spin while they wait (libgomp's default)
fight the neighbours for the cores: a 2-thread run next to one busy process ran 5-8x slower than alone.
Waiting passively (sleeping at once) avoids that but costs a wake-up per parallel region, which on an
idle machine made torch's nn.LSTM at batch 4 several times slower (see the README's measurements). So
the policy is chosen per process from a look at the cores (`choose_wait_policy()`, before torch loads
libgomp, which reads it once): spin (libgomp's default count) where the cores are free, sleep at once
where others keep them busy. Shorter spin counts (1000, 10000) were measured too: 1000 lost the idle
speed, and none made a neighbour that arrives during a run harmless (README). Each job then takes only
the cores that are free when it starts (`choose()`), within its launcher's share (at its start; see
`watch_ceiling`); with one thread there is no team and nothing waits. While it trains,
`lnbench.live_threads` moves those threads as neighbours come and go (a neighbour that arrives later
is what no wait policy fixed).

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
POLICY_SAMPLE_S = 0.1  # the look at start (every `lnbench train` pays it): 10 ticks per core, enough for BUSY_CORES
SPIN_COUNT = "300000"  # spins before a waiting thread sleeps where the cores are free: libgomp's own default, made explicit
BUSY_CORES = 0.5  # other processes' load (in cores) from which the cores count as busy
_WHY_ENV = "LNBENCH_WAIT_WHY"  # the reason for the policy, inherited by launcher workers for their log line
_last_sample: Optional[tuple[float, float]] = None  # (time.monotonic(), busy) of the policy's look, used once


def choose_wait_policy() -> None:
    """How idle OpenMP threads wait in this process and its subprocesses, unless the user chose
    (OMP_WAIT_POLICY or GOMP_SPINCOUNT set): spin (GOMP_SPINCOUNT=SPIN_COUNT) when the usable cores
    are free, else sleep at once (OMP_WAIT_POLICY=passive). Must run before torch (and so libgomp) is
    imported; launcher workers and forked jobs inherit it."""
    if "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ:
        return
    global _last_sample
    busy = busy_elsewhere(usable_cores(), POLICY_SAMPLE_S)
    _last_sample = (time.monotonic(), busy) if busy is not None else None
    if busy is not None and busy < BUSY_CORES:
        os.environ["GOMP_SPINCOUNT"] = SPIN_COUNT
        os.environ[_WHY_ENV] = f"the cores were free at start ({busy:.1f} busy)"
    else:
        os.environ["OMP_WAIT_POLICY"] = "passive"
        os.environ[_WHY_ENV] = (f"other processes kept {busy:.1f} cores busy at start" if busy is not None
                                else "the load could not be read")


def wait_policy() -> str:
    """How idle threads wait in this process, and why, for the log."""
    why = os.environ.get(_WHY_ENV)
    if os.environ.get("OMP_WAIT_POLICY"):
        how = f"OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY'].lower()}"
    elif os.environ.get("GOMP_SPINCOUNT"):
        how = f"spin {os.environ['GOMP_SPINCOUNT']} times, then sleep (GOMP_SPINCOUNT)"
    else:
        how = "libgomp's default (spin)"
    return f"{how}; {why}" if why else f"{how}, as set"


def usable_cores() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return list(range(os.cpu_count() or 1))


def cpu_times(cores: list[int], stat: str = "/proc/stat") -> Optional[tuple[float, float]]:
    """(busy, total) jiffies summed over `cores`, from /proc/stat's per-cpu lines. Time spent in niced
    processes counts as free unless this process is niced itself: the scheduler gives a nice-0 job the
    core (CFS weights 1024 against nice 19's 15), so such a neighbour is no reason to take fewer threads."""
    want = {f"cpu{c}" for c in cores}
    niced_is_free = os.getpriority(os.PRIO_PROCESS, 0) <= 0 if hasattr(os, "getpriority") else False
    busy = total = 0.0
    try:
        with open(stat) as f:
            for line in f:
                name, *vals = line.split()
                if name in want:
                    v = [float(x) for x in vals[:8]]  # user nice system idle iowait irq softirq steal
                    free = v[3] + v[4] + (v[1] if niced_is_free else 0.0)
                    total += sum(v)
                    busy += sum(v) - free
    except (OSError, ValueError, IndexError):
        return None
    return (busy, total) if total else None


def busy_elsewhere(cores: list[int], seconds: float = SAMPLE_S) -> Optional[float]:
    """Cores' worth of CPU time that other processes used on `cores` over the next `seconds` (None where
    /proc/stat cannot be read). This process's own CPU time in the window is subtracted."""
    a, own_a = cpu_times(cores), time.process_time()
    if a is None:
        return None
    time.sleep(seconds)
    b, own_b = cpu_times(cores), time.process_time()
    return others_busy(a, b, own_b - own_a, seconds, len(cores))


def others_busy(a: Optional[tuple[float, float]], b: Optional[tuple[float, float]], own_s: float, wall_s: float,
                n_cores: int) -> Optional[float]:
    """Cores' worth of CPU time that other processes used between two cpu_times() readings a and b of
    `n_cores` cores, `wall_s` seconds apart, during which this process (or what it waited for) used
    `own_s` CPU seconds; None where a reading is missing or no time passed."""
    if a is None or b is None or b[1] <= a[1] or wall_s <= 0:
        return None
    busy_cores = (b[0] - a[0]) / (b[1] - a[1]) * n_cores  # the busy fraction of the cores' time
    return max(0.0, busy_cores - own_s / wall_s)


def _recent_busy(cores: list[int], max_age: float = 10.0) -> Optional[float]:
    """busy_elsewhere, or once the policy's look if it is less than `max_age` s old: a single run looks at
    the cores once (0.25 s); each later job of a sweep looks again."""
    global _last_sample
    recent, _last_sample = _last_sample, None
    if recent is not None and time.monotonic() - recent[0] < max_age:
        return recent[1]
    return busy_elsewhere(cores)


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


def ceiling(hc=None) -> tuple[int, list[str]]:
    """The most threads a job may take, and why: the cores this process may use (affinity), capped by
    SLURM's cpus_per_task and the launcher's share."""
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
    return n, why


def watch_ceiling(hc=None) -> int:
    """The most threads lnbench.live_threads may move a job to while it trains: ceiling(), except that a
    joblib job's share holds only where it starts. Its sibling workers run one job each, and where they
    idle (a sweep's last job, a sweep of fewer jobs than workers) the cores they leave are this job's to
    use: the watch gives them back as soon as a sibling's job keeps a core busy again. submitit's
    cpus_per_task is a reservation and stays the ceiling."""
    from omegaconf import OmegaConf

    if hc is not None and OmegaConf.select(hc, "launcher.cpus_per_task", default=None) is None:
        hc = None
    return ceiling(hc)[0]


def free_threads(ceiling: int, n_cores: int, busy: float) -> int:
    """Threads for the cores that other processes, keeping `busy` cores' worth busy, leave free: at least
    1, at most `ceiling` (the choice at a job's start and every later move of lnbench.live_threads)."""
    return max(1, min(ceiling, int(n_cores - busy + 0.5)))


def choose(requested: Optional[int], hc=None) -> tuple[int, str]:
    """(threads, why) for one job. `requested` (the threads= key) wins; otherwise the job's ceiling minus
    the cores other processes keep busy right now (at least 1)."""
    if requested is not None:  # validated with the rest of the config
        return int(requested), f"threads={requested} as configured"
    cores = usable_cores()
    n, why = ceiling(hc)
    busy = _recent_busy(cores) if n > 1 else None
    if busy is not None:
        free = free_threads(n, len(cores), busy)
        why.append(f"other processes keep {busy:.1f} of them busy")
        n = free
    return n, "; ".join(why)


def apply(requested: Optional[int], hc=None) -> int:
    """Choose the job's threads, log the choice and why; the caller sets torch.set_num_threads. Threads
    chosen here (not threads=N) may then move while the job trains (lnbench.live_threads)."""
    from lnbench import live_threads

    n, why = choose(requested, hc)
    if requested is None:
        top = watch_ceiling(hc)
        live_threads.arm(top, usable_cores())
        if top > ceiling(hc)[0]:
            why += f"; up to {top} while the other jobs leave cores idle"
    else:
        live_threads.disarm()
    log.info("threads: %d (%s); idle threads: %s", n, why, wait_policy() if n > 1 else "none (one thread)")
    return n
