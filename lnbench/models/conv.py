"""A small convolutional network for the paper's section 6.7, on square images given as flat vectors (MNIST).

Each conv layer's summed inputs (B, C, H, W) go through the registered normalizer's convolutional form
(`Normalizer.conv_module`): for layer norm the paper's definition, one mean and variance over all C x H x W
summed inputs of a case, with a gain and bias per channel; batch norm's statistics are per channel over
batch x height x width; group norm's (Wu & He 2018) per case over each group of channels. A conv layer keeps its
own bias only where its normalizer does not re-center (the kind's `linear_bias` trait), as the MLP's Linears do.
"""

from __future__ import annotations

import math
from typing import Sequence

from torch import Tensor, nn

from lnbench.data.base import DataSpec
from lnbench.errors import ConfigError
from lnbench.models.mlp import check_compatible
from lnbench.nn.norm import NormConfig, as_norm_config, normalizer


def image_side(spec: DataSpec, model: str) -> int:
    """The side of the square images a flat input of `spec.input_size` pixels holds."""
    side = math.isqrt(spec.input_size)
    if side * side != spec.input_size or side < 2:
        raise ConfigError(
            f"{model} needs square images, and the dataset's inputs have {spec.input_size} values, "
            f"not a square number of pixels: use an image dataset (e.g. MNIST's 784 = 28 x 28)."
        )
    return side


def conv_norm(norm: NormConfig, cin: int, cout: int, stride: int = 1) -> tuple[nn.Conv2d, nn.Module]:
    """A 3 x 3 'same' convolution and the normalizer of its summed inputs."""
    nz = normalizer(norm.kind)
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=nz.linear_bias), nz.conv_module(norm, cout)


class ConvNet(nn.Module):
    """image -> [conv 3x3 -> norm -> ReLU -> max-pool 2] per entry of `channels` -> Linear (the logits, never
    normalized)."""

    accepts = "flat"

    def __init__(self, spec: DataSpec, channels: Sequence[int] = (16, 32), norm: NormConfig | None = None):
        super().__init__()
        check_compatible(self, spec)
        norm = as_norm_config(norm)
        side = image_side(spec, "a convolutional model")
        if not channels or any(c < 1 for c in channels):
            raise ConfigError(f"model.channels={list(channels)} is not allowed: give one integer >= 1 per conv layer.")
        if side >> len(channels) < 1:
            raise ConfigError(
                f"model.channels={list(channels)} is not allowed for {side} x {side} images: each conv layer "
                f"halves the image, so at most {side.bit_length() - 1} layers fit."
            )
        layers: list[nn.Module] = []
        width = 1
        for c in channels:
            conv, nrm = conv_norm(norm, width, c)
            layers += [conv, nrm, nn.ReLU(), nn.MaxPool2d(2)]
            width, side = c, side // 2
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(width * side * side, spec.num_outputs)
        self.norm, self.side = norm, image_side(spec, "a convolutional model")

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.body(x.view(len(x), 1, self.side, self.side)).flatten(1))
