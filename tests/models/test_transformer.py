"""The Transformer family: causal (no position sees a later one), pre/post placement as written in
Xiong et al. (2020), every normalizer, the presets and the Xiong preset's claims."""

import pytest
import torch
from conftest import compose_train
from omegaconf import OmegaConf

from lnbench.data.base import DataSpec
from lnbench.errors import ConfigError
from lnbench.models.transformer import Transformer

LM = DataSpec(kind="sequence", task="tagging", num_outputs=7, vocab_size=7, bits=True, seq_len=10)
REGRESS = DataSpec(kind="sequence", task="regress", num_outputs=1, input_size=2, seq_len=10)


def small(placement="pre", kind="layer", spec=LM):
    torch.manual_seed(0)
    return (
        Transformer(
            spec, hidden_size=16, num_layers=2, num_heads=4, ff_size=32, placement=placement, norm={"kind": kind}
        )
        .double()
        .eval()
    )


@pytest.mark.parametrize("placement", ["pre", "post"])
@pytest.mark.parametrize("kind", ["none", "layer", "rms", "batch", "weight"])
def test_causal_a_later_token_never_changes_an_earlier_output(placement, kind):
    model = small(placement, kind)
    x = torch.randint(0, 7, (3, 10))
    y = x.clone()
    y[:, 6:] = (y[:, 6:] + 1) % 7
    a, b = model(x), model(y)
    assert a.shape == (3, 10, 7)
    torch.testing.assert_close(a[:, :6], b[:, :6], rtol=0, atol=1e-12)
    assert not torch.allclose(a[:, 6:], b[:, 6:])


def test_pre_and_post_placement_follow_their_equations():
    model = small("post")
    block, x = model.blocks[0], torch.randn(2, 5, 16, dtype=torch.float64)
    ln = torch.nn.functional.layer_norm
    h = ln(x + block.attend(x), (16,), block.norm_attn.norm.weight, block.norm_attn.norm.bias)
    want = ln(h + block.ff(h), (16,), block.norm_ff.norm.weight, block.norm_ff.norm.bias)
    torch.testing.assert_close(block(x), want)
    model = small("pre")
    block = model.blocks[0]
    h = x + block.attend(ln(x, (16,), block.norm_attn.norm.weight, block.norm_attn.norm.bias))
    want = h + block.ff(ln(h, (16,), block.norm_ff.norm.weight, block.norm_ff.norm.bias))
    torch.testing.assert_close(block(x), want)
    assert isinstance(model.final.norm, torch.nn.LayerNorm) and isinstance(small("post").final, torch.nn.Identity)


def test_feature_sequences_read_the_last_position():
    assert small(spec=REGRESS)(torch.randn(4, 10, 2, dtype=torch.float64)).shape == (4,)


def test_a_width_that_does_not_split_into_heads_is_refused():
    with pytest.raises(ConfigError, match=r"model.hidden_size=10 is not allowed with model.num_heads=4"):
        Transformer(LM, hidden_size=10, num_heads=4)


def test_the_xiong_preset_sweeps_placement_by_warmup_and_declares_its_claims():
    cfg = compose_train(["+experiment=xiong_warmup"])
    assert cfg.model.placement == "pre" and cfg.dataset._target_.endswith("Shakespeare")
    claims = OmegaConf.to_container(cfg.claims)
    assert {c["where"]["schedule.warmup_steps"] for c in claims} == {0, 100}
    assert all({c["better"], c["than"]} == {"preln_transformer", "postln_transformer"} for c in claims)
