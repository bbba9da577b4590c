"""Re-deciding a run's torch threads while it trains, when its neighbours come and go.

`lnbench.threads` picks a job's threads once, from a look at the cores when it starts. A neighbour that
arrives later finds a 2-thread run whose threads spin while they wait: every parallel region then waits
for a thread the scheduler has put aside, and steps took 2-20x as long as alone (README, "Threads on a
shared machine"). So while a run trains, every CHECK_S seconds `Watch.tick` compares the CPU time its
cores spent busy with this process's own CPU time since the last look (no sleeping: one read of
/proc/stat and of the process clock) and moves torch's threads to the cores the others leave free: at
least 1, at most its ceiling (`threads.watch_ceiling`: a joblib job may grow past its share into cores
its sibling workers leave idle). The C kernels follow, since they run on torch's thread count.
Only threads that lnbench chose move; `threads=N` is left alone (`threads.apply` arms the watch).
"""
from __future__ import annotations

import logging
import time
from typing import Callable, Optional

import torch

from lnbench import threads

log = logging.getLogger("lnbench")

CHECK_S = 2.0  # seconds of training between two looks: /proc/stat counts in 10 ms ticks, so 200 per core


class Watch:
    """Moves torch's threads between 1 and `ceiling` as other processes take or leave `cores`."""

    def __init__(self, ceiling: int, cores: list[int], every: float = CHECK_S, clock: Callable[[], float] = time.monotonic,
                 cpu_times: Callable[[list[int]], Optional[tuple[float, float]]] = threads.cpu_times,
                 own_cpu: Callable[[], float] = time.process_time):
        self.ceiling, self.cores, self.every = ceiling, cores, every
        self.clock, self.cpu_times, self.own_cpu = clock, cpu_times, own_cpu
        self.last = self._sample()
        self.started_with = torch.get_num_threads()

    def restore(self) -> None:
        torch.set_num_threads(self.started_with)

    def _sample(self) -> tuple[float, Optional[tuple[float, float]], float]:
        return self.clock(), self.cpu_times(self.cores), self.own_cpu()

    def busy_elsewhere(self) -> Optional[float]:
        """Cores' worth of CPU time other processes used on the cores since the last look (None where
        /proc/stat cannot be read); the next look starts from now."""
        (t0, a, own0), (t1, b, own1) = self.last, self._sample()
        self.last = (t1, b, own1)
        return threads.others_busy(a, b, own1 - own0, t1 - t0, len(self.cores))

    def tick(self) -> None:
        """Called once per training step; looks at the cores every `every` seconds."""
        if self.clock() - self.last[0] < self.every:
            return
        busy = self.busy_elsewhere()
        if busy is None:
            return
        want = threads.free_threads(self.ceiling, len(self.cores), busy)
        have = torch.get_num_threads()
        if want != have:
            torch.set_num_threads(want)
            log.info("threads: %d -> %d (other processes used %.1f of %d cores over the last %.1f s)",
                     have, want, busy, len(self.cores), self.every)


_armed: Optional[tuple[int, list[int]]] = None  # (ceiling, cores) of this process's job, set by arm()


def arm(ceiling: int, cores: list[int]) -> None:
    """The job's threads were chosen by lnbench: they may move between 1 and `ceiling` while it trains."""
    global _armed
    _armed = (ceiling, cores) if ceiling > 1 else None


def disarm() -> None:
    global _armed
    _armed = None


def watch(device: torch.device) -> Optional[Watch]:
    """A Watch for this process's run on `device`, or None (threads=N, one core, or not on the CPU)."""
    if _armed is None or device.type != "cpu":
        return None
    return Watch(*_armed)
