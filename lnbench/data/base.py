"""The contract between a dataset and the rest of lnbench.

A dataset holds its splits as in-memory tensors and hands out batches by index. The training batch
for step `s` is a pure function of (seed, s): the train loop can resume at any step without saving a
data-loader state, and two runs with the same seed see the same batches in the same order.
"""

from __future__ import annotations

import copy
import functools
import os
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Literal

import torch
from torch import Tensor

from lnbench.errors import ConfigError, DataError

# Targets equal to this are ignored by the loss and the metrics (PyTorch's cross-entropy default).
IGNORE_INDEX = -100

Kind = Literal["flat", "sequence"]
# classify: y is (B,) long, predicted from the flat input or the last step of the sequence
# regress:  y is (B,) float, predicted from the last step (MSE)
# tagging:  y is (B, T) long, one class per step, IGNORE_INDEX where nothing is asked
# bound:    y is the binary images (B, P); the model's negative variational bound (lnbench.models.draw)
Task = Literal["classify", "regress", "tagging", "bound"]


@dataclass(frozen=True)
class DataSpec:
    """What a model needs to know about its data to build its input layer and head."""

    kind: Kind
    task: Task
    num_outputs: int  # classes (classify, tagging) or 1 (regress)
    input_size: int = 0  # features per step (sequence) or per case (flat); 0 when inputs are tokens
    vocab_size: int = 0  # > 0 when x holds token ids (B, T) long, for an embedding input
    bits: bool = False  # report the loss in bits per token (language modelling)
    baseline: float | None = None  # loss of a trivial predictor, for the log and the report
    seq_len: int = 0  # training sequence length (0 for flat data): BN's per-time-step statistics


class Dataset(ABC):
    """In-memory splits; x is (B, F) for flat data, (B, T, F) float or (B, T) long for sequences."""

    kind: Kind  # what its inputs are (the models that take them: lnbench.models)
    spec: DataSpec
    batch_size: int
    train_size: int | None  # None: every training batch is freshly generated (synthetic tasks)

    @abstractmethod
    def train_batch(self, step: int) -> tuple[Tensor, Tensor]:
        """The training batch of `step` (0-based), a pure function of the seed and the step."""

    @abstractmethod
    def eval_batches(self, split: Literal["val", "test"]) -> Iterator[tuple[Tensor, Tensor]]:
        """The whole validation or test split, in fixed batches."""

    @abstractmethod
    def describe(self) -> str:
        """One line for the log: sizes of the splits, lengths, where the data came from."""

    def few_cases(self, n: int) -> tuple[Tensor, Tensor]:
        """n training cases, made as a batch of step 0 is but without making the whole batch (the checks
        before a run measure a batch on these)."""
        few = copy.copy(self)  # shallow: the splits are shared, only the batch size differs
        few.batch_size = min(n, self.batch_size)
        return few.train_batch(0)

    def epoch(self, step: int) -> float:
        """Epochs completed after `step` steps (samples seen / training set size)."""
        if not self.train_size:
            return 0.0
        return step * self.batch_size / self.train_size


def epoch_permutation_batch(n: int, batch_size: int, seed: int, step: int) -> Tensor:
    """Indices of the training batch of `step`: a fresh permutation per epoch, seeded by (seed, epoch).

    Batches never straddle epochs; the last short batch of an epoch is dropped so every step has
    `batch_size` cases.
    """
    per_epoch = max(n // batch_size, 1)
    epoch, pos = divmod(step, per_epoch)
    return epoch_permutation(n, seed, epoch)[pos * batch_size : (pos + 1) * batch_size]


@functools.lru_cache(maxsize=64)
def epoch_permutation(n: int, seed: int, epoch: int) -> Tensor:
    """The order of an epoch's cases (read-only: it is kept). Kept, since making it was most of a small batch's
    cost (0.1 ms of 0.12 at MNIST's batch 4), paid at every step, and K times a step by a pack of K replicas
    (lnbench.training.replicas), each of its own seed: hence room for 64."""
    return torch.randperm(n, generator=torch.Generator().manual_seed(mix(seed, epoch)))


def step_generator(seed: int, step: int, stream: int = 0) -> torch.Generator:
    """A generator private to one step (and stream) of one seed, for freshly generated batches."""
    return torch.Generator().manual_seed(mix(seed, step, stream))


def mix(*xs: int) -> int:
    # Distinct, well-spread seeds for each (seed, epoch/step, stream) tuple; torch seeds are 64-bit.
    h = 0x9E3779B97F4A7C15
    for x in xs:
        h = (h ^ (int(x) + 0x9E3779B97F4A7C15 + (h << 6) + (h >> 2))) & 0xFFFFFFFFFFFFFFFF
    return h % (2**63 - 1)


def chunks(x: Tensor, y: Tensor, batch_size: int) -> Iterator[tuple[Tensor, Tensor]]:
    for i in range(0, len(x), batch_size):
        yield x[i : i + batch_size], y[i : i + batch_size]


# --- Helpers shared by the concrete datasets (validation messages, data folder, fixed sets). ---

# Streams of `step_generator` for the sets a synthetic dataset generates once; training batches use
# stream 0, so none of these can coincide with a training batch.
VAL_STREAM, TEST_STREAM, FIXED_TRAIN_STREAM, SPLIT_STREAM = 1, 2, 3, 4

DATA_DIR_ENV = "LNBENCH_DATA_DIR"


def check_int(name: str, value: object, where: str, minimum: int = 1, optional: bool = False) -> None:
    """ConfigError unless `value` is an int >= minimum (or None when `optional`)."""
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        extra = " or null" if optional else ""
        raise ConfigError(f"{name}={value!r} is not allowed for {where}: it must be an integer >= {minimum}{extra}.")


def check_bool(name: str, value: object, where: str) -> None:
    if not isinstance(value, bool):
        raise ConfigError(f"{name}={value!r} is not allowed for {where}: it must be true or false.")


def check_split(split: str) -> None:
    if split not in ("val", "test"):
        raise ConfigError(f"split={split!r} is not allowed: eval_batches takes 'val' or 'test'.")


def resolve_data_dir(data_dir: str | None, where: str) -> Path:
    """`data_dir` made absolute against the working directory; empty or None falls back to the env."""
    if data_dir is None or str(data_dir) == "":
        data_dir = os.environ.get(DATA_DIR_ENV, "")
        if not data_dir:
            raise DataError(
                f"{where} needs a data folder: set dataset.data_dir or the environment variable "
                f"{DATA_DIR_ENV} (e.g. to ../shared/data)."
            )
    return Path(data_dir).expanduser().resolve()
