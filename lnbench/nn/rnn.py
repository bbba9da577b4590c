"""Reference LSTM and GRU cells whose only difference is the normalizer, and a layer that loops over time.

These are the paper's equations written plainly (spec.md; paper eqs. 20-22 and 26-28). They are the
reference every faster implementation is tested against. Gate order inside the stacked pre-activation
follows PyTorch's (LSTM: i, f, g, o; GRU: r, z, n) so torch.nn.LSTM / GRU weights copy over directly;
LN normalizes the whole stacked vector, so the order does not change what it computes.

Where each bias lives (the paper's parameters, no more):
- none / weight norm: each Linear keeps its bias, exactly as torch.nn.LSTM / GRU (b_ih, b_hh).
- layer norm: the Linears lose their bias; each LN has its own gain and bias; the LSTM adds the gate
  bias b of eq. 20; the GRU has no further bias (eqs. 26-27).
- batch norm (Cooijmans et al.): BN_t(W_h h; gamma_h) + BN_t(W_x x; gamma_x) + b, gains only on those
  two, gain and bias on the cell state's BN_t; the GRU gets a gate bias and a candidate bias in place
  of the LN biases it would otherwise lack. RMS norm has no bias either and is treated the same way.
These rules follow from the normalizer's traits (linear_bias, norm_bias; lnbench.nn.normalizers.Normalizer),
never from its name, so a new kind gets the layout its traits imply.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor, nn

from lnbench.errors import ConfigError
from lnbench.nn.norm import Normalizer, NormConfig, make_linear, make_norm, normalizer

State = tuple[Tensor, ...]


def _bias(needed: bool, size: int) -> Optional[nn.Parameter]:
    return nn.Parameter(torch.zeros(size)) if needed else None


class LSTMCell(nn.Module):
    """LSTM cell; with norm=layer it is the paper's LN-LSTM (eqs. 20-22):

        [i, f, g, o] = LN(W_h h_{t-1}; a1, b1) + LN(W_x x_t; a2, b2) + b
        c_t = sigmoid(f) * c_{t-1} + sigmoid(i) * tanh(g)
        h_t = sigmoid(o) * tanh(LN(c_t; a3, b3))

    The cell state carried to the next step is c_t itself, never LN(c_t).
    """

    def __init__(self, input_size: int, hidden_size: int, norm: NormConfig, time_steps: int = 0):
        super().__init__()
        self.input_size, self.hidden_size, self.norm_kind = input_size, hidden_size, norm.kind
        self.nz = nz = normalizer(norm.kind)
        four = 4 * hidden_size
        in_bias = nz.norm_bias  # LN's b on W x / W h; BN_t and RMS carry gains only
        self.weight_x = make_linear(norm, input_size, four)
        self.weight_h = make_linear(norm, hidden_size, four)
        self.norm_x = make_norm(norm, four, bias=in_bias, time_steps=time_steps)
        self.norm_h = make_norm(norm, four, bias=in_bias, time_steps=time_steps)
        self.norm_c = make_norm(norm, hidden_size, bias=True, time_steps=time_steps)
        self.bias = _bias(nz.cell_gate_bias, four)

    def project_input(self, x: Tensor) -> Tensor:
        """Normalized W_x x_t (+ the gate bias) for every step at once: (T, B, F) -> (T, B, 4H)."""
        a = self.nz.apply(self.norm_x, self.weight_x(x))
        return a + self.bias if self.bias is not None else a

    def initial_state(self, batch: int, like: Tensor) -> State:
        z = like.new_zeros(batch, self.hidden_size)
        return z, z

    def step(self, xp: Tensor, state: State, t: int) -> tuple[Tensor, State]:
        h, c = state
        a = xp + self.nz.apply(self.norm_h, self.weight_h(h), t)
        i, f, g, o = a.chunk(4, dim=-1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(self.nz.apply(self.norm_c, c, t))
        return h, (h, c)


class GRUCell(nn.Module):
    """GRU cell; with norm=layer it is the paper's LN-GRU (eqs. 26-28):

        [z, r] = LN(W_h h_{t-1}; a1, b1) + LN(W_x x_t; a2, b2)
        h~_t   = tanh(LN(W x_t; a3, b3) + sigmoid(r) * LN(U h_{t-1}; a4, b4))
        h_t    = (1 - sigmoid(z)) * h_{t-1} + sigmoid(z) * h~_t

    Without a normalizer this is PyTorch's GRU variant (r multiplies U h + b_U), except that the
    paper's z is the complement of PyTorch's: h_t = (1 - z) h_{t-1} + z h~_t. `gru_weights_from_torch`
    maps one onto the other by negating the z rows.
    """

    def __init__(self, input_size: int, hidden_size: int, norm: NormConfig, time_steps: int = 0):
        super().__init__()
        self.input_size, self.hidden_size, self.norm_kind = input_size, hidden_size, norm.kind
        self.nz = nz = normalizer(norm.kind)
        H = hidden_size
        in_bias = nz.norm_bias  # LN's b on the projections; BN_t and RMS carry gains only
        # One matmul each for [W_x; W] x and [W_h; U] h; the normalizers act on the slices.
        self.weight_x = make_linear(norm, input_size, 3 * H)
        self.weight_h = make_linear(norm, H, 3 * H)
        self.norm_x_rz = make_norm(norm, 2 * H, bias=in_bias, time_steps=time_steps)
        self.norm_x_n = make_norm(norm, H, bias=in_bias, time_steps=time_steps)
        self.norm_h_rz = make_norm(norm, 2 * H, bias=in_bias, time_steps=time_steps)
        self.norm_h_n = make_norm(norm, H, bias=in_bias, time_steps=time_steps)
        self.bias = _bias(nz.gru_extra_bias, 3 * H)

    def project_input(self, x: Tensor) -> Tensor:
        """[LN(W_x x); LN(W x)] for every step at once: (T, B, F) -> (T, B, 3H)."""
        H = self.hidden_size
        a = self.weight_x(x)
        a = torch.cat(
            [self.nz.apply(self.norm_x_rz, a[..., : 2 * H]), self.nz.apply(self.norm_x_n, a[..., 2 * H :])], -1
        )
        return a + self.bias if self.bias is not None else a

    def initial_state(self, batch: int, like: Tensor) -> State:
        return (like.new_zeros(batch, self.hidden_size),)

    def step(self, xp: Tensor, state: State, t: int) -> tuple[Tensor, State]:
        (h,) = state
        H = self.hidden_size
        a = self.weight_h(h)
        rz = xp[..., : 2 * H] + self.nz.apply(self.norm_h_rz, a[..., : 2 * H], t)
        r, z = rz.chunk(2, dim=-1)
        cand = torch.tanh(xp[..., 2 * H :] + torch.sigmoid(r) * self.nz.apply(self.norm_h_n, a[..., 2 * H :], t))
        z = torch.sigmoid(z)
        h = (1 - z) * h + z * cand
        return h, (h,)


class CellStateNormLSTMCell(nn.Module):
    """The LSTM of the paper's DRAW experiment (section 6.4; supplement eqs. 53-55): the normalizer acts only
    on the cell state, "only applied to the output of the LSTM hidden states"; the gates are not normalized:

        [i, f, g, o] = W_h h_{t-1} + W_x x_t + b
        c_t = sigmoid(f) * c_{t-1} + sigmoid(i) * tanh(g)
        h_t = sigmoid(o) * tanh(LN(c_t; alpha, beta))

    As in LSTMCell, the carried cell state is c_t itself. Not a subclass of LSTMCell on purpose: the fast
    layers (lnbench.nn.fast.layers) compute LSTMCell's equations and must never be handed this one.
    """

    def __init__(self, input_size: int, hidden_size: int, norm: NormConfig, time_steps: int = 0):
        super().__init__()
        self.input_size, self.hidden_size, self.norm_kind = input_size, hidden_size, norm.kind
        self.nz = nz = normalizer(norm.kind)
        if type(nz).linear is not Normalizer.linear:
            raise ConfigError(
                f"model.norm.kind={nz.name} is not allowed with the {CELL_STATE_NORM} cell: that cell normalizes only "
                "its cell state (the paper's DRAW LSTM), and this kind re-parametrizes the weights instead."
            )
        four = 4 * hidden_size
        self.weight_x = nn.Linear(input_size, four)  # its bias is b
        self.weight_h = nn.Linear(hidden_size, four, bias=False)
        self.norm_c = make_norm(norm, hidden_size, bias=True, time_steps=time_steps)

    def project_input(self, x: Tensor) -> Tensor:
        """W_x x_t + b for every step at once: (T, B, F) -> (T, B, 4H)."""
        return self.weight_x(x)

    def initial_state(self, batch: int, like: Tensor) -> State:
        z = like.new_zeros(batch, self.hidden_size)
        return z, z

    def step(self, xp: Tensor, state: State, t: int) -> tuple[Tensor, State]:
        h, c = state
        i, f, g, o = (xp + self.weight_h(h)).chunk(4, dim=-1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(self.nz.apply(self.norm_c, c, t))
        return h, (h, c)


CELL_STATE_NORM = "lstm_norm_c"  # its model.cell name
CELLS = {"lstm": LSTMCell, "gru": GRUCell, CELL_STATE_NORM: CellStateNormLSTMCell}


class RecurrentLayer(nn.Module):
    """Runs any cell above over a time-major sequence (T, B, F) -> outputs (T, B, H), final state."""

    def __init__(self, cell: nn.Module):
        super().__init__()
        self.cell = cell

    def forward(self, x: Tensor, state: Optional[State] = None) -> tuple[Tensor, State]:
        xp = self.cell.project_input(x)
        if state is None:
            state = self.cell.initial_state(x.shape[1], xp)
        outs = []
        # unbind, not xp[t]: indexing inside an autograd loop makes each step's backward zero-fill a
        # full (T, B, G) gradient.
        for t, xp_t in enumerate(xp.unbind(0)):
            h, state = self.cell.step(xp_t, state, t)
            outs.append(h)
        return torch.stack(outs), state


@torch.no_grad()
def lstm_weights_from_torch(cell: LSTMCell, lstm: nn.LSTM, layer: int = 0) -> None:
    """Copy one layer of a torch.nn.LSTM into an un-normalized LSTMCell (same gate order)."""
    cell.weight_x.weight.copy_(getattr(lstm, f"weight_ih_l{layer}"))
    cell.weight_h.weight.copy_(getattr(lstm, f"weight_hh_l{layer}"))
    cell.weight_x.bias.copy_(getattr(lstm, f"bias_ih_l{layer}"))
    cell.weight_h.bias.copy_(getattr(lstm, f"bias_hh_l{layer}"))


@torch.no_grad()
def gru_weights_from_torch(cell: GRUCell, gru: nn.GRU, layer: int = 0) -> None:
    """Copy one layer of a torch.nn.GRU into an un-normalized GRUCell, negating the z rows (the paper's
    z is PyTorch's 1 - z, and 1 - sigmoid(a) = sigmoid(-a))."""
    H = cell.hidden_size
    sign = torch.ones(3 * H, 1)
    sign[H : 2 * H] = -1
    cell.weight_x.weight.copy_(getattr(gru, f"weight_ih_l{layer}") * sign)
    cell.weight_h.weight.copy_(getattr(gru, f"weight_hh_l{layer}") * sign)
    cell.weight_x.bias.copy_(getattr(gru, f"bias_ih_l{layer}") * sign[:, 0])
    cell.weight_h.bias.copy_(getattr(gru, f"bias_hh_l{layer}") * sign[:, 0])
