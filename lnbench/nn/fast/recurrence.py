"""The recurrences of lnbench's fast normalized layers (lnbench.nn.fast.layers.NormalizedLayer), each ONE
autograd.Function with a hand-written backward through time on torch's ops, or on lnbench's C++ kernels
(lnbench.nn.fast.native) for the LN/BN LSTM and the GRU (LN, BN, none); the per-step normalizers they run are
lnbench.nn.fast.step_norms.

- The input side (W_x x, its normalizer, the gate bias) runs for all steps at once under ordinary autograd
  (fast_rnn); the recurrence here writes a few aten ops per step into preallocated (T, B, .) buffers. That
  removes autograd's per-op bookkeeping, which dominates a Python loop of small ops; the recurrent
  weight's gradient is one matmul over all steps.
- tanh is computed as 2 sigmoid(2x) - 1 (the factor 2 folded into the normalizers' gains and biases):
  torch's float tanh costs 3x its sigmoid on CPU, and the recurrence takes two per step
  (docs/performance.md).
- What the C++ kernels take and return is named (lnbench.nn.fast.kernels: NativeSaved, NativeGrads), never
  unpacked by position here.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lnbench.nn.fast import kernels


def _shifted(first: Tensor, seq: Tensor) -> Tensor:
    """[first, seq[0], ..., seq[T-2]]: the value each step starts from."""
    return torch.cat([first.unsqueeze(0), seq[:-1]], 0)


def _tanh_from_sigmoid_(s: Tensor) -> Tensor:
    """In place: s = sigmoid(2x) becomes tanh(x) = 2 s - 1."""
    return s.mul_(2).sub_(1)


def lstm_scale(H: int, like: Tensor) -> Tensor:
    """2 on g's slot of [i, f, g, o], 1 elsewhere: one sigmoid over all four gates gives tanh(g) too."""
    k = like.new_ones(4 * H)
    k[2 * H : 3 * H] = 2
    return k


# --------------------------------------------------------------------------------------------------
# LSTM: a = xp_t + N_h(W_h h_{t-1}); c_t = sf c_{t-1} + si tanh(g); h_t = so tanh(N_c(c_t))
# --------------------------------------------------------------------------------------------------
class LSTMRecurrence(torch.autograd.Function):
    @staticmethod
    def forward(ctx, norms, need_grad, xp, h0, c0, Wh, wh, bh, wc, bc):
        nh, nc = norms
        T, B, G = xp.shape
        H = G // 4
        k = lstm_scale(H, xp)  # xp's and N_h's g slot doubled: sigmoid(2 a_g) -> tanh(a_g)
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
class GRURecurrence(torch.autograd.Function):
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


class NativeLSTMRecurrence(torch.autograd.Function):
    """The whole LN/BN LSTM layer, its input projection W_x x and N_x included, in lnbench's C++ kernels
    (lnbench/nn/fast/csrc/lstm_norm.cpp): one call each way."""

    @staticmethod
    def forward(ctx, norms, need_grad, x, h0, c0, Wx, Wh, b, wx, bx, wh, bh, wc, bc):
        out, hT, cT, kept = kernels.lstm_norm_fwd(
            x,
            h0,
            c0,
            Wx,
            Wh,
            b,
            (wx, wh, wc),
            (bx, bh, bc),
            norms.mode,
            norms.eps,
            norms.unbiased,
            norms.fixed,
            need_grad,
        )
        norms.finish(kept.stats, x.shape[1])
        if need_grad:
            ctx.setup = (norms.mode, norms.unbiased, [t is not None for t in (b, bx, bh, bc)])
            ctx.save_for_backward(*kernels.NativeSaved(x, h0, c0, Wx, Wh, out, wx, wh, wc, kept).flat())
        return out, hT, cT

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dout, dhT, dcT):
        mode, unbiased, (has_b, has_bx, has_bh, has_bc) = ctx.setup
        need_dx = ctx.needs_input_grad[2]
        saved = kernels.NativeSaved.unflat(ctx.saved_tensors)
        g = kernels.lstm_norm_bwd(dout, dhT, dcT, saved, mode, unbiased, need_dx)
        bias = lambda has, grad: grad if has else None  # noqa: E731
        return (
            None,
            None,
            g.dx if need_dx else None,
            g.dh0,
            g.dc0,
            g.dWx,
            g.dWh,
            bias(has_b, g.da),
            g.dwx,
            bias(has_bx, g.da),
            g.dwh,
            bias(has_bh, g.da),
            g.dwc,
            bias(has_bc, g.dbc),
        )


class NativeGRURecurrence(torch.autograd.Function):
    """The whole GRU layer (LN, BN_t, or no normalizer), its input projection W_x x and N_x included, in
    lnbench's C++ kernels (lnbench/nn/fast/csrc/gru_norm.cpp): one call each way. The four normalizers' gains
    and biases come in the order x_rz, x_n, h_rz, h_n; without a normalizer the gains are None and the
    biases are the slices of W_x's and W_h's biases."""

    @staticmethod
    def forward(ctx, norms, need_grad, x, h0, Wx, Wh, b, w_xrz, b_xrz, w_xn, b_xn, w_hrz, b_hrz, w_hn, b_hn):
        gains, biases = (w_xrz, w_xn, w_hrz, w_hn), (b_xrz, b_xn, b_hrz, b_hn)
        out, hT, kept = kernels.gru_norm_fwd(
            x, h0, Wx, Wh, b, gains, biases, norms.mode, norms.eps, norms.unbiased, norms.fixed, need_grad
        )
        norms.finish(kept.stats, x.shape[1])
        if need_grad:
            ctx.setup = (norms.mode, norms.unbiased, [t is not None for t in (b, *gains, *biases)])
            ctx.save_for_backward(*kernels.GRUSaved(x, h0, Wx, Wh, out, *gains, kept).flat())
        return out, hT

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dout, dhT):
        mode, unbiased, has = ctx.setup
        need_dx = ctx.needs_input_grad[2]
        g = kernels.gru_norm_bwd(dout, dhT, kernels.GRUSaved.unflat(ctx.saved_tensors), mode, unbiased, need_dx)
        H = g.dnn.shape[0]
        # in the forward's order: b, the gains (x_rz, x_n, h_rz, h_n), their biases (N_hrz's a copy of N_xrz's:
        # two parameters never share one gradient tensor)
        rz = g.dax[: 2 * H]
        grads = [g.dax, g.dw_xrz, g.dw_xn, g.dw_hrz, g.dw_hn, rz, g.dax[2 * H :], rz.clone(), g.dnn]
        b, w_xrz, w_xn, w_hrz, w_hn, b_xrz, b_xn, b_hrz, b_hn = [d if h else None for d, h in zip(grads, has)]
        dx = g.dx if need_dx else None
        return None, None, dx, g.dh0, g.dWx, g.dWh, b, w_xrz, b_xrz, w_xn, b_xn, w_hrz, b_hrz, w_hn, b_hn
