"""The normalizers of lnbench's fast recurrent layers as their loops run them (lnbench.nn.fast.recurrence):
one step at a time with the gradients written by hand (`StepNorm`), all steps at once under autograd
(`normalize_steps`, `ColumnLayerNorm`), and as the C++ kernels take them (`NativeNorms`).

Which kind each is comes from the cell's registered normalizer (`Normalizer.fast_kernel`: "layer" or
"batch"), never from the module's class. LN's gain and bias gradients are summed over all steps and rows
after the loop, by reductions that split over the output columns: native_layer_norm_backward's own sums
split the rows over the threads, so their rounding would follow the thread count.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch
from torch import Tensor, nn

from lnbench.nn.batch_norm import BatchNorm
from lnbench.nn.fast.kernels import NormStats
from lnbench.nn.rnn import LSTMCell

_ln = torch.native_layer_norm
_ln_bwd = torch.ops.aten.native_layer_norm_backward.default
_bn = torch.native_batch_norm
_bn_bwd = torch.ops.aten.native_batch_norm_backward.default
_DX_ONLY = [True, False, False]
BATCH = "batch"  # the fast_kernel of batch norm (lnbench.nn.normalizers); "layer" is the other


class StepNorm:
    """One normalizer of the recurrence (LN or BN_t) as the torch-op loops use it.

    `fwd(a, t) -> y` normalizes one step (B, G) with its gain and bias times the `scale` it was made with;
    `bwd(dy, a, t) -> da` is the input gradient of the unscaled normalizer; after the backward loop
    `param_grads(DY, A)` gives the gain and bias gradients from every step's dy and input at once. BN's
    batch statistics are reductions over the batch dim, which torch computes per unit on one thread
    (torch.native_batch_norm's own statistics split the batch over the threads, so their rounding would
    follow the thread count).
    """

    def __init__(self, mod: nn.Module, kernel: str, steps: int, scale: Optional[Tensor] = None):
        self.w, self.b, self.eps = mod.weight, mod.bias, mod.eps
        self.ws = self.w if scale is None else self.w * scale
        self.bs = None if self.b is None else (self.b if scale is None else self.b * scale)
        self.bn = kernel == BATCH  # the cell's Normalizer.fast_kernel
        self.G = mod.weight.shape[0]
        self.means: list[Tensor] = []
        self.rstds: list[Tensor] = []
        self.vars: list[Tensor] = []  # BN in training: each step's biased batch variance
        if self.bn:
            self.mod, self.train = mod, mod.training
            if not self.train:
                self.run_mean, self.run_var = bn_eval_stats(mod, steps)

    def fwd(self, a: Tensor, t: int) -> Tensor:
        if not self.bn:
            y, mean, rstd = _ln(a, (self.G,), self.ws, self.bs, self.eps)
        elif self.train:
            B = self.batch = a.shape[0]
            mean, var_b = a.mean(0), a.var(0, unbiased=False)
            rstd = ((var_b * (B / (B - 1)) if self.mod.unbiased else var_b) + self.eps).rsqrt_()
            y = (a - mean).mul_(rstd * self.ws)
            y = y.add_(self.bs) if self.bs is not None else y
            self.vars.append(var_b)
        else:  # the rstd slot holds the running variance: native_batch_norm_backward takes it so
            mean, rstd = self.run_mean[t], self.run_var[t]
            y = _bn(a, self.ws, self.bs, mean, rstd, False, 0.0, self.eps)[0]
        self.means.append(mean)
        self.rstds.append(rstd)
        return y

    def stats(self) -> tuple[Tensor, Tensor]:
        return torch.stack(self.means), torch.stack(self.rstds)

    def finish(self) -> None:
        """BN's running averages from the per-step batch statistics, as BatchNorm updates them."""
        if self.bn and self.train and self.means:
            B = self.batch
            bn_update_running(self.mod, torch.stack(self.means), torch.stack(self.vars) * (B / (B - 1)))

    def bwd(self, dy: Tensor, a: Tensor, mean: Tensor, rstd: Tensor) -> Tensor:
        if not self.bn:
            return _ln_bwd(dy, a, (self.G,), mean, rstd, self.w, self.b, _DX_ONLY)[0]
        if not self.train:
            return _bn_bwd(dy, a, self.w, mean, rstd, None, None, False, self.eps, _DX_ONLY)[0]
        B = a.shape[0]
        g = dy * self.w
        xhat = (a - mean).mul_(rstd)
        s2 = (g * xhat).sum(0).div_(B - 1 if self.mod.unbiased else B)  # the unbiased variance divides by B - 1
        return g.sub_(g.mean(0)).sub_(xhat.mul_(s2)).mul_(rstd)

    def param_grads(self, dy: Tensor, a: Tensor, mean: Tensor, rstd: Tensor) -> tuple[Tensor, Optional[Tensor]]:
        """(dgain, dbias) from every step: dy, a (T, B, G), mean/rstd as `stats()` stacked them (LN's
        (T, B, 1) per row; BN's (T, G) per unit)."""
        if self.bn:
            mean, rstd = mean.unsqueeze(1), (rstd if self.train else (rstd + self.eps).rsqrt()).unsqueeze(1)
        xhat = (a - mean).mul_(rstd)
        dw = (xhat.mul_(dy)).sum((0, 1))
        return dw, (dy.sum((0, 1)) if self.b is not None else None)


