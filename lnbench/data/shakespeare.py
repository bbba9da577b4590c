"""Character-level language modelling on Tiny Shakespeare (Karpathy's char-rnn corpus)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Iterator, Literal, Sequence

import numpy as np
import torch
from torch import Tensor

from lnbench.data.base import (
    Dataset,
    DataSpec,
    check_int,
    check_split,
    chunks,
    resolve_data_dir,
    step_generator,
)
from lnbench.data.memory import check_fits
from lnbench.errors import ConfigError, DataError

URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"

# Encoded corpora per process, keyed by (absolute path, mtime, size).
_CACHE: dict[tuple[str, int, int], tuple[str, np.ndarray]] = {}


def load_corpus(path: Path) -> tuple[str, np.ndarray]:
    """(vocabulary as a string of sorted distinct characters, the text as int64 ids)."""
    try:
        st = path.stat()
        key = (str(path), st.st_mtime_ns, st.st_size)
        if key not in _CACHE:
            text = path.read_text(encoding="utf-8")
            # utf-32 gives one fixed-width code point per character, so numpy can map them in bulk.
            codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
            vocab = np.unique(codes)
            _CACHE[key] = ("".join(map(chr, vocab)), np.searchsorted(vocab, codes).astype(np.int64))
        return _CACHE[key]
    except FileNotFoundError:
        raise DataError(
            f"{path} does not exist: point dataset.data_dir or the environment variable LNBENCH_DATA_DIR "
            f"at a folder holding tinyshakespeare/input.txt (download it from {URL})."
        ) from None
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"{path} is not a readable UTF-8 text file ({e}); get it from {URL}.") from None


class Shakespeare(Dataset):
    """x, y (B, T) int64 with y = x shifted by one character; splits are contiguous spans of the text."""

    name = "shakespeare"
    kind = "sequence"

    def __init__(
        self,
        *,
        data_dir: str | None = None,
        batch_size: int,
        seed: int,
        seq_len: int = 100,
        eval_seq_len: int | None = None,
        eval_batch_size: int = 64,
        max_eval_windows: int | None = 200,
        split: Sequence[float] = (0.9, 0.05, 0.05),
    ):
        w = self.name
        check_int("dataset.batch_size", batch_size, w)
        check_int("dataset.seed", seed, w, minimum=0)
        check_int("dataset.seq_len", seq_len, w)
        check_int("dataset.eval_seq_len", eval_seq_len, w, optional=True)
        check_int("dataset.eval_batch_size", eval_batch_size, w)
        check_int("dataset.max_eval_windows", max_eval_windows, w, optional=True)
        fractions = _check_split(split)
        check_fits(
            "dataset.batch_size",
            batch_size,
            2 * seq_len * 8,
            f"a training batch of {batch_size} windows of {seq_len} characters",
        )
        self.batch_size, self.seed, self.seq_len = batch_size, seed, seq_len
        self.eval_seq_len = seq_len if eval_seq_len is None else eval_seq_len
        self.eval_batch_size, self.max_eval_windows = eval_batch_size, max_eval_windows

        self.path = resolve_data_dir(data_dir, w) / "tinyshakespeare" / "input.txt"
        self.vocab, ids = load_corpus(self.path)
        self._stoi = {c: i for i, c in enumerate(self.vocab)}
        n = len(ids)
        bounds = [0] + [round(n * f) for f in np.cumsum(fractions)]
        self._parts = {k: torch.from_numpy(ids[a:b]) for k, a, b in zip(("train", "val", "test"), bounds, bounds[1:])}
        if len(self._parts["train"]) < seq_len + 1:
            raise ConfigError(
                f"dataset.seq_len={seq_len} is not allowed for {w}: the training part holds only "
                f"{len(self._parts['train'])} characters."
            )
        for k in ("val", "test"):
            if len(self._parts[k]) < self.eval_seq_len + 1:
                raise ConfigError(
                    f"dataset.eval_seq_len={self.eval_seq_len} is not allowed for {w}: the {k} part holds "
                    f"only {len(self._parts[k])} characters, fewer than one window plus its target."
                )
        self._eval = {k: self._windows(self._parts[k]) for k in ("val", "test")}
        self.train_size = len(self._parts["train"]) // seq_len
        v = len(self.vocab)
        self.spec = DataSpec(self.kind, "tagging", v, vocab_size=v, bits=True, baseline=math.log(v), seq_len=seq_len)

    def _windows(self, part: Tensor) -> tuple[Tensor, Tensor]:
        """Non-overlapping consecutive windows (targets one character ahead), evenly thinned to the cap."""
        L = self.eval_seq_len
        total = (len(part) - 1) // L
        keep = total if self.max_eval_windows is None else min(total, self.max_eval_windows)
        starts = (torch.arange(keep) * total // keep) * L  # evenly spaced, distinct, deterministic
        w = part[starts[:, None] + torch.arange(L + 1)]
        return w[:, :-1], w[:, 1:]

    def encode(self, text: str) -> Tensor:
        return torch.tensor([self._stoi[c] for c in text], dtype=torch.long)

    def decode(self, ids: Tensor | Sequence[int]) -> str:
        return "".join(self.vocab[int(i)] for i in ids)

    def train_batch(self, step: int) -> tuple[Tensor, Tensor]:
        train = self._parts["train"]
        g = step_generator(self.seed, step)
        starts = torch.randint(0, len(train) - self.seq_len, (self.batch_size, 1), generator=g)
        w = train[starts + torch.arange(self.seq_len + 1)]
        return w[:, :-1], w[:, 1:]

    def eval_batches(self, split: Literal["val", "test"]) -> Iterator[tuple[Tensor, Tensor]]:
        check_split(split)
        return chunks(*self._eval[split], self.eval_batch_size)

    def describe(self) -> str:
        sizes = " / ".join(f"{k} {len(v):,}" for k, v in self._parts.items())
        avail = {k: (len(self._parts[k]) - 1) // self.eval_seq_len for k in ("val", "test")}
        evals = ", ".join(f"{k} {len(self._eval[k][0])} of {avail[k]}" for k in ("val", "test"))
        return (
            f"{self.name}: {sizes} chars, vocab {len(self.vocab)}; train windows of {self.seq_len} "
            f"(truncated BPTT = the window, hidden state not carried between windows), eval windows of "
            f"{self.eval_seq_len} ({evals}), seed {self.seed}; {self.path}"
        )


def _check_split(split: object) -> tuple[float, float, float]:
    try:
        fr = tuple(float(f) for f in split)  # a list, tuple or OmegaConf ListConfig
    except (TypeError, ValueError):
        fr = ()
    if len(fr) != 3 or any(f <= 0 for f in fr) or sum(fr) > 1 + 1e-9:
        raise ConfigError(
            f"dataset.split={split!r} is not allowed for shakespeare: it must be three fractions > 0 "
            f"(train, val, test) summing to at most 1, e.g. [0.9, 0.05, 0.05]."
        )
    return fr  # type: ignore[return-value]
