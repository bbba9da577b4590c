"""DRAW (section 6.4): the LSTM's cell-state-only LN against a transcription of the supplement's eqs. 53-55, the
attention windows against Gregor et al.'s formulas, the bound's two terms, a few training steps, the preset."""

import math

import pytest
import torch
from conftest import compose_train, needs_data
from torch.distributions import Normal, kl_divergence

from lnbench.data.base import DataSpec
from lnbench.errors import ConfigError
from lnbench.models.draw import DRAW, Attention
from lnbench.models.sequence import SequenceModel
from lnbench.nn.fast.layers import fast_layer
from lnbench.nn.norm import NormConfig
from lnbench.nn.rnn import CELLS, CellStateNormLSTMCell, RecurrentLayer
from lnbench.training.recipe import train
from lnbench.training.tasks import loss_and_metrics, metric_names, primary_metric

SPEC = DataSpec(kind="binary", task="bound", num_outputs=64, input_size=64)  # 8 x 8 binary images


def eqs_53_55(cell: CellStateNormLSTMCell, x: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The supplement's DRAW LSTM written out: plain gates, LN (eq. 15-16: mean and deviation over the H units of
    one case) of c_t inside the output's tanh only; the carried state is c_t. torch's gate order (i, f, g, o)."""
    H = cell.hidden_size
    W_x, b, W_h = cell.weight_x.weight, cell.weight_x.bias, cell.weight_h.weight
    alpha, beta = cell.norm_c.weight, cell.norm_c.bias
    h, c = torch.zeros(x.shape[1], H), torch.zeros(x.shape[1], H)
    outs = []
    for x_t in x:
        a = h @ W_h.T + x_t @ W_x.T + b
        i, f, g, o = a[:, :H], a[:, H : 2 * H], a[:, 2 * H : 3 * H], a[:, 3 * H :]
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        mu = c.sum(1, keepdim=True) / H
        sigma = torch.sqrt(((c - mu) ** 2).sum(1, keepdim=True) / H + eps)
        h = torch.sigmoid(o) * torch.tanh(alpha * (c - mu) / sigma + beta)
        outs.append(h)
    return torch.stack(outs), c


@pytest.mark.usefixtures("float64")
def test_cell_state_ln_lstm_computes_the_supplements_equations():
    torch.manual_seed(0)
    cell = CellStateNormLSTMCell(5, 7, NormConfig(kind="layer"))
    with torch.no_grad():  # a gain and bias away from 1 and 0, so that both enter the check
        cell.norm_c.weight.uniform_(0.5, 1.5)
        cell.norm_c.bias.uniform_(-0.5, 0.5)
    x = torch.randn(6, 3, 5, requires_grad=True)
    y, (_, c) = RecurrentLayer(cell)(x)
    y_ref, c_ref = eqs_53_55(cell, x, cell.norm_c.eps)
    torch.testing.assert_close(y, y_ref, rtol=0, atol=1e-12)
    torch.testing.assert_close(c, c_ref, rtol=0, atol=1e-12)  # the carried state is c_t, never LN(c_t)
    (g,) = torch.autograd.grad(y.square().sum(), x)
    (g_ref,) = torch.autograd.grad(y_ref.square().sum(), x)
    torch.testing.assert_close(g, g_ref, rtol=0, atol=1e-12)
    # the gates are not normalized: only c's LN carries parameters besides the two Linears
    assert {n for n, _ in cell.named_parameters()} == {
        "weight_x.weight",
        "weight_x.bias",
        "weight_h.weight",
        "norm_c.weight",
        "norm_c.bias",
    }


@pytest.mark.usefixtures("float64")
def test_without_a_normalizer_the_variant_is_torchs_lstm():
    torch.manual_seed(1)
    ref, cell = torch.nn.LSTM(4, 6), CellStateNormLSTMCell(4, 6, NormConfig())
    with torch.no_grad():
        cell.weight_x.weight.copy_(ref.weight_ih_l0)
        cell.weight_h.weight.copy_(ref.weight_hh_l0)
        cell.weight_x.bias.copy_(ref.bias_ih_l0 + ref.bias_hh_l0)
    x = torch.randn(5, 2, 4)
    torch.testing.assert_close(RecurrentLayer(cell)(x)[0], ref(x)[0], rtol=0, atol=1e-12)


def test_no_fast_path_ever_runs_the_variant():
    """fast_rnn's layers compute eqs. 20-22; the variant must run its own equations, whatever impl asks."""
    cell = CELLS["lstm_norm_c"](3, 4, NormConfig(kind="layer"))
    assert (
        not isinstance(cell, CELLS["lstm"]) and fast_layer(cell) is None and fast_layer(cell, use_native=False) is None
    )
    spec = DataSpec(kind="sequence", task="regress", num_outputs=1, input_size=3, seq_len=5)
    for impl in ("auto", "torch"):
        model = SequenceModel(spec, cell="lstm_norm_c", hidden_size=4, norm={"kind": "layer"}, impl=impl)
        assert model.kernels == "reference loop"
    with pytest.raises(ConfigError, match="model.impl=fast is not available for lstm_norm_c"):
        SequenceModel(spec, cell="lstm_norm_c", hidden_size=4, norm={"kind": "layer"}, impl="fast")
    with pytest.raises(ConfigError, match="model.norm.kind=weight is not allowed with the lstm_norm_c cell"):
        CellStateNormLSTMCell(3, 4, NormConfig(kind="weight"))


