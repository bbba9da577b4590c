"""A normalizer registered from this file alone trains every model family: the registry is the one place
a kind is defined (lnbench.nn.normalizers.Normalizer), and the cells, the MLP and the config ask it."""

import pytest
import torch
from conftest import needs_data, tiny
from torch import nn

from lnbench.errors import ConfigError
from lnbench.nn.norm import NormConfig, make_norm
from lnbench.nn.normalizers import NORMALIZERS, Normalizer, register
from lnbench.nn.rnn import GRUCell, LSTMCell
from lnbench.training.recipe import train


class CenterNorm(nn.Module):
    """Mean-only layer norm (re-centers, no scaling): LN-like, so it removes the Linears' bias."""

    def __init__(self, width: int, gain_init: float, bias: bool):
        super().__init__()
        self.weight = nn.Parameter(torch.full((width,), gain_init))
        self.bias = nn.Parameter(torch.zeros(width)) if bias else None

    def forward(self, a):
        y = (a - a.mean(-1, keepdim=True)) * self.weight
        return y + self.bias if self.bias is not None else y


class Center(Normalizer):
    name, linear_bias, norm_bias, batch_stats, activations = "center", False, True, False, True

    def module(self, cfg, num_features, *, bias=True, time_steps=0):
        return CenterNorm(num_features, cfg.gain_init, bias)


class CenterNoBias(Center):
    name, norm_bias = "center_nobias", False


@pytest.fixture
def registered():
    before = dict(NORMALIZERS)
    register(Center())
    register(CenterNoBias())
    yield
    NORMALIZERS.clear()
    NORMALIZERS.update(before)


@pytest.mark.parametrize(
    "model,dataset",
    [
        pytest.param("ln_mlp", "mnist", marks=needs_data),
        ("ln_lstm", "adding"),
        ("ln_gru", "adding"),
        pytest.param("preln_transformer", "shakespeare", marks=needs_data),
    ],
)
def test_a_registered_normalizer_trains_every_family(registered, model, dataset, tmp_path):
    summary = train(tiny(model, dataset, "model.norm.kind=center"), tmp_path)
    assert summary["status"] == "completed"
    from lnbench.training.recipe import setup_data, setup_model

    cfg = tiny(model, dataset, "model.norm.kind=center")
    built = setup_model(cfg.model, setup_data(cfg.dataset).spec)
    assert any(isinstance(m, CenterNorm) for m in built.modules())


def test_the_cells_take_their_bias_layout_from_the_traits(registered):
    # LN-like traits: LN's layout (no Linear bias; the LSTM's gate bias b; the GRU none beyond its norms').
    lstm, gru = LSTMCell(3, 4, NormConfig(kind="center")), GRUCell(3, 4, NormConfig(kind="center"))
    assert lstm.weight_x.bias is None and lstm.bias is not None and lstm.norm_x.bias is not None
    assert gru.weight_x.bias is None and gru.bias is None and gru.norm_x_rz.bias is not None
    # No bias on the projections' norms: the GRU gets its gate and candidate bias, as BN's and RMS's do.
    gru = GRUCell(3, 4, NormConfig(kind="center_nobias"))
    assert gru.bias is not None and gru.bias.shape == (12,) and gru.norm_x_rz.bias is None


def test_an_unregistered_kind_is_refused_naming_the_registered_ones():
    with pytest.raises(ConfigError, match=r"model.norm.kind=center is not allowed: expected one of \[none, batch"):
        make_norm(NormConfig(kind="center"), 4)


def test_a_normalizer_must_state_its_traits():
    class Vague(Normalizer):
        name = "vague"

    with pytest.raises(TypeError, match="linear_bias"):
        register(Vague())
    assert "vague" not in NORMALIZERS
