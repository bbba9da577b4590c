"""A residual network on square images given flat (MNIST), with a normalizer in each branch, or none, or Fixup.

Zhang, Dauphin & Ma (2019; the slides' "FixUp"): without normalization, x_{l+1} = x_l + F_l(x_l) under He et al.'s
initialisation doubles the output variance at every block, so it grows exponentially with depth. Fixup trains the
network with no normalization at all by its initialisation, the paper's three rules:

1. the classification layer and the last layer of each residual branch start at 0;
2. every other layer starts as He et al.'s, and the weight layers inside the L residual branches (m layers each)
   are scaled by L^(-1/(2m-2));
3. a scalar multiplier (starting at 1) in every branch, and a scalar bias (starting at 0) before each
   convolution, linear layer and element-wise activation.

Layout: stem (3x3 conv of stride 2, norm, ReLU, max-pool by `stem_pool`) -> `depth` blocks of `width` channels, each
ReLU(x + branch(x)) with `branch_layers` 3x3 convs (norm after each, ReLU between) -> global average pool -> Linear.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from lnbench.data.base import DataSpec
from lnbench.errors import ConfigError
from lnbench.models.conv import conv_norm, image_side
from lnbench.models.mlp import check_compatible
from lnbench.nn.norm import NormConfig, as_norm_config, normalizer


def he_init(conv: nn.Conv2d, scale: float = 1.0) -> None:
    """He et al. (2015): N(0, 2 / fan_out) for a conv followed by ReLU (torchvision's ResNets), times `scale`."""
    fan_out = conv.out_channels * conv.kernel_size[0] * conv.kernel_size[1]
    nn.init.normal_(conv.weight, 0.0, (2.0 / fan_out) ** 0.5 * scale)
    if conv.bias is not None:
        nn.init.zeros_(conv.bias)


def fixup_scale(blocks: int, branch_layers: int) -> float:
    """Fixup's rule 2: L^(-1/(2m-2)) for L residual branches of m layers."""
    return blocks ** (-1.0 / (2 * branch_layers - 2))


class Block(nn.Module):
    """ReLU(x + branch(x)), branch = [conv -> norm -> ReLU] x (m - 1) -> conv -> norm."""

    def __init__(self, width: int, branch_layers: int, norm: NormConfig):
        super().__init__()
        layers: list[nn.Module] = []
        for j in range(branch_layers):
            conv, nrm = conv_norm(norm, width, width)
            he_init(conv)
            layers += [conv, nrm] + ([nn.ReLU()] if j < branch_layers - 1 else [])
        self.branch = nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        return torch.relu(x + self.branch(x))


class FixupBlock(nn.Module):
    """ReLU(x + scale * branch(x) + b), a scalar bias before each conv and each ReLU (rules 1-3)."""

    def __init__(self, width: int, branch_layers: int, scale: float):
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv2d(width, width, 3, padding=1, bias=False) for _ in range(branch_layers))
        for conv in self.convs[:-1]:
            he_init(conv, scale)
        nn.init.zeros_(self.convs[-1].weight)
        self.bias_in = nn.Parameter(torch.zeros(branch_layers))  # before each conv
        self.bias_out = nn.Parameter(torch.zeros(branch_layers))  # before each ReLU (the last: the block's own)
        self.scale = nn.Parameter(torch.ones(()))

    def forward(self, x: Tensor) -> Tensor:
        out = x
        for j, conv in enumerate(self.convs):
            out = conv(out + self.bias_in[j])
            if j < len(self.convs) - 1:
                out = torch.relu(out + self.bias_out[j])
        return torch.relu(x + out * self.scale + self.bias_out[-1])


class ResNet(nn.Module):
    """stem -> blocks (Block with a normalizer or none, FixupBlock with `fixup`) -> average pool -> Linear (the
    logits)."""

    accepts = "flat"

    def __init__(
        self,
        spec: DataSpec,
        depth: int = 16,
        width: int = 16,
        branch_layers: int = 2,
        stem_pool: int = 2,
        fixup: bool = False,
        norm: NormConfig | None = None,
    ):
        super().__init__()
        check_compatible(self, spec)
        norm = as_norm_config(norm)
        for key, value, low in (
            ("depth", depth, 1),
            ("width", width, 1),
            ("branch_layers", branch_layers, 2),
            ("stem_pool", stem_pool, 1),
        ):
            if value < low:
                raise ConfigError(f"model.{key}={value} is not allowed for ResNet: it must be an integer >= {low}.")
        nz = normalizer(norm.kind)
        if fixup and (nz.activations or not nz.linear_bias):
            raise ConfigError(
                f"model.fixup=true is not allowed with model.norm.kind={nz.name}: Fixup replaces normalization "
                "(Zhang et al. 2019). Use model.norm.kind=none with it, or model.fixup=false."
            )
        self.side, self.norm, self.fixup = image_side(spec, "ResNet"), norm, fixup
        maps = (self.side + 1) // 2  # the stride-2 stem's output side
        if stem_pool > maps:
            raise ConfigError(
                f"model.stem_pool={stem_pool} is not allowed for {self.side} x {self.side} images: the stem leaves "
                f"{maps} x {maps} maps, which a pooling window of {stem_pool} would leave empty; use at most {maps}."
            )
        if fixup:  # no normalizer and no bias in the conv: a scalar bias before the ReLU instead (rule 3)
            self.stem, self.stem_norm = nn.Conv2d(1, width, 3, stride=2, padding=1, bias=False), nn.Identity()
            scale = fixup_scale(depth, branch_layers)
            self.blocks = nn.Sequential(*(FixupBlock(width, branch_layers, scale) for _ in range(depth)))
        else:
            self.stem, self.stem_norm = conv_norm(norm, 1, width, stride=2)
            self.blocks = nn.Sequential(*(Block(width, branch_layers, norm) for _ in range(depth)))
        he_init(self.stem)
        self.pool = nn.MaxPool2d(stem_pool) if stem_pool > 1 else nn.Identity()
        self.bias_stem = nn.Parameter(torch.zeros(())) if fixup else None
        self.bias_head = nn.Parameter(torch.zeros(())) if fixup else None
        self.head = nn.Linear(width, spec.num_outputs)
        if fixup:  # rule 1: the classification layer starts at 0
            nn.init.zeros_(self.head.weight)
            nn.init.zeros_(self.head.bias)

    def features(self, x: Tensor) -> Tensor:
        """The last block's output (B, width, h, w): what grows with depth without normalization."""
        h = self.stem_norm(self.stem(x.view(len(x), 1, self.side, self.side)))
        h = torch.relu(h + self.bias_stem if self.bias_stem is not None else h)
        return self.blocks(self.pool(h))

    def forward(self, x: Tensor) -> Tensor:
        h = self.features(x).mean((2, 3))
        return self.head(h + self.bias_head if self.bias_head is not None else h)
