"""The recurrent cells against torch.nn.LSTM / GRU and against a literal transcription of the paper."""

import pytest
import torch

from lnbench.nn.fast.layers import fast_layer
from lnbench.nn.norm import BatchNorm, NormConfig, NormKind
from lnbench.nn.rnn import CELLS, GRUCell, LSTMCell, RecurrentLayer, gru_weights_from_torch, lstm_weights_from_torch

pytestmark = pytest.mark.usefixtures("float64")


def grads(y, params):
    return torch.autograd.grad(y.square().sum(), params)


@pytest.mark.parametrize("T,B", [(1, 1), (9, 3)])
def test_unnormalized_lstm_equals_torch(T, B):
    torch.manual_seed(0)
    ref = torch.nn.LSTM(5, 7)
    cell = LSTMCell(5, 7, NormConfig())
    lstm_weights_from_torch(cell, ref)
    x = torch.randn(T, B, 5, requires_grad=True)
    y_ref, (h_ref, c_ref) = ref(x)
    y, (h, c) = RecurrentLayer(cell)(x)
    torch.testing.assert_close(y, y_ref, rtol=0, atol=1e-12)
    torch.testing.assert_close(c, c_ref[0], rtol=0, atol=1e-12)
    torch.testing.assert_close(grads(y, [x]), grads(y_ref, [x]), rtol=0, atol=1e-12)


@pytest.mark.parametrize("T,B", [(1, 1), (9, 3)])
def test_unnormalized_gru_equals_torch(T, B):
    torch.manual_seed(0)
    ref = torch.nn.GRU(5, 7)
    cell = GRUCell(5, 7, NormConfig())
    gru_weights_from_torch(cell, ref)
    x = torch.randn(T, B, 5, requires_grad=True)
    y_ref, _ = ref(x)
    y, _ = RecurrentLayer(cell)(x)
    torch.testing.assert_close(y, y_ref, rtol=0, atol=1e-12)
    torch.testing.assert_close(grads(y, [x]), grads(y_ref, [x]), rtol=0, atol=1e-12)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize("norm", ["none", "weight"])
def test_fused_path_shares_weights_and_matches_reference(kind, norm):
    torch.manual_seed(1)
    cell = CELLS[kind](4, 6, NormConfig(kind=NormKind(norm)))
    x = torch.randn(8, 3, 4)
    y_ref, s_ref = RecurrentLayer(cell)(x)
    y, s = fast_layer(cell)(x)
    params = list(cell.parameters())
    torch.testing.assert_close(y, y_ref, rtol=0, atol=1e-12)
    torch.testing.assert_close(s, s_ref, rtol=0, atol=1e-12)
    torch.testing.assert_close(grads(y, params), grads(y_ref, params), rtol=0, atol=1e-10)


def paper_ln(a, gain, bias, eps=1e-5):
    """Eqs. 15-16, written out: statistics over the H units of one case."""
    mu = a.mean(-1, keepdim=True)
    sigma = torch.sqrt(((a - mu) ** 2).mean(-1, keepdim=True) + eps)
    return gain * (a - mu) / sigma + bias


def randomize(module):
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn_like(p) * 0.5)


def test_ln_lstm_is_the_papers_equations_20_to_22():
    torch.manual_seed(2)
    H = 6
    cell = LSTMCell(3, H, NormConfig(kind=NormKind.layer))
    randomize(cell)
    x = torch.randn(7, 2, 3)
    y, (h_last, c_last) = RecurrentLayer(cell)(x)

    Wx, Wh = cell.weight_x.weight, cell.weight_h.weight
    h = c = torch.zeros(2, H)
    for t in range(7):
        a = (
            paper_ln(h @ Wh.T, cell.norm_h.weight, cell.norm_h.bias)
            + paper_ln(x[t] @ Wx.T, cell.norm_x.weight, cell.norm_x.bias)
            + cell.bias
        )
        i, f, g, o = a.split(H, -1)  # PyTorch's gate order; LN saw the whole 4H vector either way
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)  # c_t is carried un-normalized
        h = torch.sigmoid(o) * torch.tanh(paper_ln(c, cell.norm_c.weight, cell.norm_c.bias))
        torch.testing.assert_close(y[t], h, rtol=0, atol=1e-12)
    torch.testing.assert_close(c_last, c, rtol=0, atol=1e-12)


def test_ln_gru_is_the_papers_equations_26_to_28():
    torch.manual_seed(3)
    H = 5
    cell = GRUCell(3, H, NormConfig(kind=NormKind.layer))
    randomize(cell)
    x = torch.randn(6, 2, 3)
    y, _ = RecurrentLayer(cell)(x)

    Wx_rz, W = cell.weight_x.weight[: 2 * H], cell.weight_x.weight[2 * H :]
    Wh_rz, U = cell.weight_h.weight[: 2 * H], cell.weight_h.weight[2 * H :]
    n = lambda norm, a: paper_ln(a, norm.weight, norm.bias)  # noqa: E731
    h = torch.zeros(2, H)
    for t in range(6):
        r, z = (n(cell.norm_h_rz, h @ Wh_rz.T) + n(cell.norm_x_rz, x[t] @ Wx_rz.T)).split(H, -1)
        h_tilde = torch.tanh(n(cell.norm_x_n, x[t] @ W.T) + torch.sigmoid(r) * n(cell.norm_h_n, h @ U.T))
        h = (1 - torch.sigmoid(z)) * h + torch.sigmoid(z) * h_tilde
        torch.testing.assert_close(y[t], h, rtol=0, atol=1e-12)


