"""The convolutional family (section 6.7): LN of a conv layer as the paper defines it, checked against a transcription;
group norm; shapes, biases, errors, a few training steps and the preset."""

import pytest
import torch
from conftest import compose_train, needs_data

from lnbench.data.base import DataSpec
from lnbench.errors import ConfigError
from lnbench.models.conv import ConvNet
from lnbench.nn.norm import GroupNorm, NormConfig, normalizer
from lnbench.training.recipe import train

MNIST_SPEC = DataSpec(kind="flat", task="classify", num_outputs=10, input_size=784)


def paper_conv_ln(a: torch.Tensor, gain: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    """Eq. 3 over every summed input of the layer for one case: a (B, C, H, W); mu and sigma over C x H x W;
    then a gain and a bias per channel (the spec's definition for a conv layer)."""
    B = a.shape[0]
    flat = a.reshape(B, -1)
    n = flat.shape[1]
    mu = flat.sum(1) / n
    sigma = torch.sqrt(((flat - mu[:, None]) ** 2).sum(1) / n + eps)
    normed = (a - mu.view(B, 1, 1, 1)) / sigma.view(B, 1, 1, 1)
    return gain.view(1, -1, 1, 1) * normed + bias.view(1, -1, 1, 1)


@pytest.mark.usefixtures("float64")
def test_conv_layer_norm_is_the_papers_definition():
    torch.manual_seed(0)
    ln = normalizer("layer").conv_module(NormConfig(kind="layer"), 6)
    with torch.no_grad():
        ln.weight.uniform_(0.5, 1.5)
        ln.bias.uniform_(-0.5, 0.5)
    a = torch.randn(4, 6, 5, 5) * 3 + torch.arange(6.0).view(1, 6, 1, 1)  # channels with different means
    torch.testing.assert_close(ln(a), paper_conv_ln(a, ln.weight, ln.bias, ln.eps), rtol=0, atol=1e-12)
    # per case: blind to the other cases, and invariant to re-scaling one case's summed inputs (Table 1; exactly so
    # without the eps inside the square root)
    torch.testing.assert_close(ln(a[:1]), ln(a)[:1], rtol=0, atol=1e-12)
    exact = normalizer("layer").conv_module(NormConfig(kind="layer", eps=0.0), 6)
    scaled = a.clone()
    scaled[1] *= 7.0
    torch.testing.assert_close(exact(scaled)[1], exact(a)[1], rtol=0, atol=1e-12)


@pytest.mark.usefixtures("float64")
def test_the_conv_nets_layers_normalize_with_the_papers_ln():
    torch.manual_seed(0)
    model = ConvNet(MNIST_SPEC, channels=[4, 8], norm={"kind": "layer"}).train()
    conv, ln = model.body[0], model.body[1]
    assert conv.bias is None  # LN re-centers; its per-channel bias takes the conv's place
    x = torch.randn(3, 784)
    a = conv(x.view(3, 1, 28, 28))
    torch.testing.assert_close(ln(a), paper_conv_ln(a, ln.weight, ln.bias, ln.eps), rtol=0, atol=1e-12)


@pytest.mark.usefixtures("float64")
def test_group_norm_with_one_group_is_layer_norm_and_splits_the_units_otherwise():
    a = torch.randn(3, 5, 8)
    one = GroupNorm(8, 1)
    torch.testing.assert_close(one(a), torch.nn.functional.layer_norm(a, (8,), eps=1e-5), rtol=0, atol=1e-12)
    four = GroupNorm(8, 4)
    halves = a.view(3, 5, 4, 2)
    want = (halves - halves.mean(-1, keepdim=True)) / torch.sqrt(halves.var(-1, unbiased=False, keepdim=True) + 1e-5)
    torch.testing.assert_close(four(a), want.view(3, 5, 8), rtol=0, atol=1e-12)
    with pytest.raises(ConfigError, match=r"model.norm.groups=3 is not allowed here: .* dividing 8"):
        normalizer("group").module(NormConfig(kind="group", groups=3), 8)


def assert_trains(model: torch.nn.Module, cases: int, steps: int) -> None:
    """A few Adam steps on noisy class prototypes lower the loss, and every parameter gets a gradient."""
    y = torch.arange(cases) % 10
    x = torch.randn(10, 784)[y] + 0.5 * torch.randn(cases, 784)
    opt = torch.optim.Adam(model.parameters(), 3e-3)
    losses = []
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert model(x).shape == (cases, 10) and losses[-1] < 0.8 * losses[0]
    assert all(p.grad is not None and p.grad.any() for p in model.parameters())


@pytest.mark.parametrize("kind", ["none", "batch", "layer", "group"])
def test_every_conv_normalizer_trains_a_few_steps(kind):
    torch.manual_seed(0)
    model = ConvNet(MNIST_SPEC, channels=[8, 8], norm={"kind": kind, "groups": 4})
    assert (model.body[0].bias is not None) == (kind == "none")
    assert_trains(model, cases=32, steps=15)


@pytest.mark.parametrize(
    "norm,match",
    [
        ({"kind": "weight"}, "model.norm.kind=weight is not allowed for a convolutional model"),
        ({"kind": "rms"}, "model.norm.kind=rms is not allowed for a convolutional model"),
        (
            {"kind": "batch", "unbiased_var": True},
            "model.norm.unbiased_var=true is not allowed for a convolutional model",
        ),
        ({"kind": "group", "groups": 5}, "model.norm.groups=5 is not allowed"),
    ],
)
def test_normalizers_without_a_conv_form_are_refused(norm, match):
    with pytest.raises(ConfigError, match=match):
        ConvNet(MNIST_SPEC, channels=[8, 8], norm=norm)


def test_non_square_inputs_and_too_many_layers_are_refused():
    with pytest.raises(ConfigError, match="needs square images"):
        ConvNet(DataSpec(kind="flat", task="classify", num_outputs=10, input_size=20))
    with pytest.raises(ConfigError, match=r"model.channels=\[4, 4, 4, 4, 4, 4\] is not allowed for 28 x 28 images"):
        ConvNet(MNIST_SPEC, channels=[4] * 6)


def test_the_conv_preset_declares_the_papers_two_claims():
    cfg = compose_train(["+experiment=conv_mnist"])
    claims = {c["id"]: c for c in cfg.claims}
    assert all("6.7" in c["text"] for c in claims.values() if not c["text"].startswith("Not a paper claim"))
    assert (claims["conv.ln_faster_than_none"]["better"], claims["conv.ln_faster_than_none"]["than"]) == (
        "ln_cnn",
        "cnn",
    )
    assert (claims["conv.bn_beats_ln"]["better"], claims["conv.bn_beats_ln"]["than"]) == ("bn_cnn", "ln_cnn")


@needs_data
def test_the_conv_preset_trains_through_smoke(tmp_path):
    cfg = compose_train(["+experiment=[conv_mnist,smoke]", "dataset.carve=[256,64,64]", "dataset.batch_size=32"])
    summary = train(cfg, tmp_path)
    assert summary["status"] == "completed" and summary["steps"] == cfg.steps and summary["primary_metric"] == "error"
