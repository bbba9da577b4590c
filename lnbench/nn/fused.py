"""The un-normalized recurrent layers: lnbench's C recurrence where it is the faster, torch's fused
kernel elsewhere, both on the reference cell's own weights.

On CPU (float32/64, the C kernels built) the recurrence runs like the fast LN layers
(`lnbench.nn.fast_rnn`): the input projection for all steps in one matmul, then the whole recurrence,
products included, as one C call each way (`lnbench.nn.ckernel`'s lstm_*/gru_*). `use_c_kernel` is the
measured rule that picks it (C_CELLS: the GRU, whose C recurrence beat torch's kernel at every shape
measured; the LSTM's did not). Elsewhere (the LSTM, CUDA) torch's kernel runs: calling what
nn.LSTM.forward itself calls (torch._VF.lstm / gru) on the cell's tensors keeps one set of parameters
and one state_dict whichever path runs.
"""
from __future__ import annotations

import torch
from torch import Tensor, _VF, nn

from lnbench.nn.fast_rnn import _call, _consume, _gru_buffers, _linear, _lstm_buffers, _panels, _recurrent_weight_grad
from lnbench.nn.norm import normalizer
from lnbench.nn.rnn import GRUCell, LSTMCell, State

# Which cells take the C recurrence on CPU instead of torch's kernel, measured with `lnbench bench`
# (rows gru/c, lstm/c against nn.GRU / nn.LSTM, 2 threads, interleaved, quiet machine, the C recurrence
# one call each way and freed memory kept in the process, lnbench.heap): the GRU's C recurrence won at
# every shape measured (0.14x nn.GRU at B=4 T=100 H=256, 0.34x at B=32, 0.37x at T=784 B=100 H=100);
# the LSTM's did not (1.07x at B=4, 1.10x at B=32, 1.06x at T=784), so the LSTM keeps torch's kernel.
# Nor at small batches, after gemm_tn packed its operands: one layer running the two in turn, step by
# step, B=1-16 at T=50 H=128 and T=100 H=256, gave 0.97-1.12x on 2 threads and 0.99-1.26x on 1.
# (A first A/B that always ran the C path after another C layer showed 0.84-0.93x: an artefact of order.)
C_CELLS: tuple[type, ...] = (GRUCell,)


def use_c_kernel(x: Tensor, cell: nn.Module) -> bool:
    """Whether the C recurrence runs `cell` on input x (T, B, F): a cell of C_CELLS, CPU, float32/64."""
    return isinstance(cell, C_CELLS) and x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64)


class _LSTMRecurrenceC(torch.autograd.Function):
    """a_t = xp_t + W_h h_{t-1} (xp = W_x x + b_x + b_h for all steps); torch's LSTM equations. One C call
    each way (lstm_fwd / lstm_bwd), products included."""

    @staticmethod
    def forward(ctx, kern, need_grad, xp, h0, c0, Wh):
        T, B, G = xp.shape
        xp, h0, c0 = xp.contiguous(), h0.contiguous(), c0.contiguous()
        out, _, S, C, TC = _lstm_buffers(xp, need_grad)
        _call(kern.fn("lstm_fwd", xp.dtype), torch.get_num_threads(), T, B, G // 4, int(need_grad),
              _panels(kern, Wh, "forward"), h0, c0, xp, xp.new_empty(B, G), S, C, TC, out)
        c_last = C[C.shape[0] - 1]
        if need_grad:
            ctx.kern = kern
            ctx.save_for_backward(h0, c0, Wh, out, S, C, TC)
        return out, out[T - 1].clone(), c_last.clone()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dout, dhT, dcT):
        _consume(ctx)
        h0, c0, Wh, out, S, C, TC = ctx.saved_tensors
        T, B, G = S.shape
        dh = (dout[T - 1] + dhT).contiguous()  # -> dL/dh0
        dc = dcT.contiguous().clone()  # -> dL/dc0
        # in place: S becomes the gate pre-activations' gradient, both dL/dxp and dL/d(W_h h_{t-1})
        _call(ctx.kern.fn("lstm_bwd", S.dtype), torch.get_num_threads(), T, B, G // 4, _panels(ctx.kern, Wh, "backward"),
              c0, dout.contiguous(), S, C, TC, dh, dc)
        return None, None, S, dh, dc, _recurrent_weight_grad(S, h0, out)


class _GRURecurrenceC(torch.autograd.Function):
    """[r, z] = sigmoid(xp_rz + ah_rz), n = tanh(xp_n + r ah_n), ah = W_h h_{t-1} + b_h; h = h + z (n - h).
    One C call each way (gru_fwd / gru_bwd)."""

    @staticmethod
    def forward(ctx, kern, need_grad, xp_rz, xp_n, h0, Wh, bh):
        T, B, H = xp_n.shape
        xp_rz, xp_n, h0 = xp_rz.contiguous(), xp_n.contiguous(), h0.contiguous()
        out, AH, SRZ, N = _gru_buffers(xp_n, need_grad)
        _call(kern.fn("gru_fwd", xp_n.dtype), torch.get_num_threads(), T, B, H, int(need_grad),
              _panels(kern, Wh, "forward"), bh.contiguous(), h0, xp_rz, xp_n, AH, SRZ, N, out)
        if need_grad:
            ctx.kern = kern
            ctx.save_for_backward(h0, Wh, out, AH, SRZ, N)
        return out, out[T - 1].clone()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dout, dhT):
        _consume(ctx)
        h0, Wh, out, AH, SRZ, N = ctx.saved_tensors
        T, B, G = AH.shape
        dAH = torch.empty_like(AH)  # AH is read (ah_n) while dL/dah is written
        dh = (dout[T - 1] + dhT).contiguous()  # -> dL/dh0
        # in place: the gradients of xp_rz over SRZ, of xp_n over N
        _call(ctx.kern.fn("gru_bwd", AH.dtype), torch.get_num_threads(), T, B, G // 3, _panels(ctx.kern, Wh, "backward"),
              h0, out, dout.contiguous(), AH, SRZ, N, dh, dAH)
        return None, None, SRZ, N, dh, _recurrent_weight_grad(dAH, h0, out), dAH.sum((0, 1))


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

        kern = ckernel.kernel()
        return kern if kern is not None and kern.vectorized else None  # C_CELLS was measured on that build

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