class ColumnLayerNorm(torch.autograd.Function):
    """F.layer_norm over the last dim whose gain and bias gradients are column sums (so, like the
    recurrences', their rounding does not follow the thread count)."""

    @staticmethod
    def forward(ctx, a, w, b, eps):
        y, mean, rstd = _ln(a, (a.shape[-1],), w, b, eps)
        ctx.save_for_backward(a, w, b, mean, rstd)
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dy):
        a, w, b, mean, rstd = ctx.saved_tensors
        da = _ln_bwd(dy, a, (a.shape[-1],), mean, rstd, w, b, _DX_ONLY)[0]
        rows = tuple(range(a.dim() - 1))
        dw = (a - mean).mul_(rstd).mul_(dy).sum(rows)
        return da, dw, (dy.sum(rows) if b is not None else None), None


def normalize_steps(norm: nn.Module, kernel: str, a: Tensor) -> Tensor:
    """norm(a) for a (T, B, G) under autograd (kernel: the cell's Normalizer.fast_kernel); LN's gain and bias
    gradients as column sums.
    BN_t in training normalizes the T*G columns of a (B, T*G) copy (each column is one unit at one step:
    per-step statistics), since reductions over the middle (batch) dim of (T, B, G) are slow strided
    passes; its statistics are reductions over dim 0, which torch computes per column on one thread."""
    if kernel != BATCH:
        return ColumnLayerNorm.apply(a, norm.weight, norm.bias, norm.eps)
    T, B, G = a.shape
    if not (norm.training and B >= 2):
        return norm(a)  # BatchNorm's forward over all steps at once: per-step statistics
    a2 = a.transpose(0, 1).reshape(B, T * G)
    mean, var_b = a2.mean(0), a2.var(0, unbiased=False)
    rstd = ((var_b * (B / (B - 1)) if norm.unbiased else var_b) + norm.eps).rsqrt()
    y = (a2 - mean) * (rstd * norm.weight.repeat(T))
    if norm.bias is not None:
        y = y + norm.bias.repeat(T)
    bn_update_running(norm, mean.detach().view(T, G), var_b.detach().view(T, G) * (B / (B - 1)))
    return y.view(B, T, G).transpose(0, 1).contiguous()


def bn_eval_stats(mod: BatchNorm, steps: int) -> tuple[Tensor, Tensor]:
    """(mean, var) of each step (steps, G) from the running averages (the last slot past time_steps)."""
    if mod.time_steps:
        return mod.running_stats(steps, None)
    return mod.running_mean.expand(steps, -1), mod.running_var.expand(steps, -1)


def bn_update_running(mod: BatchNorm, means: Tensor, vars_u: Tensor) -> None:
    """BatchNorm.forward's running-average update for the per-step batch means / unbiased variances (T, G) of one
    sequence."""
    m = mod.momentum
    with torch.no_grad():
        if not mod.time_steps:  # one set of statistics, updated at every step in turn
            for mean, var in zip(means, vars_u):
                mod.running_mean.lerp_(mean, m)
                mod.running_var.lerp_(var, m)
            return
        n = min(len(means), mod.time_steps)  # steps past the last slot do not update it
        mod.running_mean[:n].lerp_(means[:n], m)
        mod.running_var[:n].lerp_(vars_u[:n], m)


class NativeNorms:
    """A cell's normalizers as the C++ kernels take them (the LSTM's N_x, N_h, N_c; the GRU's N_xrz, N_xn, N_hrz,
    N_hn): one mode (per-row statistics for LN; per-column over the batch for BN in training; BN's running
    averages at evaluation; none for a cell without a normalizer, whose Linear biases the kernel adds) and,
    for BN in training, the running averages to update from the statistics the kernel returns."""

    LAYER, BATCH, FIXED, NONE = 0, 1, 2, 3

    def __init__(self, cell: nn.Module, steps: int):
        if isinstance(cell, LSTMCell):
            self.mods: tuple[nn.Module, ...] = (cell.norm_x, cell.norm_h, cell.norm_c)
        else:
            self.mods = (cell.norm_x_rz, cell.norm_x_n, cell.norm_h_rz, cell.norm_h_n)
        first = self.mods[0]
        kernel = cell.nz.fast_kernel
        self.eps = first.eps if kernel is not None else 0.0
        self.bn = kernel == BATCH
        self.unbiased = self.bn and first.unbiased
        if kernel is None:
            if cell.nz.activations:
                raise ValueError(f"the C++ kernels have no form of the {cell.nz.name} normalizer")
            self.mode = self.NONE
        else:
            self.mode = self.LAYER if not self.bn else self.BATCH if first.training else self.FIXED
        self.fixed: list[Tensor] = []
        if self.mode == self.FIXED:
            for mod in self.mods:
                mean, var = bn_eval_stats(mod, steps)
                self.fixed += [mean.contiguous(), (var + mod.eps).rsqrt().contiguous()]

    def finish(self, stats: Sequence[NormStats], batch: int) -> None:
        """BN's running averages from each step's batch mean and (biased) variance, as BatchNorm updates them."""
        if self.mode == self.BATCH:
            for mod, st in zip(self.mods, stats):
                G = mod.weight.shape[0]
                bn_update_running(mod, st.mean, st.var_b.view(-1, G) * (batch / (batch - 1)))
