"""The recurrences of lnbench's fast normalized layers (lnbench.nn.fast.layers.NormalizedLayer), each ONE
autograd.Function with a hand-written backward through time on torch's ops, or on lnbench's C++ kernels
(lnbench.nn.fast.native) for the LN/BN LSTM; the per-step normalizers they run (`_Norm`).

- The input side (W_x x, its normalizer, the gate bias) runs for all steps at once under ordinary autograd
  (fast_rnn); the recurrence here writes a few aten ops per step into preallocated (T, B, .) buffers. That
  removes autograd's per-op bookkeeping, which dominates a Python loop of small ops; the recurrent
  weight's gradient is one matmul over all steps.
- tanh is computed as 2 sigmoid(2x) - 1 (the factor 2 folded into the normalizers' gains and biases):
  torch's float tanh costs 3x its sigmoid on CPU, and the recurrence takes two per step
  (docs/performance.md).
- LN's gain and bias gradients are summed over all steps and rows after the loop, by reductions that
  split over the output columns: native_layer_norm_backward's own sums split the rows over the threads,
  so their rounding would follow the thread count.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from lnbench.nn.fast import native
from lnbench.nn.norm import BatchNorm, apply_norm, normalizer
from lnbench.nn.rnn import LSTMCell

_ln = torch.native_layer_norm
_ln_bwd = torch.ops.aten.native_layer_norm_backward.default
_bn = torch.native_batch_norm
_bn_bwd = torch.ops.aten.native_batch_norm_backward.default
_DX_ONLY = [True, False, False]


class _Norm:
    """One normalizer of the recurrence (LN or BN_t) as the torch-op loops use it.

    `fwd(a, t) -> y` normalizes one step (B, G) with its gain and bias times the `scale` it was made with;
    `bwd(dy, a, t) -> da` is the input gradient of the unscaled normalizer; after the backward loop
    `param_grads(DY, A)` gives the gain and bias gradients from every step's dy and input at once. BN's
    batch statistics are reductions over the batch dim, which torch computes per unit on one thread
    (torch.native_batch_norm's own statistics split the batch over the threads, so their rounding would
    follow the thread count).
    """

    def __init__(self, mod: nn.Module, steps: int, scale: Optional[Tensor] = None):
        self.w, self.b, self.eps = mod.weight, mod.bias, mod.eps
        self.ws = self.w if scale is None else self.w * scale
        self.bs = None if self.b is None else (self.b if scale is None else self.b * scale)
        self.bn = isinstance(mod, BatchNorm)
        self.G = mod.weight.shape[0]
        self.means: list[Tensor] = []
        self.rstds: list[Tensor] = []
        self.vars: list[Tensor] = []  # BN in training: each step's biased batch variance
        if self.bn:
            self.mod, self.train = mod, mod.training
            if not self.train:
                self.run_mean, self.run_var = _bn_eval_stats(mod, steps)

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
            _bn_update_running(self.mod, torch.stack(self.means), torch.stack(self.vars) * (B / (B - 1)))

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


class _LayerNorm(torch.autograd.Function):
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


def _normalize_steps(norm: nn.Module, a: Tensor) -> Tensor:
    """apply_norm(norm, a) for a (T, B, G), under autograd; LN's gain and bias gradients as column sums.
    BN_t in training normalizes the T*G columns of a (B, T*G) copy (each column is one unit at one step:
    per-step statistics), since reductions over the middle (batch) dim of (T, B, G) are slow strided
    passes; its statistics are reductions over dim 0, which torch computes per column on one thread."""
    if not isinstance(norm, BatchNorm):
        return _LayerNorm.apply(a, norm.weight, norm.bias, norm.eps)
    T, B, G = a.shape
    if not (norm.training and B >= 2):
        return apply_norm(norm, a)
    a2 = a.transpose(0, 1).reshape(B, T * G)
    mean, var_b = a2.mean(0), a2.var(0, unbiased=False)
    rstd = ((var_b * (B / (B - 1)) if norm.unbiased else var_b) + norm.eps).rsqrt()
    y = (a2 - mean) * (rstd * norm.weight.repeat(T))
    if norm.bias is not None:
        y = y + norm.bias.repeat(T)
    _bn_update_running(norm, mean.detach().view(T, G), var_b.detach().view(T, G) * (B / (B - 1)))
    return y.view(B, T, G).transpose(0, 1).contiguous()


def _bn_eval_stats(mod: BatchNorm, steps: int) -> tuple[Tensor, Tensor]:
    """(mean, var) of each step (steps, G) from the running averages (the last slot past time_steps)."""
    if mod.time_steps:
        return mod._running(steps, None)
    return mod.running_mean.expand(steps, -1), mod.running_var.expand(steps, -1)


def _bn_update_running(mod: BatchNorm, means: Tensor, vars_u: Tensor) -> None:
    """BatchNorm._update_running for the per-step batch means / unbiased variances (T, G) of one sequence."""
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


def _shifted(first: Tensor, seq: Tensor) -> Tensor:
    """[first, seq[0], ..., seq[T-2]]: the value each step starts from."""
    return torch.cat([first.unsqueeze(0), seq[:-1]], 0)


def _tanh_from_sigmoid_(s: Tensor) -> Tensor:
    """In place: s = sigmoid(2x) becomes tanh(x) = 2 s - 1."""
    return s.mul_(2).sub_(1)


def _lstm_scale(H: int, like: Tensor) -> Tensor:
    """2 on g's slot of [i, f, g, o], 1 elsewhere: one sigmoid over all four gates gives tanh(g) too."""
    k = like.new_ones(4 * H)
    k[2 * H : 3 * H] = 2
    return k


