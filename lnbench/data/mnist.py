"""MNIST from torchvision's IDX files, read with numpy only: flat (permutation-invariant) and as sequences.

Images are kept as uint8 and converted to float per batch, so the 60k training set costs 47 MB, not 188.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator, Literal, Sequence

import numpy as np
import torch
from torch import Tensor

from lnbench.data.base import (
    SPLIT_STREAM,
    Dataset,
    DataSpec,
    check_bool,
    check_int,
    check_split,
    epoch_permutation_batch,
    resolve_data_dir,
    step_generator,
)
from lnbench.data.mnist_files import HOW_TO_GET, PIXELS, check_carve, fetch, load_pair
from lnbench.errors import ConfigError, DataError

MEAN, STD = 0.1307, 0.3081


class MNIST(Dataset):
    """Permutation-invariant MNIST: x (B, 784) float32, y (B,) int64.

    With the 60k training files: train/val from a seeded permutation of them, test = the official 10k.
    With only the 10k test files: train/val/test carved from those 10k by seed (sizes `carve`).
    """

    name = "mnist"
    kind = "flat"

    def __init__(
        self,
        *,
        data_dir: str | None = None,
        batch_size: int,
        seed: int,
        eval_batch_size: int = 1000,
        val_size: int = 5000,
        download: bool = False,
        normalize: bool = True,
        carve: Sequence[int] = (8000, 1000, 1000),
        limit_train: int | None = None,
    ):
        w = self.name
        check_int("dataset.batch_size", batch_size, w)
        check_int("dataset.eval_batch_size", eval_batch_size, w)
        check_int("dataset.seed", seed, w, minimum=0)
        check_int("dataset.val_size", val_size, w)
        check_int("dataset.limit_train", limit_train, w, optional=True)
        check_bool("dataset.download", download, w)
        check_bool("dataset.normalize", normalize, w)
        self.carve = check_carve(carve, w)
        self._check_extra()
        self.batch_size, self.eval_batch_size, self.seed = batch_size, eval_batch_size, seed
        self.normalize = normalize

        self._splits, self.source = self._read_splits(resolve_data_dir(data_dir, w), download, val_size)
        if limit_train is not None:
            # The training split is already in seeded random order, so a prefix is a random subset.
            self._splits["train"] = tuple(a[:limit_train] for a in self._splits["train"])
        self.train_size = len(self._splits["train"][1])
        if self.train_size < batch_size:
            raise ConfigError(
                f"dataset.batch_size={batch_size} is not allowed for {w}: it must be at most the "
                f"{self.train_size} training images"
                + (f" (dataset.limit_train={limit_train})." if limit_train is not None else ".")
            )
        self.spec = self._spec()

    def _read_splits(self, root: Path, download: bool, val_size: int) -> tuple[dict, str]:
        """The train / val / test splits (images, labels), and where they came from."""
        w, raw_dir = self.name, root / "MNIST" / "raw"
        train, test = load_pair(raw_dir, "train"), load_pair(raw_dir, "t10k")
        if train is None and test is None and download:
            fetch(root)
            train, test = load_pair(raw_dir, "train"), load_pair(raw_dir, "t10k")
        if test is None:
            what = "t10k-*-ubyte[.gz] files" if train is not None else "MNIST IDX files"
            raise DataError(f"no {what} under {raw_dir}; {HOW_TO_GET}.")
        g = step_generator(self.seed, 0, SPLIT_STREAM)
        if train is not None:
            n = len(train[0])
            if val_size > n - self.batch_size:
                raise ConfigError(
                    f"dataset.val_size={val_size} is not allowed for {w}: it must leave at least one "
                    f"batch of the {n} training images (at most {n - self.batch_size})."
                )
            perm = torch.randperm(n, generator=g).numpy()
            tr, va = perm[: n - val_size], perm[n - val_size :]
            return {
                "train": _take(train, tr),
                "val": _take(train, va),
                "test": test,
            }, f"official train/test files in {raw_dir}"
        n_tr, n_va, n_te = self.carve
        n = len(test[0])
        if n_tr + n_va + n_te > n:
            raise ConfigError(
                f"dataset.carve={list(self.carve)} is not allowed for {w}: the sizes must sum to at "
                f"most the {n} images of the test split."
            )
        perm = torch.randperm(n, generator=g).numpy()
        cut = np.cumsum([0, n_tr, n_va, n_te])
        splits = {k: _take(test, perm[a:b]) for k, a, b in zip(("train", "val", "test"), cut, cut[1:])}
        return splits, f"carved from the 10k test split (no training files found under {raw_dir})"

    # Hooks for SeqMNIST.
    def _check_extra(self) -> None:
        pass

    def _spec(self) -> DataSpec:
        return DataSpec(self.kind, "classify", 10, input_size=PIXELS, baseline=float(np.log(10)))

    def _x(self, images: np.ndarray) -> Tensor:
        x = torch.from_numpy(images).float().div_(255.0)
        return x.sub_(MEAN).div_(STD) if self.normalize else x

    def train_batch(self, step: int) -> tuple[Tensor, Tensor]:
        x, y = self._splits["train"]
        idx = epoch_permutation_batch(self.train_size, self.batch_size, self.seed, step).numpy()
        return self._x(x[idx]), torch.from_numpy(y[idx].astype(np.int64))

    def eval_batches(self, split: Literal["val", "test"]) -> Iterator[tuple[Tensor, Tensor]]:
        check_split(split)
        x, y = self._splits[split]
        for i in range(0, len(y), self.eval_batch_size):
            sl = slice(i, i + self.eval_batch_size)
            yield self._x(x[sl]), torch.from_numpy(y[sl].astype(np.int64))

    def describe(self) -> str:
        sizes = " / ".join(f"{k} {len(v[1])}" for k, v in self._splits.items())
        norm = "standardized" if self.normalize else "in [0, 1]"
        return f"{self.name}: {sizes} images, {self._shape()}, pixels {norm}, seed {self.seed}; {self.source}"

    def _shape(self) -> str:
        return f"{PIXELS} pixels flat"


class SeqMNIST(MNIST):
    """MNIST as sequences: x (B, seq_len, 784 // seq_len), scanned row-major, optionally pixel-permuted."""

    name = "seq_mnist"
    kind = "sequence"

    def __init__(
        self,
        *,
        seq_len: int = 28,
        permute: bool = False,
        permutation_seed: int = 0,
        eval_seq_len: int | None = None,
        **kwargs,
    ):
        self.seq_len, self.permute = seq_len, permute
        self.eval_seq_len, self.permutation_seed = eval_seq_len, permutation_seed
        super().__init__(**kwargs)
        # Independent of `seed` so every run of a pMNIST sweep sees the same permuted task.
        g = torch.Generator().manual_seed(permutation_seed)
        self.perm = torch.randperm(PIXELS, generator=g).numpy() if permute else None

    def _check_extra(self) -> None:
        w = self.name
        check_int("dataset.seq_len", self.seq_len, w)
        if PIXELS % self.seq_len:
            raise ConfigError(
                f"dataset.seq_len={self.seq_len} is not allowed for {w}: it must divide 784 (e.g. 1, 28, 784)."
            )
        if self.eval_seq_len is not None and self.eval_seq_len != self.seq_len:
            raise ConfigError(
                f"dataset.eval_seq_len={self.eval_seq_len} is not allowed for {w}: an image is always "
                f"784 pixels, so evaluation uses seq_len={self.seq_len} steps too (leave it null)."
            )
        check_bool("dataset.permute", self.permute, w)
        check_int("dataset.permutation_seed", self.permutation_seed, w, minimum=0)

    def _spec(self) -> DataSpec:
        step = PIXELS // self.seq_len
        return DataSpec(self.kind, "classify", 10, input_size=step, baseline=float(np.log(10)), seq_len=self.seq_len)

    def _x(self, images: np.ndarray) -> Tensor:
        if self.perm is not None:
            images = images[:, self.perm]
        return super()._x(images).reshape(len(images), self.seq_len, PIXELS // self.seq_len)

    def _shape(self) -> str:
        perm = f", pixels permuted (permutation_seed {self.permutation_seed})" if self.permute else ""
        return f"{self.seq_len} steps of {PIXELS // self.seq_len} pixels{perm}"


def _take(pair: tuple[np.ndarray, np.ndarray], idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return pair[0][idx], pair[1][idx]
