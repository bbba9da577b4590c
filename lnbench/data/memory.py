"""Whether a run's data and training batch fit in memory, found out before they are made.

A batch asked for is made whole at each step; one too big for the machine ended in an allocator traceback,
or in the OOM killer's SIGKILL, and the pre-run check itself used to make it. Here sizes are estimated
from a few cases and refused, with the largest size that fits, where they would not fit.
"""

from __future__ import annotations

import os

import torch

from lnbench.errors import ConfigError

GB = 2**30


def available_bytes(device=None) -> int:
    """Memory a run can still take: the GPU's free memory on CUDA, else the kernel's MemAvailable."""
    if device is not None and getattr(device, "type", "cpu") == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")  # not Linux: all of it


def check_fits(key: str, count: int, bytes_each: float, what: str, device=None) -> None:
    """ConfigError where `count` items (the value of `key`) of `bytes_each` bytes exceed the memory available."""
    need, have = count * bytes_each, available_bytes(device)
    if need > have:
        most = max(int(have // max(bytes_each, 1)), 0)
        raise ConfigError(
            f"{key}={count} is not allowed here: {what} would take about {need / GB:.3g} GB "
            f"({bytes_each / 2**20:.3g} MB "
            f"each), and {have / GB:.3g} GB of memory is available. Use {key} <= {most}."
        )