# --------------------------------------------------------------------------------------------------
# LSTM: a = xp_t + N_h(W_h h_{t-1}); c_t = sf c_{t-1} + si tanh(g); h_t = so tanh(N_c(c_t))
# --------------------------------------------------------------------------------------------------
class _LSTMRecurrence(torch.autograd.Function):
    @staticmethod
    def forward(ctx, norms, need_grad, xp, h0, c0, Wh, wh, bh, wc, bc):
        nh, nc = norms
        T, B, G = xp.shape
        H = G // 4
        k = _lstm_scale(H, xp)  # xp's and N_h's g slot doubled: sigmoid(2 a_g) -> tanh(a_g)
        WhT = Wh.t()
        L = T if need_grad else 1
        out = xp.new_empty(T, B, H)
        AH, S, C, TC = xp.new_empty(L, B, G), xp.new_empty(L, B, G), xp.new_empty(L, B, H), xp.new_empty(L, B, H)
        h, c = h0, c0
        for t, xp_t in enumerate(xp.unbind(0)):
            j = t if need_grad else 0
            ah = torch.mm(h, WhT, out=AH[j])
            s = torch.sigmoid(torch.addcmul(nh.fwd(ah, t), xp_t, k), out=S[j])
            i, f, g, o = s.chunk(4, 1)
            _tanh_from_sigmoid_(g)
            c = torch.addcmul(f * c, i, g, out=C[j])
            tc = _tanh_from_sigmoid_(torch.sigmoid(nc.fwd(c, t), out=TC[j]))  # N_c's gain and bias doubled
            h = torch.mul(o, tc, out=out[t])
        nh.finish()
        nc.finish()
        if need_grad:
            ctx.norms = norms
            ctx.save_for_backward(h0, c0, Wh, out, AH, S, C, TC, *nh.stats(), *nc.stats())
        return out, h.clone(), c.clone()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dout, dhT, dcT):
        nh, nc = ctx.norms
        h0, c0, Wh, out, AH, S, C, TC, MH, RH, MC, RC = ctx.saved_tensors
        T, B, G = AH.shape
        H = G // 4
        dA = torch.empty_like(AH)  # the gate pre-activations' gradient = xp's = N_h's output's
        dA4 = dA.view(T, B, 4, H)
        dAH = torch.empty_like(AH)  # W_h h_{t-1}'s
        DC = torch.empty_like(C)  # N_c's output's
        dh = dout[T - 1] + dhT
        dc_next = dcT
        for t in range(T - 1, -1, -1):
            s, tc, d = S[t], TC[t], dA4[t]
            i, f, g, o = s.chunk(4, 1)
            dtc = dh * o
            dnc = torch.addcmul(dtc, dtc * tc, tc, value=-1, out=DC[t])  # dh o (1 - tc^2)
            dc = nc.bwd(dnc, C[t], MC[t], RC[t]).add_(dc_next)
            torch.mul(dc, g, out=d[:, 0])
            torch.mul(dc, C[t - 1] if t else c0, out=d[:, 1])
            torch.mul(dc, i, out=d[:, 2])
            torch.mul(dh, tc, out=d[:, 3])
            ds = s - s * s  # sigmoid'; g's slot becomes tanh' below
            torch.addcmul(ds[:, 2 * H : 3 * H].fill_(1), g, g, value=-1, out=ds[:, 2 * H : 3 * H])
            da = dA[t].mul_(ds)
            dc_next = dc.mul_(f)
            dah = nh.bwd(da, AH[t], MH[t], RH[t])
            dAH[t] = dah
            dh = torch.addmm(dout[t - 1], dah, Wh) if t else torch.mm(dah, Wh)
        dWh = torch.mm(dAH.view(T * B, G).t(), _shifted(h0, out).view(T * B, H))  # all steps as one product
        dwh, dbh = nh.param_grads(dA, AH, MH, RH)
        dwc, dbc = nc.param_grads(DC, C, MC, RC)
        return None, None, dA, dh, dc_next, dWh, dwh, dbh, dwc, dbc


