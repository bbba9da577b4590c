"""The fast recurrent layers compute exactly what the reference cells compute (float64).

Outputs, final states, gradients wrt the input, the initial state and every parameter, and BN's running
statistics, for LN and BN (biased and unbiased variance) LSTM / GRU, train and eval mode, several
lengths including one longer than BN's stored time steps.

LN on CPU runs through the C kernels of `lnbench.nn.ckernel` when they build; every LN test runs twice,
through the C path (`path="c"`, skipped where no compiler builds them) and through the eager torch
path (`path="eager"`, LNBENCH_NO_CKERNEL=1), and the tests at the end check the fallbacks (no compiler,
a failing compile, a compile still running) and the C kernels' multi-threaded row split.
"""
from __future__ import annotations

import copy
import time

import pytest
import torch

from lnbench.errors import ConfigError
from lnbench.nn import ckernel, fast_rnn
from lnbench.nn.fast_rnn import FastRecurrentLayer, make_fast_layer
from lnbench.nn.norm import NormConfig, NormKind
from lnbench.nn.rnn import GRUCell, LSTMCell, RecurrentLayer

F_IN, HID, STEPS = 5, 6, 10  # STEPS: BN's stored time steps


@pytest.fixture(params=["c", "eager"])
def path(request, monkeypatch):
    """Which implementation LN layers on CPU use: the C kernels or the eager torch ops."""
    if request.param == "eager":
        monkeypatch.setenv("LNBENCH_NO_CKERNEL", "1")
    else:
        monkeypatch.delenv("LNBENCH_NO_CKERNEL", raising=False)
        if ckernel.kernel(wait=120) is None:
            pytest.skip("C kernels unavailable here (no compiler?)")
    return request.param


def _grad_fn_name(cls, kind, path):
    if path == "c":
        pre = "_LN" if kind == "layer" else "_BN"
        return pre + ("LSTMRecurrenceCBackward" if cls is LSTMCell else "GRURecurrenceCBackward")
    return "_LSTMRecurrenceBackward" if cls is LSTMCell else "_GRURecurrenceBackward"


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


def _compare(cls, kind, T, B, train, unbiased=False, with_state=True, path="eager", time_steps=STEPS, hid=HID):
    ref_cell = _cell(cls, kind, unbiased, time_steps=time_steps, hid=hid)
    fast_cell = copy.deepcopy(ref_cell)
    ref_cell.train(train)
    fast_cell.train(train)
    fast = make_fast_layer(fast_cell)
    assert isinstance(fast, FastRecurrentLayer)
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
        ref_list = [ref_out, *ref_final, *torch.autograd.grad(
            (ref_out * weights[0]).sum() + sum((s * w).sum() for s, w in zip(ref_final, weights[1:])),
            [x] + list(ref_cell.parameters()))]
        fast_list = [fast_out, *fast_final, *torch.autograd.grad(
            (fast_out * weights[0]).sum() + sum((s * w).sum() for s, w in zip(fast_final, weights[1:])),
            [x] + list(fast_cell.parameters()))]
    else:
        ref_list = _run(RecurrentLayer(ref_cell), x, state, weights)
        fast_list = _run(fast, x, state, weights)
    assert type(fast_list[0].grad_fn).__name__ == _grad_fn_name(cls, kind, path)  # the path meant ran
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
def test_layer_norm_matches_reference(cls, T, train, path):
    _compare(cls, "layer", T, B=3, train=train, path=path)


@pytest.mark.parametrize("cls", [LSTMCell, GRUCell])
@pytest.mark.parametrize("T", [1, 7])
def test_layer_norm_batch_one_and_zero_state(cls, T, path):
    _compare(cls, "layer", T, B=1, train=True, path=path)
    _compare(cls, "layer", T, B=4, train=True, with_state=False, path=path)


@pytest.mark.parametrize("cls", [LSTMCell, GRUCell])
@pytest.mark.parametrize("T", [1, 7, 12])  # 12 > STEPS: past BN's last stored statistics
@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("unbiased", [False, True])
def test_batch_norm_matches_reference(cls, T, train, unbiased, path):
    _compare(cls, "batch", T, B=4, train=train, unbiased=unbiased, path=path)


@pytest.mark.parametrize("cls", [LSTMCell, GRUCell])
def test_batch_norm_long_sequence(cls, path):
    _compare(cls, "batch", 50, B=5, train=True, path=path)
    _compare(cls, "batch", 50, B=5, train=False, with_state=False, path=path)


@pytest.mark.parametrize("cls", [LSTMCell, GRUCell])
def test_batch_norm_one_set_of_statistics(cls, path):
    """time_steps=0: one set of running statistics, updated at every step in turn (as a feed-forward BN)."""
    _compare(cls, "batch", 6, B=3, train=True, unbiased=True, path=path, time_steps=0)
    _compare(cls, "batch", 6, B=3, train=False, path=path, time_steps=0)


