"""Run an un-normalized reference cell through torch's fused RNN kernels, sharing the cell's weights.

torch.nn.LSTM / GRU keep their own parameters; calling the kernel they call (torch._VF.lstm / gru,
what nn.LSTM.forward itself uses) on the cell's tensors instead keeps one set of parameters and one
state_dict whichever path runs, while getting oneDNN's fused LSTM on CPU and cuDNN on CUDA.

Where torch's kernel is the slower one on CPU (its GRU, as measured here), the recurrence runs like the fast LN layers (`lnbench.nn.fast_rnn`): the input projection for all steps in one matmul,
per step one torch.mm and one C call (`lnbench.nn.ckernel`'s lstm_*/gru_*), a hand-written backward
through time. `use_c_kernel` is the measured rule that picks it (see C_CELLS: the GRU on CPU);
CUDA always takes torch's.
"""
from __future__ import annotations

import torch
from torch import Tensor, _VF, nn

from lnbench.nn.fast_rnn import _linear
from lnbench.nn.norm import normalizer
from lnbench.nn.rnn import GRUCell, LSTMCell, State

# Which cells take the C recurrence on CPU instead of torch's kernel, measured with `lnbench bench`
# (rows lstm/c, gru/c against nn.LSTM / nn.GRU, 2 threads, passive waiting, on this project's shared
# 2-core machine at load 8-15): the GRU's C recurrence won at every shape measured (0.46x nn.GRU at
# B=4 T=100 H=256 where torch's kernel took 1.02x; 0.70x vs 0.75x at B=32; 0.98x vs 1.09x at T=784
# B=100 H=100); torch's LSTM kernel won at every shape (the C one 1.16-1.94x), T=784 included.
C_CELLS: tuple[type, ...] = (GRUCell,)


def use_c_kernel(x: Tensor, cell: nn.Module) -> bool:
    """Whether the C recurrence runs `cell` on input x (T, B, F): a cell of C_CELLS, CPU, float32/64."""
    return isinstance(cell, C_CELLS) and x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64)


class _LSTMRecurrenceC(torch.autograd.Function):
    """a_t = xp_t + W_h h_{t-1} (xp = W_x x + b_x + b_h for all steps); torch's LSTM equations."""

    @staticmethod
    def forward(ctx, kern, need_grad, xp, h0, c0, Wh):
        from lnbench.nn.fast_rnn import _StepMatmul, _kernel_threads, _lstm_buffers, _rows

        T, B, G = xp.shape
        H = G // 4
        xp, h0, c0 = xp.contiguous(), h0.contiguous(), c0.contiguous()
        mm = _StepMatmul(Wh, B)
        out, AH, S, C, TC = _lstm_buffers(xp, need_grad)
        L = AH.shape[0]
        fwd = kern.fn("lstm_fwd", xp.dtype)
        nt = _kernel_threads(B)
        ahs, xps, ss, cs, tcs, outs = AH.unbind(0), _rows(xp, T), _rows(S, L), _rows(C, L), _rows(TC, L), _rows(out, T)
        h, c_prev = h0, c0.data_ptr()
        for t in range(T):
            k = t if need_grad else 0
            mm(h, out=ahs[k])
            fwd(nt, B, H, ahs[k].data_ptr(), xps[t], c_prev, ss[k], cs[k], tcs[k], outs[t])
            h, c_prev = out[t], cs[k]
        c_last = C[L - 1 if need_grad else 0]
        if need_grad:
            ctx.kern = kern
            ctx.save_for_backward(h0, c0, Wh, out, S, C, TC)
        return out, out[T - 1].clone(), c_last.clone()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dout, dhT, dcT):
        from lnbench.nn.fast_rnn import _StepMatmul, _consume, _kernel_threads, _recurrent_weight_grad, _rows

        _consume(ctx)
        h0, c0, Wh, out, S, C, TC = ctx.saved_tensors
        T, B, G = S.shape
        H = G // 4
        dout = dout.contiguous()
        dA = S  # in place: the gate pre-activations' gradient, both dL/dxp and dL/d(W_h h_{t-1})
        dh = (dout[T - 1] + dhT).contiguous()
        dc = dcT.contiguous().clone()
        bwd = ctx.kern.fn("lstm_bwd", S.dtype)
        mmT = _StepMatmul(Wh.t(), B)
        nt = _kernel_threads(B)
        ss, cs, tcs = _rows(S, T), _rows(C, T), _rows(TC, T)
        das = dA.unbind(0)
        for t in range(T - 1, -1, -1):
            bwd(nt, B, H, ss[t], cs[t - 1] if t else c0.data_ptr(), tcs[t], dh.data_ptr(), dc.data_ptr())
            if t:
                mmT(das[t], out=dh, add=dout[t - 1])
            else:
                dh = mmT(das[0])
        dWh = _recurrent_weight_grad(dA, h0, out)
        return None, None, dA, dh, dc, dWh


