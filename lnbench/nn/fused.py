"""Run an un-normalized reference cell through torch's fused RNN kernels, sharing the cell's weights.

torch.nn.LSTM / GRU keep their own parameters; calling the kernel they call (torch._VF.lstm / gru,
what nn.LSTM.forward itself uses) on the cell's tensors instead keeps one set of parameters and one
state_dict whichever path runs, while getting oneDNN's fused LSTM on CPU and cuDNN on CUDA.
"""
from __future__ import annotations

import torch
from torch import Tensor, _VF, nn

from lnbench.nn.norm import NormKind
from lnbench.nn.rnn import GRUCell, LSTMCell, State


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
        h0 = x.new_zeros(1, x.shape[1], cell.hidden_size) if state is None else state[0].unsqueeze(0)
        if isinstance(cell, LSTMCell):
            c0 = h0 if state is None else state[1].unsqueeze(0)
            out, h, c = _VF.lstm(x, (h0, c0), weights, True, 1, 0.0, self.training, False, False)
            return out, (h[0], c[0])
        s = self.sign.to(x.dtype)
        weights = [weights[0] * s[:, None], weights[1] * s[:, None], weights[2] * s, weights[3] * s]
        out, h = _VF.gru(x, h0, weights, True, 1, 0.0, self.training, False, False)
        return out, (h[0],)


def fused_torch_layer(cell: nn.Module) -> nn.Module | None:
    """torch's fused kernel over `cell`'s weights, or None where the cell has activation normalizers."""
    if getattr(cell, "norm_kind", None) not in (NormKind.none, NormKind.weight):
        return None
    return FusedTorchLayer(cell)