# --------------------------------------------------------------------------------------------------
# GRU: [r, z] = sigmoid(xp_rz + N_rz(W_h h)); n = tanh(xp_n + r N_n(U h)); h_t = h + z (n - h)
# --------------------------------------------------------------------------------------------------
class _GRURecurrence(torch.autograd.Function):
    @staticmethod
    def forward(ctx, norms, need_grad, xp_rz, xp_n, h0, Wh, w_rz, b_rz, w_n, b_n):
        n_rz, n_n = norms
        T, B, H = xp_n.shape
        WhT = Wh.t()
        L = T if need_grad else 1
        out = xp_n.new_empty(T, B, H)
        AH, SRZ, N = xp_n.new_empty(L, B, 3 * H), xp_n.new_empty(L, B, 2 * H), xp_n.new_empty(L, B, H)
        NN = xp_n.new_empty(L, B, H)  # N_n(U h_{t-1})
        h = h0
        for t, (xr, xn) in enumerate(zip(xp_rz.unbind(0), xp_n.unbind(0))):
            j = t if need_grad else 0
            ah = torch.mm(h, WhT, out=AH[j])
            s = torch.sigmoid(n_rz.fwd(ah[:, : 2 * H], t).add_(xr), out=SRZ[j])
            r, z = s.chunk(2, 1)
            nn_ = NN[j].copy_(n_n.fwd(ah[:, 2 * H :], t)) if need_grad else n_n.fwd(ah[:, 2 * H :], t)
            n = _tanh_from_sigmoid_(torch.sigmoid(torch.addcmul(xn, r, nn_).mul_(2), out=N[j]))
            h = torch.lerp(h, n, z, out=out[t])
        n_rz.finish()
        n_n.finish()
        if need_grad:
            ctx.norms = norms
            ctx.save_for_backward(h0, Wh, out, AH, SRZ, N, NN, *n_rz.stats(), *n_n.stats())
        return out, h.clone()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dout, dhT):
        n_rz, n_n = ctx.norms
        h0, Wh, out, AH, SRZ, N, NN, M1, R1, M4, R4 = ctx.saved_tensors
        T, B, H = out.shape
        G = 3 * H
        dXRZ = torch.empty_like(SRZ)
        dXN, dNN = torch.empty_like(out), torch.empty_like(out)
        dAH = torch.empty_like(AH)
        dh = dout[T - 1] + dhT
        for t in range(T - 1, -1, -1):
            s, n, drz = SRZ[t], N[t], dXRZ[t]
            r, z = s.chunk(2, 1)
            hprev = out[t - 1] if t else h0
            dzh = dh * z
            dn = torch.addcmul(dzh, dzh * n, n, value=-1, out=dXN[t])  # dh z (1 - n^2)
            torch.mul(dn, NN[t], out=drz[:, :H])
            torch.mul(dh, n - hprev, out=drz[:, H:])
            drz.mul_(s - s * s)
            dnn = torch.mul(dn, r, out=dNN[t])
            dAH[t, :, : 2 * H] = n_rz.bwd(drz, AH[t, :, : 2 * H], M1[t], R1[t])
            dAH[t, :, 2 * H :] = n_n.bwd(dnn, AH[t, :, 2 * H :], M4[t], R4[t])
            dh = dh.sub_(dzh)  # dh (1 - z)
            dh = dh.add_(dout[t - 1]).addmm_(dAH[t], Wh) if t else dh.addmm_(dAH[0], Wh)
        dWh = torch.mm(dAH.view(T * B, G).t(), _shifted(h0, out).view(T * B, H))
        dw_rz, db_rz = n_rz.param_grads(dXRZ, AH[..., : 2 * H], M1, R1)
        dw_n, db_n = n_n.param_grads(dNN, AH[..., 2 * H :], M4, R4)
        return None, None, dXRZ, dXN, dh, dWh, dw_rz, db_rz, dw_n, db_n


