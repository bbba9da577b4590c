"""What the CUDA tests share: the marker that deselects them by default and skips them without a GPU, every model
preset with a tiny size per kind of input, and data (a fake MNIST in torchvision's layout) that a GPU machine
without lnbench's data can train on. Run them on a GPU with `pytest -m cuda tests/cuda` (scripts/gpu/run.sh)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from conftest import compose_train

from lnbench.config.schema import presets_of_kind
from tests.data.test_data import make_mnist

# "cpu": these tests' own code run on the CPU, to try them where there is no GPU (scripts/gpu/run.sh --dry-run); the
# assertions about the GPU itself (its name, cuDNN, Triton) are then left out.
DEVICE = os.environ.get("LNBENCH_CUDA_TESTS_DEVICE", "cuda")
ON_GPU = DEVICE == "cuda"
REQUIRES_CUDA = [
    pytest.mark.cuda,
    pytest.mark.skipif(
        ON_GPU and not torch.cuda.is_available(),
        reason="no CUDA device here (CI has none): `pytest -m cuda tests/cuda` on a GPU machine (scripts/gpu/run.sh)",
    ),
]
# Each preset's dataset, and what makes its run take a moment: every model preset of conf/model, read from there
DATASET_OF_KIND = {"flat": "mnist", "sequence": "adding", "binary": "binarized_mnist"}
TINY_MODEL = {
    "sequence": ["model.hidden_size=16"],
    "binary": ["model.glimpses=3", "model.hidden_size=16", "model.latent_size=8"],
}
TINY_DATA = {
    "mnist": ["dataset.carve=[256,64,64]", "dataset.batch_size=32", "dataset.eval_batch_size=64"],
    "binarized_mnist": ["dataset.carve=[256,64,64]", "dataset.batch_size=16", "dataset.eval_batch_size=64"],
    "adding": ["dataset.seq_len=12", "dataset.val_size=32", "dataset.test_size=32", "dataset.batch_size=8"],
    "copy": ["dataset.seq_len=12", "dataset.copy_len=3", "dataset.val_size=32", "dataset.test_size=32"],
}


def presets() -> list[tuple[str, str]]:
    """(model preset, its kind of input) for every model preset."""
    return [(m, kind) for kind in DATASET_OF_KIND for m in presets_of_kind("model", "accepts", kind)]


def mlp_sized(model: str) -> list[str]:
    return ["model.hidden_sizes=[32,32]"] if "mlp" in model else []


def fake_data(tmp_path_factory) -> Path:
    """A data folder with a fake MNIST (random pixels, the 10k split only): lnbench carves its splits from it."""
    return make_mnist(tmp_path_factory.mktemp("data"), n_test=400)


def tiny_cuda(model: str, kind: str, data_dir: Path, *extra: str, dataset: str | None = None):
    """The composed config of a few steps of `model` on CUDA (DEVICE), on its kind's dataset (or `dataset`)."""
    dataset = dataset or DATASET_OF_KIND[kind]
    data = [f"dataset.data_dir={data_dir}"] if "mnist" in dataset else []
    sized = TINY_MODEL.get(kind, []) + mlp_sized(model)
    return compose_train(
        [
            f"model={model}",
            f"dataset={dataset}",
            *TINY_DATA[dataset],
            *data,
            *sized,
            f"device={DEVICE}",
            "logger=none",
            *extra,
        ]
    )


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """|got - want| / |want| (norms, in float64 on the CPU): float32 arithmetic lands far under 1e-4 here."""
    got, want = got.detach().double().cpu(), want.detach().double().cpu()
    return float((got - want).norm() / want.norm().clamp_min(1e-30))