def test_bn_lstm_keeps_statistics_per_time_step_and_reuses_the_last_beyond():
    torch.manual_seed(4)
    cell = LSTMCell(3, 4, NormConfig(kind=NormKind.batch, gain_init=0.1), time_steps=5)
    assert cell.norm_h.running_mean.shape == (5, 16)
    layer = RecurrentLayer(cell)
    layer(torch.randn(5, 8, 3) * torch.arange(1, 6).view(5, 1, 1))  # a different scale per step
    rm = cell.norm_x.running_mean
    assert not torch.allclose(rm[0], rm[4]), "each step must keep its own statistics"
    cell.eval()
    before = rm.clone()
    y_long, _ = layer(torch.randn(9, 2, 3))  # longer than any training sequence: no crash
    assert torch.isfinite(y_long).all()
    torch.testing.assert_close(rm, before)  # evaluation never touches the running statistics
    # Beyond the stored steps, step t uses the last statistics: feed the same input at step 4 and 8.
    x = torch.randn(1, 2, 3).expand(9, 2, 3)
    xp = cell.project_input(x)
    torch.testing.assert_close(xp[4], xp[8])
    assert not torch.allclose(xp[0], xp[4])


def test_bn_gain_init_and_bias_layout_follow_cooijmans():
    cell = LSTMCell(3, 4, NormConfig(kind=NormKind.batch, gain_init=0.1), time_steps=2)
    assert torch.all(cell.norm_x.weight == 0.1) and cell.norm_x.bias is None and cell.norm_h.bias is None
    assert cell.norm_c.bias is not None and cell.bias is not None
    assert cell.weight_x.bias is None and cell.weight_h.bias is None


@pytest.mark.parametrize("gain", [1.0, 0.1])
def test_ln_gain_init_is_configurable(gain):
    cell = LSTMCell(3, 4, NormConfig(kind=NormKind.layer, gain_init=gain))
    for ln in (cell.norm_x, cell.norm_h, cell.norm_c):
        assert torch.all(ln.weight == gain) and torch.all(ln.bias == 0)


def test_ln_works_at_batch_size_one_and_equals_per_case_batched():
    torch.manual_seed(5)
    cell = LSTMCell(3, 4, NormConfig(kind=NormKind.layer))
    x = torch.randn(6, 4, 3)
    y_batch, _ = RecurrentLayer(cell)(x)
    for b in range(4):
        y_one, _ = RecurrentLayer(cell)(x[:, b : b + 1])
        torch.testing.assert_close(y_one[:, 0], y_batch[:, b], rtol=0, atol=1e-12)


def test_bn_matches_torch_batch_norm_and_offers_the_unbiased_variance():
    torch.manual_seed(6)
    a = torch.randn(4, 5) * 3 + 1
    bn = BatchNorm(5)
    ref = torch.nn.BatchNorm1d(5)
    torch.testing.assert_close(bn(a), ref(a), rtol=0, atol=1e-12)
    torch.testing.assert_close(bn.running_var, ref.running_var)
    torch.testing.assert_close(bn.running_mean, ref.running_mean)
    unbiased = BatchNorm(5, unbiased=True)(a)
    expected = (a - a.mean(0)) / torch.sqrt(a.var(0, unbiased=True) + 1e-5)
    torch.testing.assert_close(unbiased, expected, rtol=0, atol=1e-12)
    bn.eval()
    torch.testing.assert_close(bn(a), ref.eval()(a), rtol=0, atol=1e-12)


def test_bn_refuses_to_train_at_batch_size_one_with_a_clear_error():
    from lnbench.errors import ConfigError

    with pytest.raises(ConfigError, match="batch size 1"):
        BatchNorm(5)(torch.randn(1, 5))
    bn = BatchNorm(5).eval()
    assert bn(torch.randn(1, 5)).shape == (1, 5)  # evaluation of one case is fine


def test_bn_lstm_without_per_step_slots_shares_one_set_of_statistics():
    torch.manual_seed(7)
    cell = LSTMCell(3, 4, NormConfig(kind=NormKind.batch), time_steps=0)
    y, _ = RecurrentLayer(cell)(torch.randn(5, 6, 3))
    assert torch.isfinite(y).all() and cell.norm_x.running_mean.shape == (16,)
    assert not torch.equal(cell.norm_x.running_mean, torch.zeros(16))
