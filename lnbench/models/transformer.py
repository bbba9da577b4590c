"""A small decoder-only Transformer (causal self-attention), with pre- or post-placement of its normalizers.

Post-LN (Vaswani et al. 2017) normalizes after each residual addition: x = N(x + f(x)). Pre-LN normalizes
each sublayer's input and adds a final normalizer before the head: x = x + f(N(x)). Xiong et al. (2020)
show that post-LN's gradients near the output are large at initialisation, so it needs a learning-rate
warmup, and pre-LN does not. Attention is torch's F.scaled_dot_product_attention (causal); positions are
sinusoidal, so any test length works; the normalizer is any registered one (lnbench.nn.normalizers.Normalizer).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lnbench.config.choices import Placement
from lnbench.data.base import DataSpec
from lnbench.errors import ConfigError
from lnbench.models.mlp import check_compatible
from lnbench.nn.norm import NormConfig, as_norm_config, normalizer


class Norm(nn.Module):
    """A registered normalizer over the last dim of (B, T, D): the positions join the batch, so a batch-
    statistics kind averages over every token of the batch. (In causal training that lets a token's
    normalization see later tokens of other positions; its evaluation uses running averages.)"""

    def __init__(self, cfg: NormConfig, width: int):
        super().__init__()
        self.nz = normalizer(cfg.kind)
        self.norm = self.nz.module(cfg, width, bias=True)

    def forward(self, x: Tensor) -> Tensor:
        return self.nz.apply(self.norm, x.reshape(-1, x.shape[-1])).view_as(x)


class Block(nn.Module):
    def __init__(self, width: int, heads: int, ff_size: int, norm: NormConfig, placement: Placement):
        super().__init__()
        nz = normalizer(norm.kind)
        self.heads, self.pre = heads, placement is Placement.pre
        self.qkv, self.out = nz.linear(norm, width, 3 * width), nz.linear(norm, width, width)
        self.ff = nn.Sequential(nz.linear(norm, width, ff_size), nn.GELU(), nz.linear(norm, ff_size, width))
        self.norm_attn, self.norm_ff = Norm(norm, width), Norm(norm, width)

    def attend(self, x: Tensor) -> Tensor:
        B, T, D = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(B, T, D))

    def forward(self, x: Tensor) -> Tensor:
        if self.pre:
            x = x + self.attend(self.norm_attn(x))
            return x + self.ff(self.norm_ff(x))
        x = self.norm_attn(x + self.attend(x))
        return self.norm_ff(x + self.ff(x))


class Transformer(nn.Module):
    """Embedding (tokens) or a Linear (features) + sinusoidal positions -> blocks -> head; the head reads
    every position for tagging (language modelling), the last one for classification and regression."""

    accepts = "sequence"

    def __init__(
        self,
        spec: DataSpec,
        hidden_size: int = 128,
        num_layers: int = 2,
        num_heads: int = 4,
        ff_size: int = 512,
        placement: Placement | str = Placement.pre,
        norm: NormConfig | None = None,
    ):
        super().__init__()
        check_compatible(self, spec)
        if hidden_size % num_heads:
            raise ConfigError(
                f"model.hidden_size={hidden_size} is not allowed with model.num_heads={num_heads}: the width "
                f"must split evenly into the heads (a multiple of {num_heads})."
            )
        self.spec, self.norm, self.placement = (
            spec,
            as_norm_config(norm),
            Placement(getattr(placement, "value", placement)),
        )
        self.embed = (
            nn.Embedding(spec.vocab_size, hidden_size) if spec.vocab_size else nn.Linear(spec.input_size, hidden_size)
        )
        self.blocks = nn.Sequential(
            *(Block(hidden_size, num_heads, ff_size, self.norm, self.placement) for _ in range(num_layers))
        )
        self.final = Norm(self.norm, hidden_size) if self.placement is Placement.pre else nn.Identity()
        self.head = nn.Linear(hidden_size, spec.num_outputs)

    def positions(self, T: int, like: Tensor) -> Tensor:
        D = like.shape[-1]
        pos = torch.arange(T, device=like.device, dtype=like.dtype).unsqueeze(1)
        freq = torch.exp(torch.arange(0, D, 2, device=like.device, dtype=like.dtype) * (-math.log(10000.0) / D))
        pe = like.new_zeros(T, D)
        pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * freq), torch.cos(pos * freq[: D // 2])
        return pe

    def forward(self, x: Tensor) -> Tensor:
        h = self.embed(x)
        h = self.final(self.blocks(h + self.positions(h.shape[1], h)))
        if self.spec.task == "tagging":
            return self.head(h)
        out = self.head(h[:, -1])
        return out.squeeze(-1) if self.spec.task == "regress" else out