@pytest.mark.parametrize("cls", [LSTMCell, GRUCell])
def test_no_grad_and_float32(cls, path):
    """Without autograd (inference) the same outputs; float32 agrees to float32 rounding."""
    cell = _cell(cls, "layer")
    x = torch.randn(9, 3, F_IN, dtype=torch.float64)
    with torch.no_grad():
        r, rs = RecurrentLayer(cell)(x)
        f, fs = make_fast_layer(cell)(x)
    torch.testing.assert_close(f, r, rtol=1e-10, atol=1e-12)
    for a, b in zip(fs, rs):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    cell = cell.float()
    x = x.float().requires_grad_()
    r, _ = RecurrentLayer(cell)(x)
    (gr,) = torch.autograd.grad(r.square().sum(), x)
    f, _ = make_fast_layer(cell)(x)
    assert type(f.grad_fn).__name__ == _grad_fn_name(cls, "layer", path)
    (gf,) = torch.autograd.grad(f.square().sum(), x)
    torch.testing.assert_close(f, r, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(gf, gr, rtol=1e-4, atol=1e-5)


def test_unsupported_kinds_return_none():
    for kind in ("none", "weight", "rms"):
        for cls in (LSTMCell, GRUCell):
            assert make_fast_layer(cls(3, 4, NormConfig(kind=NormKind(kind)))) is None
    assert make_fast_layer(torch.nn.Linear(3, 4)) is None


def test_batch_norm_batch_one_is_a_clear_error():
    layer = make_fast_layer(LSTMCell(3, 4, NormConfig(kind=NormKind.batch), time_steps=5))
    with pytest.raises(ConfigError, match="batch size 1"):
        layer(torch.randn(4, 1, 3))


# --------------------------------------------------------------------------------------------------
# The C kernels: threads, fallbacks, build
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("kind", ["layer", "batch"])
def test_c_recurrent_products_match_reference(kind, threads, path):
    """The LSTM's C recurrences compute h_{t-1} W_h^T and dA_t W_h themselves (ckernel's gemm_panels):
    19 rows (two whole blocks of 8 and a part block) and 37 units (4H = 148 and H = 37 columns, neither a
    multiple of the panel width, so the last panel is part padding), on 1 and 2 threads."""
    if path == "eager":
        pytest.skip("C path only")
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for train in (True, False):
            _compare(LSTMCell, kind, 4, B=19, train=train, path=path, hid=37)
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("cls", [LSTMCell, GRUCell])
def test_c_kernels_split_rows_over_threads(cls, path, monkeypatch):
    """LN: several row chunks (uneven: 7 rows over 2 threads), each accumulating its own LN gradients.
    BN: the statistics by hidden units split unevenly (6 over 4 threads), each thread owning its columns',
    the rest by rows (5 over 4 threads)."""
    if path == "eager":
        pytest.skip("C path only")
    threads = torch.get_num_threads()
    monkeypatch.setattr(fast_rnn, "MIN_ROWS_PER_THREAD", 1)
    torch.set_num_threads(2)
    try:
        assert fast_rnn._kernel_threads(7) == 2
        _compare(cls, "layer", 7, B=7, train=True, path=path)
        torch.set_num_threads(4)
        for train in (True, False):
            _compare(cls, "batch", 12, B=5, train=train, unbiased=train, path=path)
    finally:
        torch.set_num_threads(threads)


def test_c_backward_twice_is_a_clear_error(path):
    if path == "eager":
        pytest.skip("C path only")
    layer = make_fast_layer(_cell(LSTMCell, "layer"))
    out, _ = layer(torch.randn(3, 2, F_IN, dtype=torch.float64))
    out.sum().backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="twice"):
        out.sum().backward()


@pytest.fixture
def fresh_builder(tmp_path, monkeypatch):
    """An empty cache dir and a builder that has tried nothing yet; the real one is restored after."""
    monkeypatch.setenv("LNBENCH_CACHE", str(tmp_path))
    monkeypatch.delenv("LNBENCH_NO_CKERNEL", raising=False)
    saved = ckernel._builder, ckernel._waited
    ckernel.reset()
    yield tmp_path
    ckernel._builder, ckernel._waited = saved


def _eager_still_exact():
    _compare(LSTMCell, "layer", 7, B=3, train=True, path="eager")
    _compare(GRUCell, "layer", 7, B=3, train=True, path="eager")


def test_no_compiler_falls_back_with_one_warning(fresh_builder, monkeypatch):
    monkeypatch.setenv("CC", "/nonexistent/cc")
    with pytest.warns(RuntimeWarning, match="no C compiler"):
        assert ckernel.kernel() is None
    _eager_still_exact()  # no second warning (the failure is remembered), the eager path's numbers


def test_failed_compile_falls_back(fresh_builder, monkeypatch):
    if ckernel._compiler() is None:
        pytest.skip("no C compiler")
    monkeypatch.setattr(ckernel, "FLAG_SETS", [["--no-such-flag-lnbench"]])
    with pytest.warns(RuntimeWarning, match="compile failed"):
        assert ckernel.kernel() is None
    assert not list(fresh_builder.glob("*.so")) and not list(fresh_builder.glob(".ckernel-*"))
    _eager_still_exact()


