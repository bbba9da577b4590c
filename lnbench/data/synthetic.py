"""Synthetic long-range tasks that need no files: the adding problem and the copy task.

Training batches are generated afresh for every step (or drawn from a fixed set when `train_size` is
given); val and test are fixed sets generated once from their own streams of the seed, at
`eval_seq_len`, so a run can be evaluated on longer sequences than it trained on.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from typing import Iterator, Literal

import torch
from torch import Tensor

from lnbench.data.base import (
    FIXED_TRAIN_STREAM,
    IGNORE_INDEX,
    TEST_STREAM,
    VAL_STREAM,
    Dataset,
    DataSpec,
    check_int,
    check_split,
    chunks,
    epoch_permutation_batch,
    step_generator,
)
from lnbench.data.memory import check_fits
from lnbench.errors import ConfigError


class _Synthetic(Dataset):
    name = "synthetic"
    kind = "sequence"
    min_len = 2

    def __init__(
        self,
        *,
        batch_size: int,
        seed: int,
        seq_len: int,
        eval_seq_len: int | None,
        val_size: int,
        test_size: int,
        eval_batch_size: int,
        train_size: int | None,
    ):
        w = self.name
        check_int("dataset.batch_size", batch_size, w)
        check_int("dataset.seed", seed, w, minimum=0)
        check_int("dataset.val_size", val_size, w)
        check_int("dataset.test_size", test_size, w)
        check_int("dataset.eval_batch_size", eval_batch_size, w)
        check_int("dataset.train_size", train_size, w, optional=True)
        if train_size is not None and train_size < batch_size:
            raise ConfigError(
                f"dataset.train_size={train_size} is not allowed for {w}: a fixed training set must hold "
                f"at least one batch (batch_size={batch_size}), or be null for fresh batches every step."
            )
        self._check_len("dataset.seq_len", seq_len)
        if eval_seq_len is not None:
            self._check_len("dataset.eval_seq_len", eval_seq_len)
        self.batch_size, self.seed, self.eval_batch_size = batch_size, seed, eval_batch_size
        self.seq_len = seq_len
        self.eval_seq_len = seq_len if eval_seq_len is None else eval_seq_len
        self.train_size = train_size
        self._check_memory(
            {
                "dataset.batch_size": (batch_size, seq_len),
                "dataset.train_size": (train_size or 0, seq_len),
                "dataset.val_size": (val_size, self.eval_seq_len),
                "dataset.test_size": (test_size, self.eval_seq_len),
            }
        )
        self._eval = {
            "val": self.generate(val_size, self.eval_seq_len, step_generator(seed, 0, VAL_STREAM)),
            "test": self.generate(test_size, self.eval_seq_len, step_generator(seed, 0, TEST_STREAM)),
        }
        self._train = None
        if train_size is not None:
            self._train = self.generate(train_size, seq_len, step_generator(seed, 0, FIXED_TRAIN_STREAM))

    def _check_len(self, key: str, value: object) -> None:
        check_int(key, value, self.name, minimum=self.min_len)

    def _check_memory(self, sizes: dict[str, tuple[int, int]]) -> None:
        """Each set (and a training batch) is generated whole: refused before, where it would not fit."""
        for key, (n, seq_len) in sizes.items():
            case = self.generate(1, seq_len, step_generator(self.seed, 0, VAL_STREAM))
            check_fits(key, n, sum(t.nbytes for t in case), f"{n} {self.name} cases of length {seq_len}")

    @abstractmethod
    def generate(self, n: int, seq_len: int, g: torch.Generator) -> tuple[Tensor, Tensor]:
        """n cases of length seq_len drawn from g."""

    def train_batch(self, step: int) -> tuple[Tensor, Tensor]:
        if self._train is None:
            return self.generate(self.batch_size, self.seq_len, step_generator(self.seed, step))
        idx = epoch_permutation_batch(self.train_size, self.batch_size, self.seed, step)
        return self._train[0][idx], self._train[1][idx]

    def eval_batches(self, split: Literal["val", "test"]) -> Iterator[tuple[Tensor, Tensor]]:
        check_split(split)
        return chunks(*self._eval[split], self.eval_batch_size)

    def describe(self) -> str:
        train = "fresh batches each step" if self.train_size is None else f"fixed set of {self.train_size}"
        sizes = f"val {len(self._eval['val'][1])} / test {len(self._eval['test'][1])}"
        return (
            f"{self.name}: train seq_len {self.seq_len} ({train}), {sizes} at seq_len {self.eval_seq_len}"
            f"{self._details()}, seed {self.seed}; generated, no files"
        )

    def _details(self) -> str:
        return ""


class Adding(_Synthetic):
    """The adding problem: x (B, T, 2) = (value ~ U[0,1], marker), y (B,) = sum of the 2 marked values.

    One marker falls in the first half [0, T//2) and one in the second half [T//2, T) (Le et al. 2015).
    """

    name = "adding"

    def __init__(
        self,
        *,
        batch_size: int,
        seed: int,
        seq_len: int = 50,
        eval_seq_len: int | None = None,
        val_size: int = 1000,
        test_size: int = 1000,
        eval_batch_size: int = 500,
        train_size: int | None = None,
    ):
        super().__init__(
            batch_size=batch_size,
            seed=seed,
            seq_len=seq_len,
            eval_seq_len=eval_seq_len,
            val_size=val_size,
            test_size=test_size,
            eval_batch_size=eval_batch_size,
            train_size=train_size,
        )
        # Predicting the mean 1 scores the variance of a sum of two U(0,1): 2 * 1/12.
        self.spec = DataSpec(self.kind, "regress", 1, input_size=2, baseline=1 / 6, seq_len=seq_len)

    def generate(self, n: int, seq_len: int, g: torch.Generator) -> tuple[Tensor, Tensor]:
        values = torch.rand(n, seq_len, generator=g)
        half = seq_len // 2
        first = torch.randint(0, half, (n, 1), generator=g)
        second = torch.randint(half, seq_len, (n, 1), generator=g)
        pos = torch.cat([first, second], dim=1)
        markers = torch.zeros(n, seq_len).scatter_(1, pos, 1.0)
        y = values.gather(1, pos).sum(1)
        return torch.stack([values, markers], dim=-1), y


class Copy(_Synthetic):
    """The copy task (Arjovsky et al. 2016), token ids: x, y (B, T) int64.

    Ids: 0 blank, 1..num_symbols data, num_symbols+1 delimiter. x = copy_len symbols, blanks, the
    delimiter at T - copy_len - 1, blanks. y is IGNORE_INDEX except on the last copy_len steps, which
    hold the symbols. num_outputs = vocab_size = num_symbols + 2 so that a target id is its own class
    (one head shape for every token task); blank and delimiter are simply never the answer.
    """

    name = "copy"

    def __init__(
        self,
        *,
        batch_size: int,
        seed: int,
        num_symbols: int = 8,
        copy_len: int = 10,
        seq_len: int = 30,
        eval_seq_len: int | None = None,
        val_size: int = 1000,
        test_size: int = 1000,
        eval_batch_size: int = 500,
        train_size: int | None = None,
    ):
        check_int("dataset.num_symbols", num_symbols, self.name)
        check_int("dataset.copy_len", copy_len, self.name)
        self.num_symbols, self.copy_len = num_symbols, copy_len
        self.min_len = 2 * copy_len + 1
        super().__init__(
            batch_size=batch_size,
            seed=seed,
            seq_len=seq_len,
            eval_seq_len=eval_seq_len,
            val_size=val_size,
            test_size=test_size,
            eval_batch_size=eval_batch_size,
            train_size=train_size,
        )
        v = num_symbols + 2
        # Chance on the asked positions: uniform over the data symbols.
        self.spec = DataSpec(self.kind, "tagging", v, vocab_size=v, baseline=math.log(num_symbols), seq_len=seq_len)

    def _check_len(self, key: str, value: object) -> None:
        check_int(key, value, self.name)
        if value < self.min_len:
            raise ConfigError(
                f"{key}={value} is not allowed for copy: it must be at least 2 * copy_len + 1 = "
                f"{self.min_len} (symbols, delimiter, then the copy) with copy_len={self.copy_len}."
            )

    def generate(self, n: int, seq_len: int, g: torch.Generator) -> tuple[Tensor, Tensor]:
        k, L = self.num_symbols, self.copy_len
        symbols = torch.randint(1, k + 1, (n, L), generator=g)
        x = torch.zeros(n, seq_len, dtype=torch.long)
        x[:, :L] = symbols
        x[:, seq_len - L - 1] = k + 1
        y = torch.full((n, seq_len), IGNORE_INDEX, dtype=torch.long)
        y[:, seq_len - L :] = symbols
        return x, y

    def _details(self) -> str:
        return f", copy {self.copy_len} symbols from an alphabet of {self.num_symbols}"
