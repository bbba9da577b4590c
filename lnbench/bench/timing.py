"""How `lnbench bench` times its candidates: interleaved, rotating, after untimed warm-up steps, and the
summary of their step times (lnbench.bench.kernels for layers, lnbench.bench.runs for whole runs)."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable, Optional

import torch


@dataclass
class Candidate:
    name: str  # model name as shown
    impl: str
    step: Callable[[], None]  # one training step
    mem: Callable[[], Optional[float]]  # MB, see the module doc
    is_baseline: bool = False


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_interleaved(cands: list[Candidate], reps: int, warmup: int, device: torch.device) -> dict[str, list[float]]:
    """Each candidate's step times, one step of each per round. The order rotates from round to round:
    a step's time depends on what ran just before it (the same C LSTM measured 1.07x nn.LSTM right
    after it and 1.00x one place later), so every candidate takes every place equally often."""
    for c in cands:
        for _ in range(warmup):
            c.step()
    sync(device)
    times: dict[str, list[float]] = {c.name + "/" + c.impl: [] for c in cands}
    for r in range(reps):
        for c in cands[r % len(cands) :] + cands[: r % len(cands)]:
            sync(device)
            t0 = time.perf_counter()
            c.step()
            sync(device)
            times[c.name + "/" + c.impl].append((time.perf_counter() - t0) * 1e3)
    return times


def summarize(ts: list[float]) -> dict:
    q = statistics.quantiles(ts, n=4, method="inclusive") if len(ts) > 1 else [ts[0]] * 3
    return {
        "ms_median": statistics.median(ts),
        "ms_iqr": q[2] - q[0],
        "ms_min": min(ts),
        "ms_max": max(ts),
    }
