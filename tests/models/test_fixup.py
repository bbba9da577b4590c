"""The ResNet family and Fixup (Zhang et al. 2019, the slides): the variance growth Fixup addresses, its three
initialisation rules as the paper states them, a few training steps, errors, the preset."""

import math

import pytest
import torch
from conftest import compose_train, needs_data

from lnbench.data.base import DataSpec
from lnbench.errors import ConfigError
from lnbench.models.resnet import Block, FixupBlock, ResNet, fixup_scale
from lnbench.training.recipe import train
from tests.models.test_conv import assert_trains

SPEC = DataSpec(kind="flat", task="classify", num_outputs=10, input_size=784)


def feature_variance(depth: int, **kw) -> float:
    """Var[x_L] as the slides define it: the sum over coordinates of the variance (here over 64 inputs)."""
    torch.manual_seed(0)
    model = ResNet(SPEC, depth=depth, width=16, **kw).train()
    with torch.no_grad():
        return model.features(torch.randn(64, 784)).var(0).sum().item()


def test_without_normalization_the_variance_grows_exponentially_with_depth():
    """The slides: Var[x_{l+1}] ~ 2 Var[x_l] under He et al.'s init, exponential in depth; with BN in the
    branches each block adds a bounded amount instead (linear growth)."""
    plain = {d: feature_variance(d, norm={"kind": "none"}) for d in (4, 8, 16)}
    bn = {d: feature_variance(d, norm={"kind": "batch"}) for d in (4, 8, 16)}
    per_block = (plain[16] / plain[8]) ** (1 / 8)
    assert 1.4 < per_block < 2.5, plain  # about doubling per block (ReLU after the sum takes a little off)
    assert plain[16] / plain[8] > 20 and plain[8] / plain[4] > 4
    assert bn[16] / bn[8] < 3 and bn[8] / bn[4] < 3, bn  # linear: twice the blocks, about twice the variance


@pytest.mark.parametrize("depth,m", [(16, 2), (9, 3)])
def test_fixup_initialises_by_the_papers_three_rules(depth, m):
    torch.manual_seed(0)
    width = 32  # 9216 weights per conv: the sample deviation is within 2% of the drawn one
    model = ResNet(SPEC, depth=depth, width=width, branch_layers=m, fixup=True, norm={"kind": "none"})
    # rule 1: the classification layer and the last layer of each residual branch start at 0
    assert not model.head.weight.any() and not model.head.bias.any()
    # rule 2: the other branch layers are He et al.'s scaled by L^(-1/(2m-2))
    assert (
        fixup_scale(depth, m) == pytest.approx(depth ** (-1 / (2 * m - 2))) == pytest.approx({2: 0.25, 3: 9**-0.25}[m])
    )
    he = math.sqrt(2 / (width * 9))
    for block in model.blocks:
        assert isinstance(block, FixupBlock) and len(block.convs) == m and not block.convs[-1].weight.any()
        for conv in block.convs[:-1]:
            assert conv.weight.std().item() == pytest.approx(he * fixup_scale(depth, m), rel=0.03)
    assert model.stem.weight.std().item() == pytest.approx(
        math.sqrt(2 / (width * 9)), rel=0.15
    )  # not scaled: outside the branches
    # rule 3: scalar biases (0) before each conv and activation, a scalar multiplier (1) per branch; no normalizer,
    # no other bias
    for block in model.blocks:
        assert block.scale.shape == () and block.scale.item() == 1.0
        assert (
            block.bias_in.shape == (m,)
            and block.bias_out.shape == (m,)
            and not block.bias_in.any()
            and not block.bias_out.any()
        )
        assert all(conv.bias is None for conv in block.convs)
    assert model.stem.bias is None and model.bias_stem.item() == 0 and model.bias_head.item() == 0
    assert not any(isinstance(mod, (torch.nn.BatchNorm2d, torch.nn.GroupNorm)) for mod in model.modules())


def test_at_init_every_fixup_block_is_the_identity_and_the_logits_are_zero():
    torch.manual_seed(0)
    model = ResNet(SPEC, depth=8, width=8, fixup=True, norm={"kind": "none"})
    x = torch.randn(5, 784)
    stem = model.pool(torch.relu(model.stem(x.view(5, 1, 28, 28))))
    torch.testing.assert_close(model.features(x), stem, rtol=0, atol=0)
    assert not model(x).any()  # so the initial loss is exactly ln 10, at any depth


@pytest.mark.parametrize("kind,fixup", [("batch", False), ("none", False), ("none", True), ("layer", False)])
def test_every_resnet_variant_trains_a_few_steps(kind, fixup):
    torch.manual_seed(0)
    model = ResNet(SPEC, depth=2, width=4, fixup=fixup, norm={"kind": kind})
    assert all(isinstance(b, FixupBlock if fixup else Block) for b in model.blocks)
    assert_trains(model, cases=20, steps=40)  # the zero-initialised layers too


def test_fixup_with_a_normalizer_and_bad_sizes_are_refused():
    with pytest.raises(ConfigError, match="model.fixup=true is not allowed with model.norm.kind=batch"):
        ResNet(SPEC, fixup=True, norm={"kind": "batch"})
    with pytest.raises(ConfigError, match="model.branch_layers=1 is not allowed for ResNet"):
        ResNet(SPEC, branch_layers=1)


def test_the_fixup_preset_compares_bn_he_init_and_fixup():
    cfg = compose_train(["+experiment=fixup_resnet"])
    assert cfg.model.fixup is True and cfg.model.norm.kind == "none" and cfg.model.depth == 16
    assert all("Fixup" in c["text"] for c in cfg.claims)
    assert compose_train(["model=resnet", "dataset=mnist"]).model.fixup is False


@needs_data
def test_the_fixup_preset_trains_through_smoke(tmp_path):
    cfg = compose_train(["+experiment=[fixup_resnet,smoke]", "dataset.carve=[256,64,64]", "dataset.batch_size=32"])
    assert train(cfg, tmp_path)["status"] == "completed"