def test_the_ln_draw_preset_uses_the_variant_in_both_lstms():
    model = DRAW(SPEC, glimpses=2, hidden_size=8, latent_size=3, norm={"kind": "layer"})
    for lstm in (model.encoder, model.decoder):
        assert type(lstm) is CellStateNormLSTMCell and isinstance(lstm.norm_c, torch.nn.LayerNorm)
    assert type(DRAW(SPEC, glimpses=2, hidden_size=8, latent_size=3, cell="lstm").encoder) is CELLS["lstm"]
    cfg = compose_train(["model=ln_draw", "dataset=binarized_mnist"])
    assert cfg.model.cell == "lstm_norm_c" and cfg.model.norm.kind == "layer"
    assert (cfg.model.glimpses, cfg.model.hidden_size) == (64, 256)  # the paper's; the experiment preset shrinks them


@pytest.mark.usefixtures("float64")
def test_attention_windows_follow_gregor_et_al():
    """Eqs. 19-26 of Gregor et al.: centre (A+1)/2 (g~+1), stride (A-1)/(N-1) delta~, Gaussian rows normalized."""
    A, N = 8, 3
    att = Attention(4, A, N)
    g_x, g_y, log_var, log_delta, log_gamma = 0.2, -0.4, 0.3, -0.5, 0.7
    with torch.no_grad():
        att.params.weight.zero_()
        att.params.bias.copy_(torch.tensor([g_x, g_y, log_var, log_delta, log_gamma]))
    fy, fx, gamma = att.filters(torch.zeros(1, 4))
    delta = (A - 1) / (N - 1) * torch.exp(torch.tensor(log_delta))
    for f, g in ((fx, g_x), (fy, g_y)):
        centre = (A + 1) / 2 * (g + 1)
        for i in range(1, N + 1):
            mu = centre + (i - N / 2 - 0.5) * delta
            row = torch.exp(-((torch.arange(1, A + 1) - mu) ** 2) / (2 * torch.exp(torch.tensor(log_var))))
            torch.testing.assert_close(f[0, i - 1], row / row.sum())
    torch.testing.assert_close(gamma.flatten(), torch.exp(torch.tensor([log_gamma])))
    image = torch.rand(1, A, A)
    torch.testing.assert_close(
        att.read((image,), torch.zeros(1, 4)), (gamma * fy @ image @ fx.transpose(1, 2)).flatten(1)
    )
    patch = torch.rand(1, N, N)
    torch.testing.assert_close(
        att.write(patch, torch.zeros(1, 4)), (fy.transpose(1, 2) @ patch @ fx / gamma).flatten(1)
    )


