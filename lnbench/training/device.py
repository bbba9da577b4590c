"""The device a run trains on (`device=auto|cpu|cuda|cuda:N|mps`), and how a run on CUDA computes there."""

from __future__ import annotations

import torch

from lnbench.errors import ConfigError


def resolve_device(name: str, key: str = "device", kinds: tuple[str, ...] = ("cpu", "cuda", "mps")) -> torch.device:
    """The device `name` names, where this machine has it (`auto`: CUDA if torch sees one, else the CPU); else a
    ConfigError that names it as the user wrote it (`key`: `device` for a run, `--device` for the bench). `kinds`:
    the device types allowed (config/validate.py refuses a run's other names before it starts)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        device = None
    if device is None or device.type not in kinds:
        shown = ["auto", *(n for k in kinds for n in ((k, "cuda:N") if k == "cuda" else (k,)))]
        raise ConfigError(f"{key}={name} is not allowed: use {', '.join(shown[:-1])} or {shown[-1]}.")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"{key}={name} is not allowed here: torch sees no CUDA device. Use {key}=cpu or {key}=auto.")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise ConfigError(
            f"{key}={name} is not allowed here: torch sees {torch.cuda.device_count()} CUDA device(s), "
            f"cuda:0 to cuda:{torch.cuda.device_count() - 1}."
        )
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"{key}={name} is not allowed here: MPS is not available. Use {key}=cpu or {key}=auto.")
    return device


def cuda_settings(device: torch.device) -> None:
    """A run on CUDA computes in float32 as on the CPU, and the same bits each time where the GPU allows it:
    no TF32 (torch's default lets cuDNN's float32 RNN and convolutions round their products' inputs to 10 bits,
    which lnbench's own products on cuBLAS do not: the un-normalized LSTM would train at another precision than
    the LN-LSTM it is compared with), and cuDNN's deterministic algorithms (its default heuristics may pick a
    convolution backward that sums with atomics). Recorded in the provenance; docs/performance.md, "GPU"."""
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
        if device.index is not None:  # `cuda` alone is the current device already (set_device refuses it)
            torch.cuda.set_device(device)  # so that a kernel launched without a device argument lands on the run's
