"""Recurrent models: an input layer, 1..N recurrent layers of one cell type, a task head."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from torch import Tensor, nn

from lnbench.config.choices import Impl
from lnbench.data.base import DataSpec
from lnbench.errors import ConfigError
from lnbench.models.mlp import check_compatible
from lnbench.nn.fast.kernel_path import KernelPath
from lnbench.nn.fast.layers import fast_layer, layer_path
from lnbench.nn.norm import NormConfig, as_norm_config
from lnbench.nn.rnn import CELLS, RecurrentLayer


class SequenceModel(nn.Module):
    """Embedding (token inputs) or raw features -> recurrent layers -> head.

    The head reads the last step for classification and regression, every step for tagging
    (language modelling, the copy task). Inputs are batch-first (B, T[, F]); layers run time-major.
    """

    accepts = "sequence"

    def __init__(
        self,
        spec: DataSpec,
        cell: str = "lstm",
        hidden_size: int = 128,
        num_layers: int = 1,
        embed_size: int | None = None,
        norm: NormConfig | None = None,
        impl: Impl | str = Impl.auto,
    ):
        super().__init__()
        check_compatible(self, spec)
        norm = as_norm_config(norm)
        cell = getattr(cell, "value", cell)
        self.spec, self.norm, self.impl, self.cell_kind = spec, norm, Impl(impl), cell
        if spec.vocab_size:
            self.embed = nn.Embedding(spec.vocab_size, embed_size or hidden_size)
            width = self.embed.embedding_dim
        else:
            self.embed = None
            width = spec.input_size
        self.cells = nn.ModuleList()
        for _ in range(num_layers):
            self.cells.append(CELLS[cell](width, hidden_size, norm, time_steps=spec.seq_len))
            width = hidden_size
        self.head = nn.Linear(hidden_size, spec.num_outputs)
        self.layers = [self._runner(c) for c in self.cells]  # plain list: the cells own the parameters

    def _runner(self, cell: nn.Module):
        if self.impl is Impl.reference:
            return RecurrentLayer(cell)
        fast = fast_layer(cell, use_native=self.impl is not Impl.torch)
        if fast is None and self.impl is Impl.fast:
            raise ConfigError(
                f"model.impl=fast is not available for {self.cell_kind} "
                f"with norm={getattr(self.norm.kind, 'value', self.norm.kind)}: "
                "use model.impl=auto or model.impl=reference."
            )
        return fast or RecurrentLayer(cell)

    @property
    def kernel_paths(self) -> list[KernelPath]:
        """What runs the recurrence of each layer, once each (their rounding differs in the last bits)."""
        p = next(self.parameters())
        return list(dict.fromkeys(layer_path(layer, p) for layer in self.layers))

    @property
    def kernels(self) -> str:
        """`kernel_paths` as the run's provenance and checkpoint name them."""
        return ", ".join(str(path) for path in self.kernel_paths)

    @contextmanager
    def reference_path(self) -> Iterator[None]:
        """The plain per-step loop over the cells for the block, whatever `impl` chose: hooks on the cells'
        Linear layers (weight norm's data-dependent init) fire there, never inside a fused kernel."""
        chosen = self.layers
        self.layers = [RecurrentLayer(c) for c in self.cells]
        try:
            yield
        finally:
            self.layers = chosen

    def forward(self, x: Tensor) -> Tensor:
        h = self.embed(x) if self.embed is not None else x
        h = h.transpose(0, 1)  # (T, B, F)
        for layer in self.layers:
            h, _ = layer(h)
        if self.spec.task == "tagging":
            return self.head(h).transpose(0, 1)  # (B, T, C)
        out = self.head(h[-1])
        return out.squeeze(-1) if self.spec.task == "regress" else out
