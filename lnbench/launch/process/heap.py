"""Keep freed memory in the process for the next training step, instead of handing it back to the kernel.

glibc's malloc serves every block over 32 MB with its own mmap and unmaps it on free, and trims the heap
when its top is free. A training step allocates its activations afresh (torch has no caching allocator
on the CPU), so each step the kernel mapped and zeroed them again, page by page: at sequential MNIST's
shape (T=784, B=100, H=100) ln_lstm's step took 121,000 page faults and 272 ms of system time, most of
a 356 ms step. With mmap off and the trim threshold at 1 GB (mallopt, the same settings as the
MALLOC_MMAP_MAX_ / MALLOC_TRIM_THRESHOLD_ environment variables) it took 0 faults and 157 ms. The cost:
the process keeps its peak heap until it exits, which a training job reaches every step anyway. This is
the reuse PyTorch's performance tuning guide gets from preloading jemalloc or tcmalloc, without a
library to install.

Settings the user made (GLIBC_TUNABLES with malloc tunables, MALLOC_*_ variables) are kept; nothing
happens outside glibc.
"""

from __future__ import annotations

import ctypes
import os
import platform

M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # <malloc.h>
TRIM_THRESHOLD = 1 << 30
_USER_KEYS = ("MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_")
_done = False


def user_chose() -> bool:
    return any(k in os.environ for k in _USER_KEYS) or "glibc.malloc" in os.environ.get("GLIBC_TUNABLES", "")


def keep_freed_memory() -> bool:
    """Once per process: malloc never maps a block on its own and trims only above TRIM_THRESHOLD.
    True where it was set here (now or before)."""
    global _done
    if _done:
        return True
    if user_chose() or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(None)
        _done = bool(libc.mallopt(M_MMAP_MAX, 0)) and bool(libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    except (OSError, AttributeError):
        return False
    return _done
