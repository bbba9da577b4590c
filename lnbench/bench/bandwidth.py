"""`lnbench bench`'s memory-bandwidth rows: how close Figure 6's MLP step (784-1000-1000-10, Adam) comes to what
the machine's memory can stream.

The step's parameters (1.8M floats, 7.2 MB) are too big for the caches of most CPUs, and a small batch does
little arithmetic per weight, so its time is set by the bytes each phase must move at least:

- forward: read every weight once;
- backward: read the weights of the layers whose input needs a gradient (all but the first), write every
  weight's gradient;
- optimizer (torch's fused Adam, one pass): read parameter, gradient and both moments, write parameter and
  both moments (28 bytes a float32 parameter).

The machine's figure is STREAM's triad (a = b + s c: two arrays read, one written) in torch, over arrays
far bigger than the caches, on the bench's threads, the best of a few runs as STREAM reports it. A phase's
"achieved" bandwidth is its least bytes over its median time: a share near 100% means no faster code exists
for this arithmetic on this machine; a small one, that the phase is bound by something else (the matrix
product's own speed at batch 128, the call overheads at batch 4).
"""

from __future__ import annotations

import time

import torch
from torch import nn

from lnbench.bench.kernels import mlp_model
from lnbench.bench.timing import summarize

TRIAD_FLOATS = 1 << 25  # 128 MB an array: far past any cache (3 arrays: 384 MB)
ADAM_BYTES_PER_PARAM = 7  # floats read (p, g, m, v) and written (p, m, v) by one fused Adam step


def triad_gbps(reps: int = 5) -> float:
    """STREAM triad in torch on the current threads, GB/s (10^9 bytes), the best of `reps`."""
    b = torch.rand(TRIAD_FLOATS)
    c = torch.rand(TRIAD_FLOATS)
    a = torch.empty(TRIAD_FLOATS)
    torch.add(b, c, alpha=3.0, out=a)  # pages touched before timing
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        torch.add(b, c, alpha=3.0, out=a)
        best = min(best, time.perf_counter() - t0)
    return 3 * TRIAD_FLOATS * a.element_size() / best / 1e9


def least_bytes(model: nn.Module) -> dict[str, int]:
    """The bytes each phase of one Adam step of an MLP must move at least (see the module doc)."""
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    size = next(model.parameters()).element_size()
    weights = sum(m.weight.numel() for m in linears)
    params = sum(p.numel() for p in model.parameters())
    later = sum(m.weight.numel() for m in linears[1:])
    return {
        "forward": weights * size,
        "backward": (later + params) * size,
        "optimizer": ADAM_BYTES_PER_PARAM * params * size,
    }


def mlp_bandwidth_rows(reps: int, warmup: int, batches, log) -> list[dict]:
    """Per batch size: each phase of the fused-Adam MLP step, its median ms, least bytes and share of the triad."""
    stream = triad_gbps()
    log(f"  STREAM triad: {stream:.1f} GB/s on {torch.get_num_threads()} threads")
    rows = []
    for B in batches:
        torch.manual_seed(0)
        model = mlp_model("none", torch.device("cpu"), torch.float32)
        opt = torch.optim.Adam(model.parameters(), lr=1e-4, fused=True)
        x, y = torch.randn(B, 784), torch.randint(0, 10, (B,))
        times: dict[str, list[float]] = {"forward": [], "backward": [], "optimizer": []}
        for r in range(warmup + reps):
            t0 = time.perf_counter()
            loss = nn.functional.cross_entropy(model(x), y)
            t1 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            t2 = time.perf_counter()
            opt.step()
            t3 = time.perf_counter()
            if r >= warmup:
                for phase, ms in zip(times, ((t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3)):
                    times[phase].append(ms)
        need = least_bytes(model)
        steps = [sum(ts) for ts in zip(*times.values())]
        for phase, ts in [*times.items(), ("step", steps)]:
            nbytes = sum(need.values()) if phase == "step" else need[phase]
            st = summarize(ts)
            ms = st["ms_median"]
            gbps = nbytes / (ms / 1e3) / 1e9
            rows.append(
                {
                    "section": "bandwidth",
                    "model": f"mlp {phase}",
                    "impl": f"fused Adam, {nbytes / 1e6:.1f} MB",
                    "batch": B,
                    "seq_len": None,
                    "hidden": 1000,
                    "input_size": 784,
                    "reps": reps,
                    **st,
                    "samples_per_s": None,
                    "mem_mb": None,
                    "baseline": f"STREAM triad {stream:.1f} GB/s",
                    "baseline_ms_median": None,
                    "ratio": gbps / stream,  # achieved / stream bandwidth
                    "least_mb": nbytes / 1e6,
                    "gbps": gbps,
                    "stream_gbps": stream,
                }
            )
            log(f"  B={B:<4} {phase:9s} {ms:7.2f} ms  {nbytes / 1e6:6.1f} MB  {gbps:5.1f} GB/s  {gbps / stream:4.0%}")
    return rows
