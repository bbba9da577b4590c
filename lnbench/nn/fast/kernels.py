"""The C++ kernels' calls (lnbench/nn/fast/csrc/lstm_norm.cpp) with what crosses the boundary named.

The kernels take and return flat lists of tensors in an order fixed by their schema; these wrappers are the
one place that knows that order, so the autograd code (lnbench.nn.fast.recurrence) reads `kept.AH` or
`grads.dWh`, never `saved[5:]`. The build itself is lnbench.nn.fast.native's.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Sequence

from torch import Tensor

from lnbench.nn.fast import native


class NormStats(NamedTuple):
    """One normalizer's statistics of every step, as the kernel keeps them (BN's biased variance for its
    running averages; unused tensors for LN)."""

    mean: Tensor
    rstd: Tensor
    var_b: Tensor


class NativeKept(NamedTuple):
    """What lstm_norm_fwd keeps for the backward: X = W_x x_t, AH = W_h h_{t-1}, S the gates, C the cell
    states, TC = tanh(N_c(c)), and the statistics of N_x, N_h, N_c (empty slots unless keep)."""

    X: Tensor
    AH: Tensor
    S: Tensor
    C: Tensor
    TC: Tensor
    stats: tuple[NormStats, NormStats, NormStats]

    def flat_stats(self) -> list[Tensor]:
        return [t for s in self.stats for t in s]


class NativeSaved(NamedTuple):
    """Everything the backward reads: the forward's inputs and output, the gains, and what it kept."""

    x: Tensor
    h0: Tensor
    c0: Tensor
    Wx: Tensor
    Wh: Tensor
    out: Tensor
    wx: Tensor
    wh: Tensor
    wc: Tensor
    kept: NativeKept

    def flat(self) -> list[Tensor]:
        """As autograd's save_for_backward takes them (tensors only)."""
        return [*self[:-1], *self.kept[:-1], *self.kept.flat_stats()]

    @classmethod
    def unflat(cls, tensors: Sequence[Tensor]) -> "NativeSaved":
        n = len(cls._fields) - 1
        kept, stats = tensors[n : n + 5], tensors[n + 5 :]
        return cls(*tensors[:n], NativeKept(*kept, _stats(stats)))


class NativeGrads(NamedTuple):
    """lstm_norm_bwd's gradients: dx (empty unless asked), dh_0, dc_0, dW_x, dW_h, the gains' (x, h, c), the
    gradient of a bias on a_t (the same for N_x's and N_h's bias and the gate bias b) and of N_c's bias."""

    dx: Tensor
    dh0: Tensor
    dc0: Tensor
    dWx: Tensor
    dWh: Tensor
    dwx: Tensor
    dwh: Tensor
    dwc: Tensor
    da: Tensor
    dbc: Tensor


def _stats(flat: Sequence[Tensor]) -> tuple[NormStats, NormStats, NormStats]:
    return NormStats(*flat[0:3]), NormStats(*flat[3:6]), NormStats(*flat[6:9])


def lstm_norm_fwd(
    x: Tensor,
    h0: Tensor,
    c0: Tensor,
    Wx: Tensor,
    Wh: Tensor,
    b: Optional[Tensor],
    gains: Sequence[Tensor],
    biases: Sequence[Optional[Tensor]],
    mode: int,
    eps: float,
    unbiased: bool,
    fixed: list[Tensor],
    keep: bool,
) -> tuple[Tensor, Tensor, Tensor, NativeKept]:
    """(out, h_T, c_T, what the backward needs); gains and biases of N_x, N_h, N_c in that order."""
    out, hT, cT, *rest = native.ops().lstm_norm_fwd(
        x, h0, c0, Wx, Wh, b, list(gains), list(biases), mode, eps, unbiased, fixed, keep
    )
    return out, hT, cT, NativeKept(*rest[:5], _stats(rest[5:]))


def lstm_norm_bwd(
    dout: Tensor, dhT: Tensor, dcT: Tensor, saved: NativeSaved, mode: int, unbiased: bool, need_dx: bool
) -> NativeGrads:
    s, k = saved, saved.kept
    return NativeGrads(
        *native.ops().lstm_norm_bwd(
            dout,
            dhT,
            dcT,
            s.x,
            s.h0,
            s.c0,
            s.Wx,
            s.Wh,
            s.out,
            k.X,
            k.AH,
            k.S,
            k.C,
            k.TC,
            k.flat_stats(),
            [s.wx, s.wh, s.wc],
            mode,
            unbiased,
            need_dx,
        )
    )
