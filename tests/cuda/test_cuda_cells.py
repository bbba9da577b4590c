"""On a GPU: each cell, run on CUDA in float32 the way a model runs it, gives the CPU reference's numbers (the plain
per-step loop of lnbench.nn.rnn in float64) within TOLERANCE: outputs, final states, the gradients of the input and
of every parameter, and BN's running averages. So do the MLP and DRAW (evaluation, whose noise is drawn on the CPU).
TF32 is off, as in a run (lnbench.training.recipe.cuda_settings)."""

import pytest
import torch
from cuda_support import DEVICE, ON_GPU, REQUIRES_CUDA, relative_error

from lnbench.data.base import DataSpec
from lnbench.models import MLP
from lnbench.models.draw import DRAW
from lnbench.nn.fast import triton_lstm
from lnbench.nn.fast.layers import NormalizedLayer, fast_layer, layer_path
from lnbench.nn.norm import NormConfig
from lnbench.nn.rnn import CELL_STATE_NORM, CELLS, LSTMCell, RecurrentLayer
from lnbench.training.device import cuda_settings

pytestmark = REQUIRES_CUDA
TOLERANCE = 1e-4  # relative, of the norms: float32 without TF32 lands near 1e-6 here; TF32 would be near 1e-3
T, B, F, H = 8, 5, 7, 32
CASES = [(c, n) for c in ("lstm", "gru") for n in ("none", "weight", "layer", "batch")]
CASES += [(CELL_STATE_NORM, "layer"), (CELL_STATE_NORM, "none")]


@pytest.fixture(autouse=True)
def float32_as_a_run_computes():
    cuda_settings(torch.device(DEVICE))


def built(make, seed=0, ref_dtype=torch.float64):
    """The module `make()` builds, in float64 (ref_dtype) on the CPU with every parameter moved off its initial value
    (so that gains of 1 and biases of 0 hide nothing), and the same module in float32 on DEVICE."""
    torch.manual_seed(seed)
    ref = make().to(ref_dtype)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    torch.manual_seed(seed)
    dev = make()
    dev.load_state_dict(ref.state_dict())
    return ref, dev.to(DEVICE, torch.float32)


def assert_close(got, want, what):
    err = relative_error(got, want)
    assert err < TOLERANCE, f"{what}: relative error {err:.3g} (tolerance {TOLERANCE})"


def results(fn, inputs, params):
    """fn's outputs and the gradients of a fixed random weighting of them, of every input and parameter."""
    outs = [t for t in fn() if t is not None]
    gen = torch.Generator().manual_seed(1)
    loss = sum((o * torch.randn(o.shape, generator=gen, dtype=torch.float64).to(o)).sum() for o in outs)
    return outs, torch.autograd.grad(loss, [*inputs, *params])


@pytest.mark.parametrize("impl", ["auto", "torch", "reference"])
@pytest.mark.parametrize("cell_kind,norm", CASES)
def test_each_cell_on_cuda_matches_the_cpu_reference(cell_kind, norm, impl):
    def make():
        return CELLS[cell_kind](F, H, NormConfig(kind=norm, gain_init=0.5 if norm == "batch" else 1.0), time_steps=T)

    ref, cell = built(make)
    x64 = torch.randn(T, B, F, dtype=torch.float64, requires_grad=True)
    x = x64.detach().float().to(DEVICE).requires_grad_()
    fast = None if impl == "reference" else fast_layer(cell, use_native=impl == "auto")
    layer = fast or RecurrentLayer(cell)

    def flat(out_state):
        return [out_state[0], *out_state[1]]

    want_out, want_grads = results(lambda: flat(RecurrentLayer(ref)(x64)), [x64], list(ref.parameters()))
    got_out, got_grads = results(lambda: flat(layer(x)), [x], list(cell.parameters()))
    for i, (g, w) in enumerate(zip(got_out, want_out)):
        assert_close(g, w, f"output {i}")
    names = ["x", *(n for n, _ in ref.named_parameters())]
    for name, g, w in zip(names, got_grads, want_grads):
        assert_close(g, w, f"gradient of {name}")
    for (name, g), w in zip(cell.named_buffers(), ref.buffers()):  # BN's running averages, updated by the pass
        assert_close(g, w, name)
    if ON_GPU and (cell_kind, norm, impl) == ("lstm", "layer", "auto"):  # Triton, its training loops graphed
        want = "triton (CUDA graphs)" if triton_lstm.available() else "torch ops (CUDA)"
        assert str(layer_path(layer, x)) == want


