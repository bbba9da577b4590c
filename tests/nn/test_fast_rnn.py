"""The fast recurrent layers compute exactly what the reference cells compute (float64).

Outputs, final states, gradients wrt the input, the initial state and every parameter, and BN's running
statistics, for LN and BN (biased and unbiased variance) LSTM / GRU, train and eval mode, several
lengths including one longer than BN's stored time steps, on both backends of the normalized layers (the
C++ kernels and torch's ops); torch's fused kernel for the un-normalized cells; and the same
numbers, bit for bit, on 1 and 2 threads where the layer's own sums decide them.
"""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import results_on_threads

from lnbench.errors import ConfigError
from lnbench.nn.fast import native
from lnbench.nn.fast.layers import NormalizedLayer, TorchKernelLayer, fast_layer
from lnbench.nn.norm import NormConfig, NormKind
from lnbench.nn.rnn import GRUCell, LSTMCell, RecurrentLayer

F_IN, HID, STEPS = 5, 6, 10  # STEPS: BN's stored time steps


@pytest.fixture(params=["native", "torch"])
def backend(request):
    """Which backend runs the normalized LSTM / GRU: lnbench's C++ kernels, or torch's ops."""
    if request.param == "native" and native.ops() is None:
        if native.compiler():
            pytest.fail(f"a C++ compiler is here but the kernels did not load: {native.status()}")
        pytest.skip("no C++ compiler: the kernels cannot be built here")
    return request.param


def _grad_fn_name(cls, backend="torch"):
    name = "GRURecurrenceBackward" if cls is GRUCell else "LSTMRecurrenceBackward"
    return "Native" + name if backend == "native" else name


def _cell(cls, kind, unbiased=False, seed=0, time_steps=STEPS, hid=HID):
    torch.manual_seed(seed)
    cfg = NormConfig(kind=NormKind(kind), unbiased_var=unbiased, gain_init=0.8)
    cell = cls(F_IN, hid, cfg, time_steps=time_steps if kind == "batch" else 0).double()
    with torch.no_grad():  # move every gain/bias/buffer off its initial value so all of them matter
        for p in cell.parameters():
            p.add_(torch.randn_like(p) * 0.3)
        for b in cell.buffers():
            b.add_(torch.rand_like(b) * 0.5)
    return cell


def _run(layer, x, state, weights):
    out, final = layer(x, state)
    loss = (out * weights[0]).sum() + sum((s * w).sum() for s, w in zip(final, weights[1:]))
    leaves = [x, *state] + list(layer.parameters())
    grads = torch.autograd.grad(loss, leaves)
    return [out, *final, *grads]


def _compare(cls, kind, T, B, train, backend, unbiased=False, with_state=True, time_steps=STEPS, hid=HID):
    ref_cell = _cell(cls, kind, unbiased, time_steps=time_steps, hid=hid)
    fast_cell = copy.deepcopy(ref_cell)
    ref_cell.train(train)
    fast_cell.train(train)
    fast = fast_layer(fast_cell, use_native=backend == "native")
    assert isinstance(fast, NormalizedLayer)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(T, B, F_IN, dtype=torch.float64, generator=g, requires_grad=True)
    n_state = 2 if cls is LSTMCell else 1
    if with_state:
        state = tuple(torch.randn(B, hid, dtype=torch.float64, generator=g, requires_grad=True) for _ in range(n_state))
    else:
        state = None
    weights = [torch.randn(T, B, hid, dtype=torch.float64, generator=g)]
    weights += [torch.randn(B, hid, dtype=torch.float64, generator=g) for _ in range(n_state)]

    if state is None:
        ref_out, ref_final = RecurrentLayer(ref_cell)(x)
        fast_out, fast_final = fast(x)
        ref_list = [
            ref_out,
            *ref_final,
            *torch.autograd.grad(
                (ref_out * weights[0]).sum() + sum((s * w).sum() for s, w in zip(ref_final, weights[1:])),
                [x] + list(ref_cell.parameters()),
            ),
        ]
        fast_list = [
            fast_out,
            *fast_final,
            *torch.autograd.grad(
                (fast_out * weights[0]).sum() + sum((s * w).sum() for s, w in zip(fast_final, weights[1:])),
                [x] + list(fast_cell.parameters()),
            ),
        ]
    else:
        ref_list = _run(RecurrentLayer(ref_cell), x, state, weights)
        fast_list = _run(fast, x, state, weights)
    assert type(fast_list[0].grad_fn).__name__ == _grad_fn_name(cls, backend)  # the path meant ran
    names = ["out"] + [f"state{i}" for i in range(n_state)] + ["dx"]
    names += [f"dstate{i}" for i in range(n_state)] if state is not None else []
    names += [f"d{n}" for n, _ in ref_cell.named_parameters()]
    assert len(ref_list) == len(fast_list) == len(names)
    for name, r, f in zip(names, ref_list, fast_list):
        assert r.shape == f.shape, name
        torch.testing.assert_close(f, r, rtol=1e-10, atol=1e-12, msg=lambda m: f"{name}: {m}")
    for (name, r), f in zip(ref_cell.named_buffers(), fast_cell.buffers()):
        torch.testing.assert_close(f, r, rtol=1e-12, atol=1e-14, msg=lambda m: f"{name}: {m}")
    # the same parameters, the same state_dict keys: the fast layer owns nothing of its own
    assert list(fast.state_dict()) == ["cell." + k for k in fast_cell.state_dict()]


