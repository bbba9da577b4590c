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


def available_bytes(device=None) -> int | None:
    """Memory a run can still take: the GPU's free memory on CUDA (None where it cannot be read without starting
    CUDA here), else the kernel's MemAvailable."""
    if device is not None and getattr(device, "type", "cpu") == "cuda":
        return gpu_free_bytes(device)
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")  # not Linux: all of it


def gpu_free_bytes(device) -> int | None:
    """The GPU's free memory: from CUDA where this process has started it; else from NVML, which needs no CUDA
    context. Never by starting CUDA: the checks before a sweep run in the process that forks its jobs
    (lnbench.launch.process.isolate), and a child of a process with a CUDA context cannot use CUDA. None where NVML is
    missing or the GPU's NVML index is unclear (CUDA_VISIBLE_DEVICES set): the run then finds out itself."""
    if torch.cuda.is_initialized():
        return int(torch.cuda.mem_get_info(device)[0])
    if os.environ.get("CUDA_VISIBLE_DEVICES") is not None:
        return None
    try:
        import pynvml  # noqa: PLC0415 (nvidia-ml-py: beside most CUDA installs, not a dependency of lnbench)

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(device.index or 0)).free)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no NVML here: no check before the run
        return None


def check_fits(key: str, count: int, bytes_each: float, what: str, device=None) -> None:
    """ConfigError where `count` items (the value of `key`) of `bytes_each` bytes exceed the memory available
    (no check where it cannot be read)."""
    need, have = count * bytes_each, available_bytes(device)
    if have is not None and need > have:
        most = max(int(have // max(bytes_each, 1)), 0)
        raise ConfigError(
            f"{key}={count} is not allowed here: {what} would take about {need / GB:.3g} GB "
            f"({bytes_each / 2**20:.3g} MB "
            f"each), and {have / GB:.3g} GB of memory is available. Use {key} <= {most}."
        )
