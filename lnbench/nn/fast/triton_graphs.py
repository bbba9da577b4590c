"""The Triton LN-LSTM's training step with its two time loops each replayed as one CUDA graph (on unless
`LNBENCH_CUDA_GRAPHS=0`; lnbench.nn.fast.triton_lstm has the kernels and the loops).

Eager, each step of a loop is two launches from Python (a cuBLAS product and a Triton kernel), and the launches
cost more than the GPU's work at the presets' sizes. Here each loop (forward: T products and kernels; backward: T
kernels and products, then the weight and gain gradients) is captured once per shape into a CUDA graph over static
buffers, and a call is copies in, one replay, copies out: the same kernels in the same order, so the same bits as
eager. Only where a backward follows (training steps: their shapes are fixed); evaluation runs the eager loop.

A call's inputs are copied into the graph's buffers and what it keeps for the backward is cloned out of them, since
another layer of the same shape replays the same graph before this one's backward (which copies its inputs and kept
values back, unless nothing else replayed in between). At most KEEP shapes keep graphs (each holds its buffers:
about 100 MB at B=32 T=100 H=256). Where a capture fails, or its first replay on random inputs differs from
the eager loops', that shape runs eager, logged once.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from contextlib import nullcontext
from typing import Optional

import torch

from lnbench import environment
from lnbench.nn.fast.triton_lstm import Grads, Kept, backward_loop, forward_loop

log = logging.getLogger("lnbench")
KEEP = 4
WARMUP = 2  # eager runs of each loop on a side stream before its capture (torch's rule for capturing)


def capture(fn, device: torch.device):
    """fn() captured as a CUDA graph, after WARMUP eager calls on a side stream: (its replay, fn's results, which
    each replay writes again). Kernels are only recorded, not run, while capturing."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(WARMUP):
            fn()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        results = fn()
    return graph.replay, results


class LoopGraphs:
    """One shape's two graphs and their static buffers (inputs, what the forward keeps, output gradients)."""

    def __init__(self, T: int, B: int, H: int, eps: tuple[float, float], device: torch.device):
        G = 4 * H
        z = lambda *shape: torch.zeros(*shape, device=device)  # noqa: E731
        # (xp, h0, c0, Wh, wh, bh, wc, bc): gains of 1 so that the warm-up computes on finite numbers
        self.inputs = [z(T, B, G), z(B, H), z(B, H), z(G, H), z(G) + 1, z(G), z(H) + 1, z(H)]
        self.kept = Kept.empty(self.inputs[0], T)
        self.douts = [z(T, B, H), z(B, H), z(B, H)]
        self.eps, self.owner = eps, None  # owner: the call whose kept values the static buffers hold
        xp, h0, c0, Wh, wh, bh, wc, bc = self.inputs

        def forward():
            return forward_loop(xp, h0, c0, Wh, wh, bh, wc, bc, *eps, self.kept)

        def backward():
            return backward_loop(*self.douts, h0, c0, Wh, wh, wc, self.kept)

        self.fwd, self.final = capture(forward, device)  # final: (h_T, c_T), views of the kept buffers
        self.bwd, self.grads = capture(backward, device)
        self.check()

    def check(self) -> None:
        """Both graphs replayed on random inputs give the eager loops' results; RuntimeError where not."""
        gen = torch.Generator().manual_seed(0)
        for static in [*self.inputs, *self.douts]:
            static.copy_(torch.randn(static.shape, generator=gen) * 0.5 + 0.5)
        self.fwd()
        self.bwd()
        xp, h0, c0, Wh, wh, bh, wc, bc = self.inputs
        kept = Kept.empty(xp, xp.shape[0])
        forward_loop(xp, h0, c0, Wh, wh, bh, wc, bc, *self.eps, kept)
        grads = backward_loop(*self.douts, h0, c0, Wh, wh, wc, kept)
        for got, want in zip([*self.kept, *self.grads], [*kept, *grads]):
            if not torch.allclose(got, want, rtol=1e-5, atol=1e-6):
                raise RuntimeError("a replay of the captured loops differs from the eager loops")

    def forward(self, args, owner) -> tuple[Kept, torch.Tensor, torch.Tensor]:
        for static, value in zip(self.inputs, args):
            static.copy_(value)
        self.fwd()
        self.owner = owner
        h, c = self.final
        return Kept(*(t.clone() for t in self.kept)), h.clone(), c.clone()

    def backward(self, douts, read: tuple, kept: Kept, owner) -> Grads:
        """read: the inputs the backward reads (h0, c0, Wh, wh, wc)."""
        if self.owner is not owner:  # another call replayed since: its inputs and values are in the buffers
            h0, c0, Wh, wh, _, wc = self.inputs[1:7]
            for static, value in zip([h0, c0, Wh, wh, wc, *self.kept], [*read, *kept]):
                static.copy_(value)
        for static, value in zip(self.douts, douts):
            static.copy_(value)
        self.bwd()
        self.owner = None
        return Grads(*(t.clone() for t in self.grads))


def enabled() -> bool:
    """On unless LNBENCH_CUDA_GRAPHS=0 (then every launch goes from Python, as eager)."""
    return environment.value("LNBENCH_CUDA_GRAPHS", "1") != "0"


_graphs: "OrderedDict[tuple, Optional[LoopGraphs]]" = OrderedDict()


def graphs_for(T: int, B: int, H: int, eps: tuple[float, float], device: torch.device) -> Optional[LoopGraphs]:
    """This shape's graphs, captured on first use (the KEEP last shapes kept); None where the capture failed."""
    key = (T, B, H, eps, device)
    if key in _graphs:
        _graphs.move_to_end(key)
        return _graphs[key]
    while len(_graphs) >= KEEP:
        _graphs.popitem(last=False)
    try:
        with torch.cuda.device(device) if device.type == "cuda" else nullcontext():
            _graphs[key] = LoopGraphs(T, B, H, eps, device)
    except Exception as e:  # noqa: BLE001 - this shape runs the eager loops instead
        log.warning("CUDA graphs of the Triton LN-LSTM at T=%d B=%d H=%d failed (%s: %s): eager launches", T, B, H,
                    type(e).__name__, str(e)[:200])  # fmt: skip
        _graphs[key] = None
    return _graphs[key]


class GraphedTritonLSTMRecurrence(torch.autograd.Function):
    """TritonLSTMRecurrence's training step (need_grad) on the shape's LoopGraphs: the same arguments and results."""

    @staticmethod
    def forward(ctx, graphs: LoopGraphs, xp, h0, c0, Wh, wh, bh, wc, bc):
        ctx.graphs, ctx.owner = graphs, object()
        kept, h, c = graphs.forward((xp, h0, c0, Wh, wh, bh, wc, bc), ctx.owner)
        ctx.save_for_backward(h0, c0, Wh, wh, wc, *kept)
        return kept.out, h, c

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dout, dhT, dcT):
        saved = ctx.saved_tensors
        grads = ctx.graphs.backward((dout, dhT, dcT), saved[:5], Kept(*saved[5:]), ctx.owner)
        return None, *grads
