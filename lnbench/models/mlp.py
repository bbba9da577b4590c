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


def presets_taking(kind: str) -> list[str]:
    """The model presets (conf/model) whose model class takes `kind` inputs."""
    from hydra.utils import get_class

    from lnbench.config import SCHEMAS, model_presets

    bases = [n for n, schema in SCHEMAS["model"].items() if get_class(schema._target_).accepts == kind]
    return model_presets(*bases)


def check_compatible(model: nn.Module, spec: DataSpec) -> None:
    if spec.kind != model.accepts:
        other = ", ".join(presets_taking(spec.kind))
        raise ConfigError(
            f"model {type(model).__name__} takes {model.accepts} inputs but the dataset gives {spec.kind} "
            f"ones: pick a {spec.kind} model ({other}) or a {model.accepts} dataset "
            f"({'mnist' if model.accepts == 'flat' else 'seq_mnist, adding, copy, shakespeare'})."
        )