def test_builds_into_the_cache_in_the_background(fresh_builder, monkeypatch):
    """With no time to wait, the first call gets the eager path; the library appears, keyed and whole."""
    if ckernel._compiler() is None:
        pytest.skip("no C compiler")
    monkeypatch.setattr(ckernel, "WAIT_S", 0.0)
    assert ckernel.kernel() is None  # still compiling
    for _ in range(300):
        k = ckernel.kernel()
        if k is not None:
            break
        time.sleep(0.05)
    assert k is not None
    assert [p.name for p in fresh_builder.iterdir()] == [k.path.name]  # no temporaries left
    assert k.path.name.startswith("ckernel-") and k.path.suffix == ".so"
    ckernel.reset()  # a new process: loads the cached file without compiling
    assert ckernel.kernel().path == k.path and ckernel._builder.proc is None


@pytest.mark.filterwarnings("ignore:TF32 acceleration")
@pytest.mark.parametrize("cls", [LSTMCell, GRUCell])
@pytest.mark.parametrize("kind", ["layer", "batch"])
def test_float32_c_path_matches_reference(cls, kind):
    """float32, the C recurrences' own products (8-row blocks and a part block, several panels of 32
    columns and a part panel) and oneDNN's for the input side: the outputs and every gradient (input,
    state, parameters) agree with the reference cells to float32 rounding."""
    if ckernel.kernel(wait=120) is None:
        pytest.skip("C kernels unavailable here (no compiler?)")
    B, hid = 19, 37
    cell = _cell(cls, kind, hid=hid).float()
    x = torch.randn(8, B, F_IN, requires_grad=True)
    state = tuple(torch.randn(B, hid, requires_grad=True) for _ in range(2 if cls is LSTMCell else 1))
    weights = [torch.randn(8, B, hid)] + [torch.randn(B, hid) for _ in state]
    ref = _run(RecurrentLayer(copy.deepcopy(cell)), x, state, weights)
    fast = make_fast_layer(copy.deepcopy(cell))
    got = _run(fast, x, state, weights)
    assert "RecurrenceC" in type(fast(x, state)[0].grad_fn).__name__
    for r, g in zip(ref, got):
        torch.testing.assert_close(g, r, rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("K, M, N, K0", [(600, 19, 37, 0), (256, 8, 32, 0), (5, 3, 70, 0), (600, 300, 37, 259),
                                         (40, 19, 33, 40)])
def test_weight_grad_is_a_transposed_product(K, M, N, K0, dtype):
    """_weight_grad(a, b, b0) = a^T [b0; b] (the C paths' weight gradients, summed over all T*B rows; b0
    = h0 before the outputs): K in blocks of 256 rows (two whole and a part block; exactly one), whole
    and part blocks of 8 rows, whole and part panels, A's columns in two blocks of 128 and a part, b0's
    rows ending inside a block, b0 alone; against float64 torch. On 1 and 2 threads, bit for bit the same."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(K, M, generator=g, dtype=torch.float64), torch.randn(K, N, generator=g, dtype=torch.float64)
    tol = dict(rtol=1e-12, atol=1e-12) if dtype == torch.float64 else dict(rtol=1e-4, atol=1e-4)
    threads = torch.get_num_threads()
    got = []
    try:
        for nt in (1, 2):
            torch.set_num_threads(nt)
            args = (a.to(dtype), b.to(dtype)) if not K0 else (a.to(dtype), b[K0:].to(dtype), b[:K0].to(dtype))
            got.append(fast_rnn._weight_grad(*args))
    finally:
        torch.set_num_threads(threads)
    torch.testing.assert_close(got[0].double(), a.t() @ b, **tol)
    assert torch.equal(got[0], got[1])


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("needs", [(True, True, True), (False, True, True), (True, False, False)])
def test_linear_through_onednn_matches_f_linear(bias, needs):
    """_Linear (the C paths' input side W_x x, float32 on CPU): output and the gradients asked for as F.linear's."""
    if not fast_rnn._onednn_linear():
        pytest.skip("torch without oneDNN")
    g = torch.Generator().manual_seed(0)
    x, W = torch.randn(5, 3, 7, generator=g), torch.randn(11, 7, generator=g)
    b = torch.randn(11, generator=g) if bias else None
    leaves = [t.requires_grad_(n) for t, n in zip((x, W, b), needs) if t is not None]
    dy = torch.randn(5, 3, 11, generator=g)
    want = torch.nn.functional.linear(x.double(), W.double(), None if b is None else b.double())
    got = fast_rnn._Linear.apply(x, W, b)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    asked = [t for t in leaves if t.requires_grad]
    grads = torch.autograd.grad(got, asked, dy)
    wants = torch.autograd.grad(torch.nn.functional.linear(x, W, b), asked, dy)
    for a, w in zip(grads, wants):
        torch.testing.assert_close(a, w, rtol=1e-5, atol=1e-5)
