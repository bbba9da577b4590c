"""The feed-forward model of the paper's section 6.6: hidden layers normalized before the ReLU."""

from __future__ import annotations

from torch import Tensor, nn

from lnbench.data.base import DataSpec
from lnbench.errors import ConfigError
from lnbench.nn.norm import NormConfig, as_norm_config, make_linear, make_norm


class MLP(nn.Module):
    """input -> [Linear -> norm -> ReLU] x len(hidden_sizes) -> Linear (the logits) [-> norm if norm.norm_logits]."""

    accepts = "flat"

    def __init__(self, spec: DataSpec, hidden_sizes: list[int] = (1000, 1000), norm: NormConfig | None = None):
        super().__init__()
        check_compatible(self, spec)
        norm = as_norm_config(norm)
        layers: list[nn.Module] = []
        width = spec.input_size
        for h in hidden_sizes:
            layers += [make_linear(norm, width, h), make_norm(norm, h), nn.ReLU()]
            width = h
        self.body = nn.Sequential(*layers)
        if norm.norm_logits:
            self.head = nn.Sequential(make_linear(norm, width, spec.num_outputs), make_norm(norm, spec.num_outputs))
        else:
            self.head = nn.Linear(width, spec.num_outputs)
        self.norm = norm

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.body(x))


def check_compatible(model: nn.Module, spec: DataSpec) -> None:
    if spec.kind != model.accepts:
        from lnbench.config.schema import presets_of_kind  # noqa: PLC0415 (Hydra's config store: error path only)

        models, datasets = (
            presets_of_kind("model", "accepts", spec.kind),
            presets_of_kind("dataset", "kind", model.accepts),
        )
        raise ConfigError(
            f"model {type(model).__name__} takes {model.accepts} inputs but the dataset gives {spec.kind} "
            f"ones: pick a {spec.kind} model ({', '.join(models)}) "
            f"or a {model.accepts} dataset ({', '.join(datasets)})."
        )