@pytest.mark.parametrize("norm", ["none", "batch", "layer", "weight", "rms"])
def test_the_mlp_on_cuda_matches_the_cpu_reference(norm):
    spec = DataSpec(kind="flat", task="classify", num_outputs=10, input_size=F)
    ref, model = built(lambda: MLP(spec, [64, 48], {"kind": norm}))
    x64 = torch.randn(16, F, dtype=torch.float64, requires_grad=True)
    x = x64.detach().float().to(DEVICE).requires_grad_()
    want_out, want_grads = results(lambda: [ref(x64)], [x64], list(ref.parameters()))
    got_out, got_grads = results(lambda: [model(x)], [x], list(model.parameters()))
    for g, w in zip([*got_out, *got_grads], [*want_out, *want_grads]):
        assert_close(g, w, f"mlp {norm}")


@pytest.mark.parametrize("model_kwargs", [{"norm": {"kind": "layer"}}, {"cell": "lstm", "norm": {"kind": "layer"}}, {}])
def test_draw_on_cuda_matches_the_cpu_reference(model_kwargs):
    """DRAW in evaluation (its noise drawn from a CPU generator of a fixed seed, so the same on both devices; in
    float32 on both, since a float64 draw gives other numbers): the canvas, the KL term and their gradients; with
    the paper's cell-state LN, the LN-LSTM and no normalizer."""
    spec = DataSpec(kind="binary", task="bound", num_outputs=64, input_size=64)
    make = lambda: DRAW(spec, glimpses=4, hidden_size=16, latent_size=6, **model_kwargs).eval()  # noqa: E731
    ref, model = built(make, ref_dtype=torch.float32)
    x64 = torch.randint(0, 2, (6, 64)).float()
    x = x64.float().to(DEVICE)
    want_out, want_grads = results(lambda: list(ref(x64)), [], list(ref.parameters()))
    got_out, got_grads = results(lambda: list(model(x)), [], list(model.parameters()))
    for g, w in zip([*got_out, *got_grads], [*want_out, *want_grads]):
        assert_close(g, w, f"draw {model_kwargs}")


def test_the_ln_lstm_training_graphs_compute_what_eager_triton_does():
    """lnbench.nn.fast.triton_graphs: two stacked layers of one shape share the captured graphs (the second layer's
    forward replays them before the first layer's backward), over two steps (the second replays what the first
    captured): outputs and gradients as with every launch from Python."""
    if not (ON_GPU and triton_lstm.available()):
        pytest.skip("needs CUDA and triton")
    torch.manual_seed(0)
    cells = [LSTMCell(H, H, NormConfig(kind="layer")).to(DEVICE) for _ in range(2)]
    params = [p for c in cells for p in c.parameters()]
    x = torch.randn(T, B, H, device=DEVICE, requires_grad=True)
    w = torch.randn(T, B, H, device=DEVICE)

    def steps(graphs: bool):
        layers = [NormalizedLayer(c, use_native=True, graphs=graphs) for c in cells]
        found = []
        for _ in range(2):
            h = x
            for layer in layers:
                h, _ = layer(h)
            found.append([h, *torch.autograd.grad((h * w).sum(), [x, *params])])
        assert str(layer_path(layers[0], x)) == ("triton (CUDA graphs)" if graphs else "triton (CUDA)")
        return found

    eager, graphed = steps(False), steps(True)
    for step_eager, step_graphed in zip(eager, graphed):
        for i, (g, e) in enumerate(zip(step_graphed, step_eager)):
            assert relative_error(g, e) < 1e-6, f"result {i}: {relative_error(g, e):.3g}"
