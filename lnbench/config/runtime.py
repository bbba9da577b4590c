"""How a run's process runs, as one record: its torch thread count and why, whether its malloc keeps freed
memory, whether the count follows the free cores, and the cores it may use. Free of torch.

A launcher decides it once, before the run (lnbench.launch.process.threads.decide), and hands it down to the
recipe, which passes its values on (to the data cache, free_cores, provenance, the summary and the checkpoint):
like the seed, it is read once and carried, never asked of torch again further down. A caller that trains
in-process without a launcher (a notebook, a test) gets `Runtime.configured(cfg)`: the config's own `threads`,
else torch's count as it stands. A resume keeps the count its run began with (lnbench.training.checkpoint).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any, Optional

TORCHS_OWN = "torch's default"  # `why` where nothing chose a count: torch's as it stands


def usable_cores() -> list[int]:
    """The cores this process may run on: its CPU affinity, which taskset, cgroups and SLURM's binding set."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return list(range(os.cpu_count() or 1))


@dataclass(frozen=True)
class Runtime:
    # The torch threads the run computes with; None: nothing chose one, torch's count stands (the recipe reads it
    # once and records it here: from then on a value).
    threads: Optional[int]
    why: str  # how the count was decided, for the run's provenance
    keeps_freed_memory: bool = False  # the process's malloc keeps freed memory (lnbench.launch.process.heap)
    # threads_follow: the count follows the free cores where no number depends on it (None, the default; True:
    # the same, and a warning where it cannot); False: never (lnbench.training.free_cores)
    follow: Optional[bool] = None
    cores: tuple[int, ...] = field(default_factory=lambda: tuple(usable_cores()))

    @classmethod
    def configured(cls, cfg: Any) -> "Runtime":
        """An in-process caller's record: the config's `threads` if set (else torch's count), its `threads_follow`."""
        n = cfg.get("threads")
        why = f"threads={n} as configured" if n else TORCHS_OWN
        return cls(int(n) if n else None, why, follow=cfg.get("threads_follow"))

    def with_threads(self, n: int, why: str | None = None) -> "Runtime":
        return replace(self, threads=n, why=self.why if why is None else why)
