"""What computes a recurrent layer, as a value: `KernelPath` (issue 38: kernel identity as a type).

Each layer of lnbench.nn.fast.layers says which path runs it on given tensors (`layer_path`); the run's
provenance prints the paths, and lnbench.training.free_cores asks them whether the run's numbers can depend on the
CPU thread count, instead of matching the prose of the provenance string.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KernelPath:
    """name: what runs ("torch's fused kernel", "native", "triton", "torch ops", "reference loop"); where: the build
    or device it runs for ("AVX512 build", "cuDNN", "CUDA"; "" for torch's own CPU ops, as before); and whether its
    numbers are the same on any CPU thread count: true for lnbench's C++ kernels (a row or a column is computed whole
    by one thread), for torch's fused CPU LSTM/GRU in the presets' steps (lnbench.training.free_cores probes each run
    anyway) and for every GPU path (no CPU thread computes a number of it); false for torch's CPU ops, whose sums
    split by thread."""

    name: str
    where: str
    same_bits_on_any_count: bool

    def __str__(self) -> str:
        """As provenance has always named it on the CPU ("native (AVX2 build)", "torch ops"), the device added on
        a GPU ("triton (CUDA)")."""
        return f"{self.name} ({self.where})" if self.where else self.name

    def as_record(self) -> dict:
        return {"name": self.name, "where": self.where, "same_bits_on_any_count": self.same_bits_on_any_count}


FUSED = "torch's fused kernel"
NATIVE = "native"
TRITON = "triton"
TORCH_OPS = "torch ops"
REFERENCE = "reference loop"


def on_device(name: str, device_type: str, cpu_where: str = "", cpu_same_bits: bool = False) -> KernelPath:
    """The path `name` on a device: on the CPU with the build and thread-count property given; on a GPU the
    device (cuDNN for torch's fused kernel), its numbers independent of the CPU's threads."""
    if device_type == "cpu":
        return KernelPath(name, cpu_where, cpu_same_bits)
    where = "cuDNN" if name == FUSED and device_type == "cuda" else device_type.upper()
    return KernelPath(name, where, True)
