"""What `lnbench bench` says of the device it times on: lnbench's own kernels there, and the GPU's names."""

from __future__ import annotations

import subprocess
from importlib import metadata
from typing import Optional

import torch

from lnbench.nn.fast import native, triton_lstm


def own_kernels(device: torch.device) -> str:
    """What runs lnbench's own layers on `device`: the C++ build on the CPU (built here if need be), on CUDA the
    Triton kernels where they run (lnbench.nn.fast.triton_lstm), else torch's ops."""
    if device.type == "cpu":
        return native.status()
    if triton_lstm.available():
        return f"triton {metadata.version('triton')} (the LN-LSTM), torch ops (the others)"
    return "torch ops (triton is not installed)"


def gpu_meta(device: torch.device) -> dict:
    if device.type != "cuda":
        return {}
    return {
        "gpu": torch.cuda.get_device_name(device),
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "driver": _driver_version(),
    }


def _driver_version() -> Optional[str]:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return out.stdout.strip().splitlines()[0] or None
    except (OSError, subprocess.SubprocessError, IndexError):
        return None


def measured_on(meta: dict) -> str:
    """The machine a bench table names: the GPU (and torch, CUDA) on CUDA, else the CPU, its ISA and threads."""
    if meta.get("gpu"):
        return f"{meta['gpu']} (torch {meta['torch']}, CUDA {meta['cuda']}, no TF32)"
    return f"{meta['cpu']} ({meta['isa']}), {meta['threads']} threads"
