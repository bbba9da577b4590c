"""lnbench.data.memory: a batch that would not fit is refused naming the largest that does; on a GPU the free memory
is read without starting CUDA in the checking process (a sweep forks its jobs from it)."""

import pytest
import torch

from lnbench.data import memory
from lnbench.errors import ConfigError


def test_too_big_is_refused_with_the_largest_size_that_fits(monkeypatch):
    monkeypatch.setattr(memory, "available_bytes", lambda device=None: 10 * 2**20)
    with pytest.raises(
        ConfigError, match=r"dataset.batch_size=100 is not allowed here: .* Use dataset.batch_size <= 40"
    ):
        memory.check_fits("dataset.batch_size", 100, 256 * 1024, "a batch", None)
    memory.check_fits("dataset.batch_size", 40, 256 * 1024, "a batch", None)  # fits: nothing raised


def test_gpu_memory_unreadable_without_starting_cuda_means_no_check(monkeypatch):
    monkeypatch.setattr(memory, "gpu_free_bytes", lambda device: None)
    memory.check_fits("dataset.batch_size", 10**9, 1e9, "a batch", torch.device("cuda"))  # not refused


def test_reading_gpu_memory_never_starts_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: pytest.fail("mem_get_info starts CUDA"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    got = memory.gpu_free_bytes(torch.device("cuda"))  # NVML where there is one (a GPU machine), else None
    assert got is None or got > 0
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")  # NVML's index of the GPU would be unclear: no answer
    assert memory.gpu_free_bytes(torch.device("cuda")) is None
