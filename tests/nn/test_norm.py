"""The normalizers: the paper's Table 1 invariances, checked numerically, and the factory."""

import pytest
import torch

from lnbench.nn.norm import BatchNorm, NormConfig, NormKind, make_linear, make_norm, weight_norm_data_init

F_IN, H, B = 6, 5, 8


def layer_output(kind: str, W: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """The normalized summed inputs of one layer with weight matrix W (rows = hidden units)."""
    cfg = NormConfig(kind=NormKind(kind))
    linear = make_linear(cfg, F_IN, H)
    with torch.no_grad():
        if kind == "weight":
            linear.parametrizations.weight.original1.copy_(W)
            linear.parametrizations.weight.original0.fill_(1.0)
            linear.bias.zero_()
        else:
            linear.weight.copy_(W)
    norm = make_norm(cfg, H)
    return norm(linear(x)).detach()


def transforms():
    g = torch.Generator().manual_seed(0)
    gamma = torch.randn(F_IN, generator=g)
    shift = torch.randn(F_IN, generator=g)
    row_scale = torch.ones(H, 1)
    row_scale[0] = 3.0
    case_scale = torch.ones(B, 1)
    case_scale[0] = 3.0
    return {
        "weight matrix re-scaling": lambda W, x: (3.0 * W, x),
        "weight matrix re-centering": lambda W, x: (W + gamma, x),
        "weight vector re-scaling": lambda W, x: (W * row_scale, x),
        "dataset re-scaling": lambda W, x: (W, 3.0 * x),
        "dataset re-centering": lambda W, x: (W, x + shift),
        "single case re-scaling": lambda W, x: (W, x * case_scale),
    }


# The paper's Table 1 (spec.md): True = invariant.
TABLE_1 = {
    "batch": [True, False, True, True, True, False],
    "weight": [True, False, True, False, False, False],
    "layer": [True, True, False, True, False, True],
}


@pytest.mark.parametrize("kind", list(TABLE_1))
@pytest.mark.parametrize("i,name", list(enumerate(transforms())))
def test_table_1_invariances(kind, i, name):
    torch.manual_seed(1)
    W, x = torch.randn(H, F_IN, dtype=torch.float64), torch.randn(B, F_IN, dtype=torch.float64)
    with torch.device("cpu"):
        torch.set_default_dtype(torch.float64)
        try:
            before = layer_output(kind, W, x)
            after = layer_output(kind, *transforms()[name](W, x))
        finally:
            torch.set_default_dtype(torch.float32)
    # BN and LN keep eps inside the square root, so "invariant" holds up to eps / variance.
    same = torch.allclose(before, after, atol=1e-4, rtol=1e-4)
    assert same == TABLE_1[kind][i], f"{kind} norm under {name}: invariant={same}, paper says {TABLE_1[kind][i]}"


@pytest.mark.parametrize(
    "kind,expected",
    [
        ("none", torch.nn.Identity),
        ("weight", torch.nn.Identity),
        ("layer", torch.nn.LayerNorm),
        ("rms", torch.nn.RMSNorm),
        ("batch", BatchNorm),
    ],
)
def test_factory_picks_torch_modules_where_they_compute_what_the_paper_says(kind, expected):
    assert isinstance(make_norm(NormConfig(kind=NormKind(kind)), 4), expected)


def test_layer_norm_statistics_are_per_case_at_batch_size_1_and_4():
    ln = make_norm(NormConfig(kind=NormKind.layer, eps=0.0), 6)
    a = torch.randn(4, 6) * 5 + 2
    out = ln(a).detach()
    torch.testing.assert_close(out.mean(-1), torch.zeros(4), atol=1e-5, rtol=0)
    torch.testing.assert_close(out.var(-1, unbiased=False), torch.ones(4), atol=1e-4, rtol=0)
    torch.testing.assert_close(ln(a[2:3]).detach(), out[2:3])  # a case's output ignores its batch


def test_batch_norm_statistics_at_batch_size_4():
    bn = BatchNorm(6, eps=0.0)
    a = torch.randn(4, 6) * 5 + 2
    out = bn(a).detach()
    torch.testing.assert_close(out.mean(0), torch.zeros(6), atol=1e-5, rtol=0)
    torch.testing.assert_close(out.var(0, unbiased=False), torch.ones(6), atol=1e-4, rtol=0)
    unbiased = BatchNorm(6, eps=0.0, unbiased=True)(a).detach()
    torch.testing.assert_close(unbiased.var(0, unbiased=True), torch.ones(6), atol=1e-4, rtol=0)


def test_weight_norm_uses_torch_parametrization_and_data_init_standardizes_the_first_batch():
    torch.manual_seed(2)
    cfg = NormConfig(kind=NormKind.weight, data_init=True)
    net = torch.nn.Sequential(make_linear(cfg, 10, 7), torch.nn.ReLU(), make_linear(cfg, 7, 3))
    assert hasattr(net[0], "parametrizations")
    x = torch.randn(64, 10) * 4 + 1
    assert weight_norm_data_init(net, x) == 2
    pre = net[0](x).detach()
    torch.testing.assert_close(pre.mean(0), torch.zeros(7), atol=1e-5, rtol=0)
    torch.testing.assert_close(pre.std(0, unbiased=False), torch.ones(7), atol=1e-4, rtol=0)
    pre2 = net[2](net[1](net[0](x))).detach()
    torch.testing.assert_close(pre2.std(0, unbiased=False), torch.ones(3), atol=1e-4, rtol=0)