class _NativeNorms:
    """The cell's three normalizers (N_x, N_h, N_c) as the C++ kernels take them: one mode (per-row
    statistics for LN; per-column over the batch for BN in training; BN's running averages at evaluation)
    and, for BN in training, the running averages to update from the statistics the kernel returns."""

    LAYER, BATCH, FIXED = 0, 1, 2

    def __init__(self, cell: LSTMCell, steps: int):
        self.mods = (cell.norm_x, cell.norm_h, cell.norm_c)
        first = self.mods[0]
        self.eps = first.eps
        self.bn = isinstance(first, BatchNorm)
        self.unbiased = self.bn and first.unbiased
        self.mode = self.LAYER if not self.bn else self.BATCH if first.training else self.FIXED
        self.fixed: list[Tensor] = []
        if self.mode == self.FIXED:
            for mod in self.mods:
                mean, var = _bn_eval_stats(mod, steps)
                self.fixed += [mean.contiguous(), (var + mod.eps).rsqrt().contiguous()]

    def finish(self, stats: list[Tensor], batch: int) -> None:
        """BN's running averages from each step's batch mean and (biased) variance, as BatchNorm updates them."""
        if self.mode == self.BATCH:
            for mod, (mean, _, var_b) in zip(self.mods, (stats[0:3], stats[3:6], stats[6:9])):
                G = mod.weight.shape[0]
                _bn_update_running(mod, mean, var_b.view(-1, G) * (batch / (batch - 1)))


class _NativeLSTMRecurrence(torch.autograd.Function):
    """The whole LN/BN LSTM layer, its input projection W_x x and N_x included, in lnbench's C++ kernels
    (lnbench/nn/fast/csrc/lstm_norm.cpp): one call each way."""

    @staticmethod
    def forward(ctx, norms, need_grad, x, h0, c0, Wx, Wh, b, wx, bx, wh, bh, wc, bc):
        out, hT, cT, *saved = native.ops().lstm_norm_fwd(
            x, h0, c0, Wx, Wh, b, [wx, wh, wc], [bx, bh, bc], norms.mode, norms.eps, norms.unbiased, norms.fixed,
            need_grad)
        norms.finish(saved[5:], x.shape[1])
        if need_grad:
            ctx.setup = (norms.mode, norms.unbiased, [t is not None for t in (b, bx, bh, bc)])
            ctx.save_for_backward(x, h0, c0, Wx, Wh, out, wx, wh, wc, *saved)
        return out, hT, cT

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dout, dhT, dcT):
        mode, unbiased, (has_b, has_bx, has_bh, has_bc) = ctx.setup
        x, h0, c0, Wx, Wh, out, wx, wh, wc, X, AH, S, C, TC, *stats = ctx.saved_tensors
        dx, dh0, dc0, dWx, dWh, dwx, dwh, dwc, da, dbc = native.ops().lstm_norm_bwd(
            dout, dhT, dcT, x, h0, c0, Wx, Wh, out, X, AH, S, C, TC, stats, [wx, wh, wc], mode, unbiased,
            ctx.needs_input_grad[2])
        bias = lambda has, grad: grad if has else None  # noqa: E731
        return (None, None, dx if ctx.needs_input_grad[2] else None, dh0, dc0, dWx, dWh, bias(has_b, da), dwx,
                bias(has_bx, da), dwh, bias(has_bh, da), dwc, bias(has_bc, dbc))
