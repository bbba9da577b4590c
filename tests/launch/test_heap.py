"""lnbench.launch.process.heap: freed memory stays in the process, so a step's activations are not mapped and zeroed
by the kernel again every step; settings the user made are kept."""

import subprocess
import sys

import pytest

from lnbench.launch.process import heap

PROBE = """
import resource, sys
import torch
if sys.argv[1] == "keep":
    from lnbench.launch.process.heap import keep_freed_memory
    assert keep_freed_memory()
from lnbench.nn.fast.layers import fast_layer
from lnbench.nn.norm import NormConfig, NormKind
from lnbench.nn.rnn import LSTMCell
torch.set_num_threads(1)
layer = fast_layer(LSTMCell(1, 100, NormConfig(kind=NormKind.layer)))  # its buffers: 40-60 MB each
x = torch.randn(300, 100, 1, requires_grad=True)
def step():
    out, _ = layer(x)
    out.sum().backward()
for _ in range(3):  # the heap grows to the step's peak
    step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(4):
    step()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str, env=None) -> int:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True, env=env)
    return int(out.stdout.split()[-1])


@pytest.mark.skipif(not heap.platform.libc_ver()[0] == "glibc", reason="glibc's malloc only")
def test_freed_blocks_are_reused_without_page_faults(monkeypatch):
    for k in heap._USER_KEYS + ("GLIBC_TUNABLES",):
        monkeypatch.delenv(k, raising=False)
    default, keep = _faults("default"), _faults("keep")  # over four training steps of an LN-LSTM layer
    # without: its activations mapped and zeroed again each step, 4 KB at a time (measured 79,000-176,000)
    assert default > 40_000
    assert keep < default // 4  # with: measured 0-9,000, the heap growing once more where fragmentation varies


def test_a_users_malloc_settings_are_kept(monkeypatch):
    monkeypatch.setattr(heap, "_done", False)
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "0")
    assert heap.user_chose() and not heap.keep_freed_memory()
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_")
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=65536")
    assert heap.user_chose() and not heap.keep_freed_memory()
