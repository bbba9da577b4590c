"""Binarized MNIST for generative models (DRAW, the paper's section 6.4): a fixed binarization, the same for every run.

The paper uses the fixed binarization of Larochelle & Murray (2011), split 50,000 / 10,000 / 10,000. That file is
not on this machine, so one is drawn here once, from `binarize_seed`, out of the MNIST IDX files: each pixel of
each source image is on with probability intensity / 255. The draw is a pure function of the seed, the file and
the pixel's index (a splitmix64 counter, written out below, so no library version can change it); its SHA-256 is
printed by `describe()` (the run's train.log) so that two runs can be seen to share it.

The split is fixed too (the run's seed only orders the batches): with the 60k training files, training is their
first 60,000 - val_size images and validation the rest (Larochelle & Murray's 50k / 10k at val_size 10,000), and
the test set is the official 10k; with only the 10k test split, train / val / test (`carve`) are taken from it
in an order drawn from `binarize_seed`.
"""

from __future__ import annotations

import hashlib
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
    mix,
    resolve_data_dir,
    step_generator,
)
from lnbench.data.mnist_files import HOW_TO_GET, PIXELS, check_carve, fetch, load_pair
from lnbench.errors import ConfigError, DataError

FILES = {"train": 0, "t10k": 1}  # each source file's stream of the binarization
_CHUNK = 4096  # images binarized at once (the 64-bit counters of 60k images would take 380 MB)
_CACHE: dict[tuple[bytes, int, int], np.ndarray] = {}  # per process: tests and sweeps build it often


def _splitmix64(z: np.ndarray) -> np.ndarray:
    """splitmix64's output function on uint64 counters (Steele, Lea & Flood 2014), wrapping mod 2^64."""
    with np.errstate(over="ignore"):
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def uniforms(seed: int, stream: int, start: int, count: int) -> np.ndarray:
    """`count` uniforms in [0, 1) at counters start.. of (seed, stream): 53 random bits each."""
    base = np.uint64(mix(seed, stream))
    with np.errstate(over="ignore"):
        z = np.arange(start, start + count, dtype=np.uint64) + base
    return (_splitmix64(z) >> np.uint64(11)).astype(np.float64) * 2.0**-53


def binarize(images: np.ndarray, seed: int, stream: int) -> np.ndarray:
    """uint8 (N, 784) intensities -> uint8 bits, pixel k of image i on with probability intensity / 255,
    drawn from counter i * 784 + k: the same bit for the same image, whatever else is binarized with it."""
    key = (hashlib.blake2b(np.ascontiguousarray(images).tobytes(), digest_size=16).digest(), seed, stream)
    if key in _CACHE:
        return _CACHE[key]
    out = np.empty(images.shape, dtype=np.uint8)
    flat, n = images.reshape(len(images), -1), images[0].size if len(images) else 0
    for i in range(0, len(images), _CHUNK):
        block = flat[i : i + _CHUNK]
        u = uniforms(seed, stream, i * n, block.size).reshape(block.shape)
        out.reshape(len(images), -1)[i : i + _CHUNK] = u < block / 255.0
    _CACHE[key] = out
    return out