class _GRURecurrenceC(torch.autograd.Function):
    """[r, z] = sigmoid(xp_rz + ah_rz), n = tanh(xp_n + r ah_n), ah = W_h h_{t-1} + b_h; h = h + z (n - h)."""

    @staticmethod
    def forward(ctx, kern, need_grad, xp_rz, xp_n, h0, Wh, bh):
        from lnbench.nn.fast_rnn import _StepMatmul, _gru_buffers, _kernel_threads, _rows

        T, B, H = xp_n.shape
        xp_rz, xp_n, h0 = xp_rz.contiguous(), xp_n.contiguous(), h0.contiguous()
        mm = _StepMatmul(Wh, B)
        out, AH, SRZ, N = _gru_buffers(xp_n, need_grad)
        L = AH.shape[0]
        fwd = kern.fn("gru_fwd", xp_n.dtype)
        nt = _kernel_threads(B)
        ahs, xrs, xns, ss, ns, outs = AH.unbind(0), _rows(xp_rz, T), _rows(xp_n, T), _rows(SRZ, L), _rows(N, L), _rows(out, T)
        h, hp = h0, h0.data_ptr()
        for t in range(T):
            k = t if need_grad else 0
            mm(h, out=ahs[k], bias=bh)
            fwd(nt, B, H, ahs[k].data_ptr(), xrs[t], xns[t], hp, ss[k], ns[k], outs[t])
            h, hp = out[t], outs[t]
        if need_grad:
            ctx.kern = kern
            ctx.save_for_backward(h0, Wh, out, AH, SRZ, N)
        return out, out[T - 1].clone()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dout, dhT):
        from lnbench.nn.fast_rnn import _StepMatmul, _consume, _kernel_threads, _recurrent_weight_grad, _rows

        _consume(ctx)
        h0, Wh, out, AH, SRZ, N = ctx.saved_tensors
        T, B, G = AH.shape
        dout = dout.contiguous()
        dXRZ, dXN = SRZ, N  # in place
        dAH = torch.empty_like(AH)  # AH is read (ah_n) while dL/dah is written
        dh = (dout[T - 1] + dhT).contiguous()
        bwd = ctx.kern.fn("gru_bwd", AH.dtype)
        mmT = _StepMatmul(Wh.t(), B)
        nt = _kernel_threads(B)
        ahs, ss, ns, outs, douts, dahs_p = _rows(AH, T), _rows(SRZ, T), _rows(N, T), _rows(out, T), _rows(dout, T), _rows(dAH, T)
        dahs = dAH.unbind(0)
        for t in range(T - 1, -1, -1):
            bwd(nt, B, G // 3, ahs[t], ss[t], ns[t], outs[t - 1] if t else h0.data_ptr(), dh.data_ptr(),
                douts[t - 1] if t else None, ss[t], ns[t], dahs_p[t])
            mmT(dahs[t], out=dh, add=dh)
        dWh = _recurrent_weight_grad(dAH, h0, out)
        return None, None, dXRZ, dXN, dh, dWh, dAH.sum((0, 1))


class FusedTorchLayer(nn.Module):
    def __init__(self, cell: nn.Module):
        super().__init__()
        self.cell = cell
        if isinstance(cell, GRUCell):
            # The paper's z is PyTorch's 1 - z: negate the z rows (sigmoid(-a) = 1 - sigmoid(a)).
            sign = torch.ones(3 * cell.hidden_size)
            sign[cell.hidden_size : 2 * cell.hidden_size] = -1
            self.register_buffer("sign", sign, persistent=False)

    def forward(self, x: Tensor, state: State | None = None) -> tuple[Tensor, State]:
        cell = self.cell
        wx, wh = cell.weight_x, cell.weight_h
        weights = [wx.weight, wh.weight, wx.bias, wh.bias]
        kern = self._c_kernel(x)
        if kern is not None:
            return self._forward_c(kern, x, state)
        h0 = x.new_zeros(1, x.shape[1], cell.hidden_size) if state is None else state[0].unsqueeze(0)
        if isinstance(cell, LSTMCell):
            c0 = h0 if state is None else state[1].unsqueeze(0)
            out, h, c = _VF.lstm(x, (h0, c0), weights, True, 1, 0.0, self.training, False, False)
            return out, (h[0], c[0])
        s = self.sign.to(x.dtype)
        weights = [weights[0] * s[:, None], weights[1] * s[:, None], weights[2] * s, weights[3] * s]
        out, h = _VF.gru(x, h0, weights, True, 1, 0.0, self.training, False, False)
        return out, (h[0],)

    def _c_kernel(self, x: Tensor):
        if not use_c_kernel(x, self.cell) or x.shape[1] == 0 or self.cell.weight_h.weight.dtype != x.dtype:
            return None
        from lnbench.nn import ckernel

        return ckernel.kernel()

    def _forward_c(self, kern, x: Tensor, state: State | None) -> tuple[Tensor, State]:
        cell = self.cell
        B, H = x.shape[1], cell.hidden_size
        wx, wh = cell.weight_x, cell.weight_h
        Wx, Wh = wx.weight, wh.weight  # (the weight-norm parametrization, if any, computes them here)
        zeros = x.new_zeros(B, H)
        if isinstance(cell, LSTMCell):
            xp = _linear(x, Wx, wx.bias + wh.bias)
            h0, c0 = (zeros, zeros) if state is None else state
            args = (xp, h0, c0, Wh)
            fn = _LSTMRecurrenceC
        else:
            xp_rz = _linear(x, Wx[: 2 * H], wx.bias[: 2 * H])
            xp_n = _linear(x, Wx[2 * H :], wx.bias[2 * H :])
            h0 = zeros if state is None else state[0]
            args = (xp_rz, xp_n, h0, Wh, wh.bias)
            fn = _GRURecurrenceC
        need_grad = torch.is_grad_enabled() and any(a.requires_grad for a in args)
        out, *final = fn.apply(kern, need_grad, *args)
        return out, tuple(final)


def fused_torch_layer(cell: nn.Module) -> nn.Module | None:
    """torch's fused kernel over `cell`'s weights, or None where the cell has activation normalizers."""
    kind = getattr(cell, "norm_kind", None)
    if kind is None or normalizer(kind).activations:
        return None
    return FusedTorchLayer(cell)
