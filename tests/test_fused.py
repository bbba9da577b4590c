"""The un-normalized layers of lnbench.nn.fused: torch's fused kernel by default, and the C recurrence
(when fused.use_c_kernel picks it) computing exactly what the reference cells compute (float64)."""
from __future__ import annotations

import pytest
import torch

from lnbench.nn import ckernel, fused
from lnbench.nn.norm import NormConfig, NormKind
from lnbench.nn.rnn import GRUCell, LSTMCell, RecurrentLayer


def _grads(layer, cell, x, state):
    out, final = layer(x, state)
    w = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)
    loss = (out * w).sum() + sum((f * 1.3).sum() for f in final)
    leaves = [x, *(state or ())] + list(cell.parameters())
    return [out, *final, *torch.autograd.grad(loss, leaves)], type(out.grad_fn).__name__


@pytest.mark.parametrize("cls", [LSTMCell, GRUCell])
@pytest.mark.parametrize("kind", ["none", "weight"])
@pytest.mark.parametrize("with_state", [True, False])
@pytest.mark.parametrize("B, H", [(3, 6), (19, 37)])  # 19 x 37: whole and part row blocks, part panels
def test_c_recurrence_matches_reference(cls, kind, with_state, B, H, monkeypatch):
    if ckernel.kernel(wait=120) is None:
        pytest.skip("C kernels unavailable here (no compiler?)")
    monkeypatch.setattr(fused, "C_CELLS", (LSTMCell, GRUCell))
    torch.manual_seed(0)
    cell = cls(5, H, NormConfig(kind=NormKind(kind))).double()
    x = torch.randn(9, B, 5, dtype=torch.float64, requires_grad=True)
    n = 2 if cls is LSTMCell else 1
    state = tuple(torch.randn(B, H, dtype=torch.float64, requires_grad=True) for _ in range(n)) if with_state else None
    ref, _ = _grads(RecurrentLayer(cell), cell, x, state)
    got, fn = _grads(fused.fused_torch_layer(cell), cell, x, state)
    assert fn == ("_LSTMRecurrenceCBackward" if cls is LSTMCell else "_GRURecurrenceCBackward")
    assert len(got) == len(ref)
    for r, g in zip(ref, got):
        torch.testing.assert_close(g, r, rtol=1e-10, atol=1e-12)
    with torch.no_grad():  # inference: one step's scratch space
        out, _ = fused.fused_torch_layer(cell)(x, state)
    torch.testing.assert_close(out, ref[0], rtol=1e-10, atol=1e-12)


def test_rule_picks_c_for_the_gru_on_cpu_only():
    x = torch.randn(30, 2, 3, requires_grad=True)
    lstm, gru = (cls(3, 4, NormConfig(kind=NormKind.none)) for cls in (LSTMCell, GRUCell))
    out, _ = fused.fused_torch_layer(lstm)(x)
    assert "CRecurrence" not in type(out.grad_fn).__name__  # torch's LSTM kernel was the faster
    assert fused.use_c_kernel(x, gru) and not fused.use_c_kernel(x, lstm)
    assert not fused.use_c_kernel(torch.empty(30, 2, 3, device="meta"), gru)  # CUDA & co: torch's kernel
    assert not fused.use_c_kernel(x.half(), gru)


@pytest.mark.parametrize("cls", [LSTMCell, GRUCell])
def test_float32_c_recurrence_matches_reference(cls, monkeypatch):
    """float32, 19 rows (two blocks of the C products and a part block), 37 units (a part panel): outputs
    and every gradient agree with the reference cell to float32 rounding."""
    if ckernel.kernel(wait=120) is None:
        pytest.skip("C kernels unavailable here (no compiler?)")
    monkeypatch.setattr(fused, "C_CELLS", (LSTMCell, GRUCell))
    torch.manual_seed(0)
    cell = cls(5, 37, NormConfig(kind=NormKind.none))
    B = 19
    x = torch.randn(9, B, 5, requires_grad=True)
    state = tuple(torch.randn(B, 37, requires_grad=True) for _ in range(2 if cls is LSTMCell else 1))
    ref, _ = _grads(RecurrentLayer(cell), cell, x, state)
    got, fn = _grads(fused.fused_torch_layer(cell), cell, x, state)
    assert "RecurrenceC" in fn
    for r, g in zip(ref, got):
        torch.testing.assert_close(g, r, rtol=2e-4, atol=2e-5)


def test_portable_build_leaves_the_plain_cells_to_torch(monkeypatch):
    """C_CELLS was measured on the vectorized OpenMP build; where only the portable (scalar, one thread)
    build loads, the plain cells keep torch's kernel."""
    real = ckernel.kernel(wait=120)
    if real is None:
        pytest.skip("C kernels unavailable here (no compiler?)")
    portable = ckernel.Kernels(real.lib, real.path, vectorized=False)
    monkeypatch.setattr(ckernel, "kernel", lambda wait=None: portable)
    x = torch.randn(5, 2, 3, requires_grad=True)
    monkeypatch.setattr(fused, "C_CELLS", (LSTMCell, GRUCell))
    for cls in (LSTMCell, GRUCell):
        out, _ = fused.fused_torch_layer(cls(3, 4, NormConfig(kind=NormKind.none)))(x)
        assert "RecurrenceC" not in type(out.grad_fn).__name__
