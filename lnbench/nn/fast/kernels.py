"""The C++ kernels' calls (lnbench/nn/fast/csrc/lstm_norm.cpp, gru_norm.cpp) with what crosses the boundary named.

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
        return _flat_stats(self.stats)


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
        return _flat(self)

    @classmethod
    def unflat(cls, tensors: Sequence[Tensor]) -> "NativeSaved":
        return _unflat(cls, NativeKept, tensors)


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


def _stats(flat: Sequence[Tensor]) -> tuple[NormStats, ...]:
    return tuple(NormStats(*flat[i : i + 3]) for i in range(0, len(flat), 3))


def _flat_stats(stats: Sequence[NormStats]) -> list[Tensor]:
    return [t for s in stats for t in s]


# A Saved tuple (NativeSaved, GRUSaved) ends with its Kept tuple, which ends with the normalizers' statistics:
# flat, the saved tensors, then the kept ones, then every statistic, in that order.
def _flat(saved) -> list[Optional[Tensor]]:
    return [*saved[:-1], *saved.kept[:-1], *_flat_stats(saved.kept.stats)]


def _unflat(saved_cls, kept_cls, tensors: Sequence[Tensor]):
    n, m = len(saved_cls._fields) - 1, len(kept_cls._fields) - 1
    return saved_cls(*tensors[:n], kept_cls(*tensors[n : n + m], _stats(tensors[n + m :])))


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


# --------------------------------------------------------------------------------------------------
# GRU (gru_norm.cpp): four normalizers, x_rz, x_n, h_rz, h_n, in that order everywhere
# --------------------------------------------------------------------------------------------------
class GRUKept(NamedTuple):
    """What gru_norm_fwd keeps for the backward: X = W_x x_t, AH = W_h h_{t-1} (one step's only without a
    normalizer: the backward does not read them), S = [r, z, n], NN = N_hn(AH_n), and the statistics of N_xrz,
    N_xn, N_hrz, N_hn (one step's slots unless keep; unused without a normalizer)."""

    X: Tensor
    AH: Tensor
    S: Tensor
    NN: Tensor
    stats: tuple[NormStats, ...]

    def flat_stats(self) -> list[Tensor]:
        return _flat_stats(self.stats)


class GRUSaved(NamedTuple):
    """Everything the GRU's backward reads: the forward's inputs and output, the gains (None without a
    normalizer), and what it kept."""

    x: Tensor
    h0: Tensor
    Wx: Tensor
    Wh: Tensor
    out: Tensor
    w_xrz: Optional[Tensor]
    w_xn: Optional[Tensor]
    w_hrz: Optional[Tensor]
    w_hn: Optional[Tensor]
    kept: GRUKept

    def flat(self) -> list[Optional[Tensor]]:
        return _flat(self)

    @classmethod
    def unflat(cls, tensors: Sequence[Tensor]) -> "GRUSaved":
        return _unflat(cls, GRUKept, tensors)


class GRUGrads(NamedTuple):
    """gru_norm_bwd's gradients: dx (empty unless asked), dh_0, dW_x, dW_h, the gains' (zeros without a
    normalizer), dax: the gradient of every bias on the x side's pre-activations [r, z, n] (N_xrz's and N_xn's
    biases, the GRU's gate and candidate bias, W_x's bias; N_hrz's bias is its first 2H), and dnn: N_hn's
    bias's (W_h's n slice without a normalizer)."""

    dx: Tensor
    dh0: Tensor
    dWx: Tensor
    dWh: Tensor
    dw_xrz: Tensor
    dw_xn: Tensor
    dw_hrz: Tensor
    dw_hn: Tensor
    dax: Tensor
    dnn: Tensor


def gru_norm_fwd(
    x: Tensor,
    h0: Tensor,
    Wx: Tensor,
    Wh: Tensor,
    b: Optional[Tensor],
    gains: Sequence[Optional[Tensor]],
    biases: Sequence[Optional[Tensor]],
    mode: int,
    eps: float,
    unbiased: bool,
    fixed: list[Tensor],
    keep: bool,
) -> tuple[Tensor, Tensor, GRUKept]:
    """(out, h_T, what the backward needs)."""
    out, hT, *rest = native.ops().gru_norm_fwd(
        x, h0, Wx, Wh, b, list(gains), list(biases), mode, eps, unbiased, fixed, keep
    )
    return out, hT, GRUKept(*rest[:4], _stats(rest[4:]))


def gru_norm_bwd(dout: Tensor, dhT: Tensor, saved: GRUSaved, mode: int, unbiased: bool, need_dx: bool) -> GRUGrads:
    s, k = saved, saved.kept
    return GRUGrads(
        *native.ops().gru_norm_bwd(
            dout,
            dhT,
            s.x,
            s.h0,
            s.Wx,
            s.Wh,
            s.out,
            k.X,
            k.AH,
            k.S,
            k.NN,
            k.flat_stats(),
            [s.w_xrz, s.w_xn, s.w_hrz, s.w_hn],
            mode,
            unbiased,
            need_dx,
        )
    )