@pytest.mark.usefixtures("float64")
def test_the_bound_is_reconstruction_plus_the_kl_of_each_glimpse():
    torch.manual_seed(0)
    model = DRAW(SPEC, glimpses=1, hidden_size=8, latent_size=3, norm={"kind": "layer"}).eval()
    seen = []
    model.latent.register_forward_hook(lambda m, i, out: seen.append(out))
    x = (torch.rand(4, 64) < 0.3).double()
    canvas, kl = model(x)
    assert canvas.shape == (4, 64) and kl.shape == (4,)
    mu, log_sigma = seen[0].chunk(2, -1)
    torch.testing.assert_close(kl, kl_divergence(Normal(mu, log_sigma.exp()), Normal(0.0, 1.0)).sum(-1))
    loss, values, n = loss_and_metrics(SPEC, (canvas, kl), x)
    recon = torch.nn.functional.binary_cross_entropy(torch.sigmoid(canvas), x, reduction="none").sum(-1)
    names = metric_names(SPEC)
    assert names == ["loss", "bound", "recon", "kl"] and primary_metric(SPEC) == "bound" and int(n) == 4
    torch.testing.assert_close(values[names.index("recon")].double(), recon.mean(), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(loss.double(), (recon + kl).mean(), rtol=1e-6, atol=1e-6)


def test_evaluation_is_repeatable_and_leaves_training_noise_alone():
    torch.manual_seed(0)
    model = DRAW(SPEC, glimpses=3, hidden_size=8, latent_size=3, norm={"kind": "layer"})
    x = (torch.rand(5, 64) < 0.3).float()
    model.eval()
    state = torch.random.get_rng_state()
    first, second = model(x), model(x)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    model.train()
    assert not torch.equal(model(x)[1], model(x)[1])  # training samples z afresh


def test_a_few_adam_steps_lower_the_bound_to_the_pixels_entropy():
    torch.manual_seed(0)
    model = DRAW(SPEC, glimpses=2, hidden_size=8, latent_size=2, norm={"kind": "layer"})
    x = (torch.rand(32, 64) < 0.3).float()  # independent pixels: nothing to learn beyond their frequency
    entropy = -64 * (0.3 * math.log(0.3) + 0.7 * math.log(0.7))  # 39.1 nats; at the start: 64 ln 2 = 44.4 + KL
    opt = torch.optim.Adam(model.parameters(), 1e-2)
    losses = []
    for _ in range(30):
        loss = loss_and_metrics(SPEC, model(x), x)[0]
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[0] > entropy + 5 and losses[-1] < entropy + 0.5


@pytest.mark.parametrize(
    "overrides,match",
    [
        (["model.read_size=1"], "model.read_size=1 is not allowed for DRAW"),
        (["model.norm.kind=batch"], "model.norm.kind=batch is not allowed for DRAW"),
        (["model.glimpses=0"], "model.glimpses=0 is not allowed for DRAW"),
    ],
)
def test_bad_draw_settings_are_refused(overrides, match):
    norm = {"kind": "none"}
    kw = {"glimpses": 2, "hidden_size": 8, "latent_size": 3}
    for o in overrides:
        key, value = o.split("=")
        if key == "model.norm.kind":
            norm["kind"] = value
        else:
            kw[key.split(".")[1]] = int(value)
    with pytest.raises(ConfigError, match=match):
        DRAW(SPEC, norm=norm, **kw)


def test_draw_takes_only_binary_images():
    with pytest.raises(ConfigError, match="takes binary inputs but the dataset gives flat ones"):
        DRAW(DataSpec(kind="flat", task="classify", num_outputs=10, input_size=784))


@needs_data
def test_the_draw_preset_trains_through_smoke(tmp_path):
    cfg = compose_train(
        [
            "+experiment=[draw_mnist,smoke]",
            "model.glimpses=2",
            "model.hidden_size=16",
            "dataset.carve=[256,64,64]",
            "dataset.batch_size=32",
        ]
    )
    summary = train(cfg, tmp_path)
    assert summary["status"] == "completed" and summary["primary_metric"] == "bound"
    test = summary["test"]
    assert test["bound"] == pytest.approx(test["recon"] + test["kl"], rel=1e-5) and test["kl"] >= 0
    assert {c["id"].split(".")[0] for c in cfg.claims} == {"draw"} and all("6.4" in c["text"] for c in cfg.claims)


@pytest.mark.parametrize("key", ["read_size", "write_size"])
@pytest.mark.parametrize("side", [2, 8, 28])
def test_an_attention_window_larger_than_the_image_is_refused_and_one_as_large_is_not(key, side):
    """A window is an N x N grid of filters over the A x A image: N from 2 to A. Larger, it trains at 2 N^2 inputs a
    glimpse (about 30 s a step) on filters finer than the pixels."""
    spec = DataSpec(kind="binary", task="bound", num_outputs=side * side, input_size=side * side)
    small = {"glimpses": 1, "hidden_size": 4, "latent_size": 2, "read_size": 2, "write_size": 2}
    for n in (side + 1, 10 * side):
        with pytest.raises(ConfigError, match=f"model.{key}={n} is not allowed for DRAW on {side} x {side} images"):
            DRAW(spec, **{**small, key: n})
    assert getattr(DRAW(spec, **{**small, key: side}), "read_att" if key == "read_size" else "write_att").n == side


def test_glimpses_a_batch_cannot_hold_are_refused_before_a_forward_of_that_many(monkeypatch):
    from types import SimpleNamespace

    from lnbench.data import memory
    from lnbench.launch.preflight import check_batch_fits

    monkeypatch.setattr(memory, "available_bytes", lambda device=None: 2**30)
    model = DRAW(SPEC, glimpses=10**9, hidden_size=4, latent_size=2)  # a forward would take days
    few, dataset = (torch.zeros(2, 64), torch.zeros(2, 64)), SimpleNamespace(batch_size=128, spec=SPEC)
    with pytest.raises(ConfigError, match=r"model.glimpses=1000000000 is not allowed here: .* Use model.glimpses <= "):
        check_batch_fits(model, dataset, few)
    most = 2**30 // (128 * model.kept_bytes_per_glimpse())
    check_batch_fits(DRAW(SPEC, glimpses=2, hidden_size=4, latent_size=2), dataset, few)
    assert most > 64  # the paper's 64 glimpses of MNIST-sized batches stay far inside