@pytest.mark.parametrize("cls", [LSTMCell, GRUCell])
@pytest.mark.parametrize("T", [1, 7, pytest.param(50, marks=pytest.mark.slow)])
@pytest.mark.parametrize("train", [True, False])
def test_layer_norm_matches_reference(cls, T, train, backend):
    _compare(cls, "layer", T, B=3, train=train, backend=backend)


@pytest.mark.parametrize("cls", [LSTMCell, GRUCell])
@pytest.mark.parametrize("T", [1, 7])
def test_layer_norm_batch_one_and_zero_state(cls, T, backend):
    _compare(cls, "layer", T, B=1, train=True, backend=backend)
    _compare(cls, "layer", T, B=4, train=True, backend=backend, with_state=False)


@pytest.mark.parametrize("cls", [LSTMCell, GRUCell])
@pytest.mark.parametrize("T", [1, 7, 12])  # 12 > STEPS: past BN's last stored statistics
@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("unbiased", [False, True])
def test_batch_norm_matches_reference(cls, T, train, unbiased, backend):
    _compare(cls, "batch", T, B=4, train=train, backend=backend, unbiased=unbiased)


@pytest.mark.parametrize("cls", [LSTMCell, GRUCell])
def test_batch_norm_long_sequence(cls, backend):
    _compare(cls, "batch", 50, B=5, train=True, backend=backend)
    _compare(cls, "batch", 50, B=5, train=False, backend=backend, with_state=False)


@pytest.mark.parametrize("cls", [LSTMCell, GRUCell])
def test_batch_norm_one_set_of_statistics(cls, backend):
    """time_steps=0: one set of running statistics, updated at every step in turn (as a feed-forward BN)."""
    _compare(cls, "batch", 6, B=3, train=True, backend=backend, unbiased=True, time_steps=0)
    _compare(cls, "batch", 6, B=3, train=False, backend=backend, time_steps=0)


