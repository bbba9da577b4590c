"""The GRU in lnbench's C++ kernels (lnbench/nn/fast/csrc/gru_norm.cpp) computes what the reference GRUCell loop
computes, for norm none (the un-normalized `gru`, NativeGRULayer), layer and batch (NormalizedLayer).

float64 against RecurrentLayer to 1e-10: outputs, final state, and the gradients of the input, the initial
state and every parameter, BN's running statistics; float32 to float32 rounding; the same bits on 1 and 2
threads; torch's GRU where the kernels do not run; and (slow) the AVX2 build's numbers equal the AVX-512
build's, for the LSTM's kernels too.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys

import pytest
import torch

from lnbench.data.base import DataSpec
from lnbench.errors import ConfigError
from lnbench.models.sequence import SequenceModel
from lnbench.nn.fast import layers, native
from lnbench.nn.fast.layers import NativeGRULayer, NormalizedLayer, TorchKernelLayer, fast_layer, layer_path
from lnbench.nn.norm import NormConfig, NormKind
from lnbench.nn.rnn import GRUCell, LSTMCell, RecurrentLayer

F_IN, HID, STEPS = 5, 6, 10


@pytest.fixture(autouse=True)
def kernels_built():
    if native.ops() is None:
        if native.compiler():
            pytest.fail(f"a C++ compiler is here but the kernels did not load: {native.status()}")
        pytest.skip("no C++ compiler: the kernels cannot be built here")


def _cell(kind, seed=0, hid=HID, dtype=torch.float64, cls=GRUCell):
    torch.manual_seed(seed)
    cfg = NormConfig(kind=NormKind(kind), gain_init=0.8)
    cell = cls(F_IN, hid, cfg, time_steps=STEPS if kind == "batch" else 0).to(dtype)
    with torch.no_grad():  # every gain, bias and running statistic off its initial value, so all of them matter
        for p in cell.parameters():
            p.add_(torch.randn_like(p) * 0.3)
        for b in cell.buffers():
            b.add_(torch.rand_like(b) * 0.5)
    return cell


def _results(layer, cell, x, state, seed=1):
    """out, final state, then the gradients of x, the state (if given) and every parameter of a loss
    weighting every output and the final state, then the cell's buffers (BN's running statistics)."""
    out, final = layer(x, state)
    g = torch.Generator().manual_seed(seed)
    loss = (out * torch.randn(out.shape, dtype=out.dtype, generator=g)).sum()
    loss = loss + (final[0] * torch.randn(final[0].shape, dtype=out.dtype, generator=g)).sum()
    grads = torch.autograd.grad(loss, [x, *(state or ()), *cell.parameters()])
    return out, [out, *final, *grads, *cell.buffers()]


@pytest.mark.parametrize("kind", ["none", "layer", "batch"])
@pytest.mark.parametrize("T", [1, 7])
@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("with_state", [True, False])
def test_float64_matches_reference(kind, T, train, with_state):
    ref_cell = _cell(kind).train(train)
    cell = copy.deepcopy(ref_cell)
    layer = fast_layer(cell)
    assert isinstance(layer, NativeGRULayer if kind == "none" else NormalizedLayer)
    g = torch.Generator().manual_seed(2)
    B = 4
    x = torch.randn(T, B, F_IN, dtype=torch.float64, generator=g, requires_grad=True)
    state = (torch.randn(B, HID, dtype=torch.float64, generator=g, requires_grad=True),) if with_state else None
    _, want = _results(RecurrentLayer(ref_cell), ref_cell, x, state)
    out, got = _results(layer, cell, x, state)
    assert type(out.grad_fn).__name__ == "NativeGRURecurrenceBackward"  # the kernel ran
    assert str(layer_path(layer, x)) == native.status() and layer_path(layer, x).same_bits_on_any_count
    names = ["out", "h_T", "dx"] + (["dh0"] if with_state else []) + [f"d{n}" for n, _ in cell.named_parameters()]
    names += [n for n, _ in cell.named_buffers()]
    assert len(names) == len(want) == len(got)
    for name, w, o in zip(names, want, got):
        torch.testing.assert_close(o, w, rtol=1e-10, atol=1e-12, msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("kind", ["none", "layer", "batch"])
def test_no_grad_matches_reference(kind):
    """Inference (nothing kept for a backward) gives the same outputs; BN at evaluation its running averages."""
    for train in (True, False):
        ref_cell = _cell(kind).train(train)
        cell = copy.deepcopy(ref_cell)
        x = torch.randn(12, 3, F_IN, dtype=torch.float64)  # 12 > STEPS: BN past its last stored statistics
        with torch.no_grad():
            want, (wh,) = RecurrentLayer(ref_cell)(x)
            got, (gh,) = fast_layer(cell)(x)
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(gh, wh, rtol=1e-10, atol=1e-12)
        for w, o in zip(ref_cell.buffers(), cell.buffers()):
            torch.testing.assert_close(o, w, rtol=1e-12, atol=1e-14)


@pytest.mark.filterwarnings("ignore:TF32 acceleration")
@pytest.mark.parametrize("kind", ["none", "layer", "batch"])
def test_float32_matches_reference(kind):
    """float32 at a batch and width where the kernels' loops vectorize and split rows over the threads."""
    cell = _cell(kind, hid=37, dtype=torch.float32)
    x = torch.randn(8, 19, F_IN, requires_grad=True)
    state = (torch.randn(19, 37, requires_grad=True),)
    ref = copy.deepcopy(cell)
    _, want = _results(RecurrentLayer(ref), ref, x, state)
    out, got = _results(fast_layer(cell), cell, x, state)
    assert type(out.grad_fn).__name__ == "NativeGRURecurrenceBackward"
    for w, o in zip(want, got):
        torch.testing.assert_close(o, w, rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("kind", ["none", "layer", "batch"])
def test_same_bits_on_one_and_two_threads(kind):
    cell = _cell(kind, hid=64, dtype=torch.float32)
    x = torch.randn(6, 32, F_IN, requires_grad=True)
    from conftest import results_on_threads  # here: the AVX2 test loads this module in a bare subprocess

    got = results_on_threads(fast_layer(cell), cell, x)
    assert all(type(r[0].grad_fn).__name__ == "NativeGRURecurrenceBackward" for r in got)
    for a, b in zip(*got):
        assert torch.equal(a, b)


def test_batch_norm_batch_one_is_a_clear_error():
    layer = fast_layer(GRUCell(3, 4, NormConfig(kind=NormKind.batch), time_steps=5))
    with pytest.raises(ConfigError, match="batch size 1"):
        layer(torch.randn(4, 1, 3))


def test_the_baseline_build_runs_torch_gru_where_it_is_faster(monkeypatch):
    monkeypatch.setattr(native, "isa", lambda: "DEFAULT")
    assert type(fast_layer(_cell("none"))) is TorchKernelLayer
    assert isinstance(fast_layer(_cell("layer")), NormalizedLayer)  # LN and BN: the kernel on every build


def test_torch_gru_where_the_kernels_do_not_run(monkeypatch):
    """model.impl=torch (use_native=False) and a machine without the kernels run torch's GRU, and say so."""
    cell = _cell("none")
    x = torch.randn(5, 3, F_IN, dtype=torch.float64)
    assert type(fast_layer(cell, use_native=False)) is TorchKernelLayer
    layer = fast_layer(cell)
    assert isinstance(layer, NativeGRULayer) == (native.isa() in layers.NATIVE_NONE_GRU_ISAS)
    monkeypatch.setattr(native, "ops", lambda: None)
    assert not layer.native(x) and str(layer_path(layer, x)) == "torch's fused kernel"
    with torch.no_grad():
        got, _ = layer(x)
        want, _ = RecurrentLayer(cell)(x)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("norm", ["none", "layer", "batch"])
def test_the_model_records_what_runs(norm):
    """SequenceModel.kernels (the run's provenance) names the kernel; model.impl=torch keeps torch's own."""
    spec = DataSpec(kind="sequence", task="regress", num_outputs=1, input_size=3, seq_len=5)
    model = SequenceModel(spec, cell="gru", hidden_size=4, norm={"kind": norm})
    assert model.kernels == native.status()
    model(torch.randn(2, 5, 3)).sum().backward()
    want = "torch's fused kernel" if norm == "none" else "torch ops"
    assert SequenceModel(spec, cell="gru", hidden_size=4, norm={"kind": norm}, impl="torch").kernels == want


def test_weight_norm_keeps_torch_gru():
    assert type(fast_layer(GRUCell(3, 4, NormConfig(kind=NormKind.weight)))) is TorchKernelLayer


def test_build_name_covers_the_headers(monkeypatch, tmp_path):
    """A header edit is a new build (a new name in the cache), never a stale .so loaded."""
    assert any(h.name == "kernel_common.h" for h in native.HEADERS)
    before = native.build_name()
    edited = tmp_path / "kernel_common.h"
    edited.write_text(native.HEADERS[0].read_text() + "\n// edited\n")
    monkeypatch.setattr(native, "HEADERS", [edited if h.name == edited.name else h for h in native.HEADERS])
    assert native.build_name() != before


# ---- the AVX2 build's numbers are the AVX-512 build's ------------------------------------------------
SNAPSHOT = """
import importlib.util, sys, torch
spec = importlib.util.spec_from_file_location("native_gru_snapshot", {here!r})
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
torch.save(module.snapshot(), sys.argv[1])
"""


def snapshot() -> tuple[str, dict[str, list[torch.Tensor]]]:
    """Which build ran, and the outputs and gradients of the native LSTM (LN, BN) and GRU (none, LN, BN), train
    and eval, float32."""
    from lnbench.nn.fast import native as nat

    assert nat.ops() is not None, nat.status()
    torch.set_num_threads(2)
    found = {}
    for cls, kinds in ((LSTMCell, ("layer", "batch")), (GRUCell, ("none", "layer", "batch"))):
        for kind in kinds:
            for train in (True, False):
                cell = _cell(kind, hid=40, dtype=torch.float32, cls=cls).train(train)
                x = torch.randn(7, 9, F_IN, generator=torch.Generator().manual_seed(3), requires_grad=True)
                out, final = fast_layer(cell)(x)
                assert type(out.grad_fn).__name__.startswith("Native")
                grads = torch.autograd.grad(out.square().sum() + final[0].sum(), [x, *cell.parameters()])
                found[f"{cls.__name__}-{kind}-{train}"] = [out, *final, *grads, *cell.buffers()]
    return nat.status(), {k: [t.detach() for t in v] for k, v in found.items()}


@pytest.mark.slow
def test_avx2_build_equals_avx512_build(tmp_path):
    """FMA in the product tiles only and -ffp-contract=off elsewhere: the two builds agree bit for bit
    (a separate build of each, in a fresh process each: torch's capability is read once per process)."""
    if torch.backends.cpu.get_cpu_capability() != "AVX512":
        pytest.skip("needs a CPU with AVX-512")
    got = {}
    for isa in ("avx512", "avx2"):
        env = dict(os.environ, ATEN_CPU_CAPABILITY=isa)
        path = tmp_path / f"{isa}.pt"
        subprocess.run(
            [sys.executable, "-c", SNAPSHOT.format(here=os.path.abspath(__file__)), str(path)], env=env, check=True
        )
        status, got[isa] = torch.load(path)
        assert status == f"native ({isa.upper()} build)"
    assert got["avx512"].keys() == got["avx2"].keys() and len(got["avx2"]) == 10
    for key, tensors in got["avx512"].items():
        for i, (a, b) in enumerate(zip(tensors, got["avx2"][key])):
            assert torch.equal(a, b), f"{key}: tensor {i} differs between the AVX-512 and the AVX2 build"