class BinarizedMNIST(Dataset):
    """MNIST digits as binary images, x (B, 784) float in {0, 1}; the target y is the image itself."""

    name = "binarized_mnist"
    kind = "binary"

    def __init__(
        self,
        *,
        data_dir: str | None = None,
        batch_size: int,
        seed: int,
        eval_batch_size: int = 1000,
        binarize_seed: int = 0,
        val_size: int = 10000,
        carve: Sequence[int] = (8000, 1000, 1000),
        download: bool = False,
        limit_train: int | None = None,
    ):
        w = self.name
        check_int("dataset.batch_size", batch_size, w)
        check_int("dataset.eval_batch_size", eval_batch_size, w)
        check_int("dataset.seed", seed, w, minimum=0)
        check_int("dataset.binarize_seed", binarize_seed, w, minimum=0)
        check_int("dataset.val_size", val_size, w)
        check_int("dataset.limit_train", limit_train, w, optional=True)
        check_bool("dataset.download", download, w)
        carve = check_carve(carve, w)
        self.batch_size, self.eval_batch_size, self.seed, self.binarize_seed = (
            batch_size,
            eval_batch_size,
            seed,
            binarize_seed,
        )

        self._splits, self.source = self._read_splits(
            resolve_data_dir(data_dir, w) / "MNIST" / "raw", download, val_size, carve
        )
        if limit_train is not None:
            self._splits["train"] = self._splits["train"][:limit_train]
        self.train_size = len(self._splits["train"])
        if self.train_size < batch_size:
            raise ConfigError(
                f"dataset.batch_size={batch_size} is not allowed for {w}: it must be at most the "
                f"{self.train_size} training images."
            )
        self.digest = hashlib.sha256(
            b"".join(np.ascontiguousarray(a).tobytes() for a in self._splits.values())
        ).hexdigest()
        self.spec = DataSpec(
            self.kind, "bound", PIXELS, input_size=PIXELS, baseline=independent_pixels_nats(self._splits["train"])
        )

    def _read_splits(
        self, raw_dir: Path, download: bool, val_size: int, carve: tuple[int, int, int]
    ) -> tuple[dict, str]:
        """The train / val / test splits of binarized images, and where they came from."""
        w = self.name
        train, test = load_pair(raw_dir, "train"), load_pair(raw_dir, "t10k")
        if train is None and test is None and download:
            fetch(raw_dir.parent.parent)
            train, test = load_pair(raw_dir, "train"), load_pair(raw_dir, "t10k")
        if test is None:
            raise DataError(f"no t10k-*-ubyte[.gz] files under {raw_dir}; {HOW_TO_GET}.")
        bits = {
            name: binarize(pair[0], self.binarize_seed, FILES[name])
            for name, pair in (("train", train), ("t10k", test))
            if pair
        }
        if train is not None:
            n = len(bits["train"])
            if val_size > n - self.batch_size:
                raise ConfigError(
                    f"dataset.val_size={val_size} is not allowed for {w}: it must leave at least one batch "
                    f"of the {n} training images (at most {n - self.batch_size})."
                )
            splits = {
                "train": bits["train"][: n - val_size],
                "val": bits["train"][n - val_size :],
                "test": bits["t10k"],
            }
            return (
                splits,
                f"official train/test files in {raw_dir} (Larochelle & Murray's split sizes at val_size=10000)",
            )
        n_tr, n_va, n_te = carve
        if n_tr + n_va + n_te > len(bits["t10k"]):
            raise ConfigError(
                f"dataset.carve={list(carve)} is not allowed for {w}: the sizes must sum to at most the "
                f"{len(bits['t10k'])} images of the test split."
            )
        perm = torch.randperm(len(bits["t10k"]), generator=step_generator(self.binarize_seed, 0, SPLIT_STREAM)).numpy()
        cut = np.cumsum([0, n_tr, n_va, n_te])
        splits = {k: bits["t10k"][perm[a:b]] for k, a, b in zip(("train", "val", "test"), cut, cut[1:])}
        return splits, f"carved from the 10k test split by binarize_seed (no training files found under {raw_dir})"

    def train_batch(self, step: int) -> tuple[Tensor, Tensor]:
        idx = epoch_permutation_batch(self.train_size, self.batch_size, self.seed, step).numpy()
        x = torch.from_numpy(self._splits["train"][idx]).float()
        return x, x

    def eval_batches(self, split: Literal["val", "test"]) -> Iterator[tuple[Tensor, Tensor]]:
        check_split(split)
        bits = self._splits[split]
        for i in range(0, len(bits), self.eval_batch_size):
            x = torch.from_numpy(bits[i : i + self.eval_batch_size]).float()
            yield x, x

    def describe(self) -> str:
        sizes = " / ".join(f"{k} {len(v)}" for k, v in self._splits.items())
        return (
            f"{self.name}: {sizes} images of 784 binary pixels, binarized once from binarize_seed {self.binarize_seed} "
            f"(sha256 of the splits' bits {self.digest[:16]}), batches ordered by seed {self.seed}; {self.source}; "
            f"independent pixels at their training frequencies score {self.spec.baseline:.1f} nats"
        )


def independent_pixels_nats(bits: np.ndarray) -> float:
    """The negative log-likelihood (nats per image) of independent Bernoulli pixels at the training set's
    frequencies: what a model that learnt no dependence between pixels scores (the report's baseline)."""
    p = bits.mean(0, dtype=np.float64).clip(1e-6, 1 - 1e-6)
    return float(-(p * np.log(p) + (1 - p) * np.log1p(-p)).sum())