@pytest.mark.parametrize("cls", [LSTMCell, GRUCell])
def test_no_grad_and_float32(cls, backend):
    """Without autograd (inference) the same outputs; float32 agrees to float32 rounding."""
    cell = _cell(cls, "layer")
    x = torch.randn(9, 3, F_IN, dtype=torch.float64)
    layer = fast_layer(cell, use_native=backend == "native")
    with torch.no_grad():
        r, rs = RecurrentLayer(cell)(x)
        f, fs = layer(x)
    torch.testing.assert_close(f, r, rtol=1e-10, atol=1e-12)
    for a, b in zip(fs, rs):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    cell = cell.float()
    x = x.float().requires_grad_()
    r, _ = RecurrentLayer(cell)(x)
    (gr,) = torch.autograd.grad(r.square().sum(), x)
    f, _ = layer(x)
    assert type(f.grad_fn).__name__ == _grad_fn_name(cls, backend)
    (gf,) = torch.autograd.grad(f.square().sum(), x)
    torch.testing.assert_close(f, r, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(gf, gr, rtol=1e-4, atol=1e-5)


def test_kinds_without_a_fast_path_return_none():
    for cls in (LSTMCell, GRUCell):
        assert fast_layer(cls(3, 4, NormConfig(kind=NormKind.rms))) is None
        for kind in ("none", "weight"):
            assert isinstance(fast_layer(cls(3, 4, NormConfig(kind=NormKind(kind)))), TorchKernelLayer)
            plain = fast_layer(cls(3, 4, NormConfig(kind=NormKind(kind))), use_native=False)
            assert type(plain) is TorchKernelLayer  # torch's own kernel only
    assert fast_layer(torch.nn.Linear(3, 4)) is None


def test_batch_norm_batch_one_is_a_clear_error():
    layer = fast_layer(LSTMCell(3, 4, NormConfig(kind=NormKind.batch), time_steps=5))
    with pytest.raises(ConfigError, match="batch size 1"):
        layer(torch.randn(4, 1, 3))


@pytest.mark.parametrize("cls", [LSTMCell, GRUCell])
@pytest.mark.parametrize("kind", ["none", "weight"])
@pytest.mark.parametrize("with_state", [True, False])
def test_torch_kernel_layer_matches_reference(cls, kind, with_state):
    """The un-normalized cells run torch's fused kernel on their own weights (the GRU's z rows negated)."""
    torch.manual_seed(0)
    cell = cls(F_IN, HID, NormConfig(kind=NormKind(kind))).double()
    x = torch.randn(7, 3, F_IN, dtype=torch.float64, requires_grad=True)
    n_state = 2 if cls is LSTMCell else 1
    state = (
        tuple(torch.randn(3, HID, dtype=torch.float64, requires_grad=True) for _ in range(n_state))
        if with_state
        else None
    )
    weights = [torch.randn(7, 3, HID, dtype=torch.float64)] + [
        torch.randn(3, HID, dtype=torch.float64) for _ in range(n_state)
    ]

    def run(layer):
        out, final = layer(x, state)
        loss = (out * weights[0]).sum() + sum((s * w).sum() for s, w in zip(final, weights[1:]))
        return [out, *final, *torch.autograd.grad(loss, [x, *(state or ()), *cell.parameters()])]

    layer = fast_layer(cell, use_native=False)
    assert type(layer) is TorchKernelLayer
    for f, r in zip(run(layer), run(RecurrentLayer(cell))):
        torch.testing.assert_close(f, r, rtol=1e-10, atol=1e-12)


@pytest.mark.filterwarnings("ignore:TF32 acceleration")
@pytest.mark.parametrize("cls", [LSTMCell, GRUCell])
@pytest.mark.parametrize("kind", ["layer", "batch"])
def test_float32_matches_reference(cls, kind, backend):
    """float32 at a batch and width where torch's kernels vectorize and split work over threads: the
    outputs and every gradient (input, state, parameters) agree with the reference to float32 rounding."""
    B, hid = 19, 37
    cell = _cell(cls, kind, hid=hid).float()
    x = torch.randn(8, B, F_IN, requires_grad=True)
    state = tuple(torch.randn(B, hid, requires_grad=True) for _ in range(2 if cls is LSTMCell else 1))
    weights = [torch.randn(8, B, hid)] + [torch.randn(B, hid) for _ in state]
    ref = _run(RecurrentLayer(copy.deepcopy(cell)), x, state, weights)
    got = _run(fast_layer(copy.deepcopy(cell), use_native=backend == "native"), x, state, weights)
    for r, g in zip(ref, got):
        torch.testing.assert_close(g, r, rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("cls", [LSTMCell, GRUCell])
@pytest.mark.parametrize("kind", ["layer", "batch"])
def test_same_bits_on_one_and_two_threads(cls, kind, backend):
    """The normalized layers' numbers do not depend on the thread count: the gains' and biases' gradients
    are summed by column after the loop (native_layer_norm_backward's own sums split rows over threads and
    do), and the C++ kernels give every row or column to one thread."""
    cell = _cell(cls, kind, hid=64).float()
    x = torch.randn(6, 32, F_IN, requires_grad=True)
    got = results_on_threads(fast_layer(cell, use_native=backend == "native"), cell, x)
    for a, b in zip(*got):
        assert torch.equal(a, b)
