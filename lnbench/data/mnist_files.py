"""MNIST's files on disk: torchvision's IDX files (gzip or plain) read with numpy only, checked, and fetched
once with torchvision when asked. Shared by the classification datasets (lnbench.data.mnist) and binarized
MNIST (lnbench.data.binarized_mnist); `check_carve` checks the split both take from the 10k test file alone.
"""

from __future__ import annotations

import gzip
import struct
import zlib
from pathlib import Path

import numpy as np

from lnbench.errors import ConfigError, DataError

PIXELS = 784
# (magic number, dims after the count) of each file kind: 0x08 = unsigned byte, last byte = rank.
_IDX = {"images-idx3": (0x00000803, (28, 28)), "labels-idx1": (0x00000801, ())}

HOW_TO_GET = (
    "point dataset.data_dir or the environment variable LNBENCH_DATA_DIR at a folder holding "
    "MNIST/raw/*.gz (torchvision's layout), or set dataset.download=true on a machine with internet "
    "and torchvision"
)

# Decoded files per process, keyed by (absolute path, mtime, size): test suites and sweeps build many
# datasets from the same files and decoding the gzip dominates construction time.
_CACHE: dict[tuple[str, int, int], np.ndarray] = {}


def read_idx(path: Path, kind: str) -> np.ndarray:
    """An IDX file (gzip or plain) as a uint8 array, checked against the expected magic and dims."""
    path = Path(path)
    st = path.stat()
    key = (str(path.resolve()), st.st_mtime_ns, st.st_size)
    if key not in _CACHE:
        _CACHE[key] = _decode_idx(path, kind)
    return _CACHE[key]


def _decode_idx(path: Path, kind: str) -> np.ndarray:
    magic, dims = _IDX[kind]
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rb") as f:
            raw = f.read()
    except (OSError, EOFError, zlib.error) as e:
        raise DataError(f"{path} is not a readable IDX file ({e}); {HOW_TO_GET}.") from None
    header = 4 + 4 * (1 + len(dims))
    if len(raw) < header:
        raise DataError(f"{path} is truncated ({len(raw)} bytes, shorter than its header); {HOW_TO_GET}.")
    got_magic, n, *got_dims = struct.unpack(f">{2 + len(dims)}I", raw[:header])
    if got_magic != magic:
        raise DataError(
            f"{path} has magic number {got_magic:#010x}, expected {magic:#010x} for an MNIST {kind} file; {HOW_TO_GET}."
        )
    if tuple(got_dims) != dims:
        raise DataError(f"{path} holds items of shape {tuple(got_dims)}, expected {dims}; {HOW_TO_GET}.")
    expected = header + n * int(np.prod(dims, dtype=np.int64))
    if len(raw) != expected:
        what = "truncated" if len(raw) < expected else "longer than its header says"
        raise DataError(f"{path} is {what} ({len(raw)} bytes, expected {expected} for {n} items); {HOW_TO_GET}.")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(n, *dims).copy()


def _find(raw_dir: Path, split: str, kind: str) -> Path | None:
    # torchvision keeps both the .gz and the extracted file; the plain one skips decompression.
    for suffix in ("", ".gz"):
        p = raw_dir / f"{split}-{kind}-ubyte{suffix}"
        if p.is_file():
            return p
    return None


def load_pair(raw_dir: Path, split: str) -> tuple[np.ndarray, np.ndarray] | None:
    """(images (N, 784) uint8, labels (N,) uint8) of 'train' or 't10k', None if neither file exists."""
    img, lab = _find(raw_dir, split, "images-idx3"), _find(raw_dir, split, "labels-idx1")
    if img is None and lab is None:
        return None
    if img is None or lab is None:
        missing = f"{split}-{'images-idx3' if img is None else 'labels-idx1'}-ubyte[.gz]"
        raise DataError(f"{raw_dir} has one {split} file but not {missing}; {HOW_TO_GET}.")
    x, y = read_idx(img, "images-idx3"), read_idx(lab, "labels-idx1")
    if len(x) != len(y):
        raise DataError(f"{img} holds {len(x)} images but {lab} holds {len(y)} labels; {HOW_TO_GET}.")
    if len(y) and y.max() > 9:
        raise DataError(f"{lab} holds label {int(y.max())}, MNIST labels are 0-9; {HOW_TO_GET}.")
    return x.reshape(len(x), PIXELS), y


def fetch(root: Path) -> None:
    """Both MNIST splits into root with torchvision (dataset.download=true)."""
    try:
        import torchvision  # noqa: PLC0415 (optional: only to fetch the files once)
    except ImportError:
        raise DataError(
            f"no MNIST files under {root / 'MNIST' / 'raw'} and dataset.download=true needs torchvision, "
            f"which is not installed (pip install 'lnbench[vision]'); or {HOW_TO_GET}."
        ) from None
    try:
        for train in (True, False):
            torchvision.datasets.MNIST(root=str(root), train=train, download=True)
    except Exception as e:  # noqa: BLE001 (network errors come in many types; all mean the same to the user)
        raise DataError(f"downloading MNIST into {root} failed ({e}); {HOW_TO_GET}.") from None


def check_carve(carve: object, where: str) -> tuple[int, int, int]:
    try:
        sizes = tuple(carve)  # a list, tuple or OmegaConf ListConfig
    except TypeError:
        sizes = ()
    if len(sizes) != 3 or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in sizes):
        raise ConfigError(
            f"dataset.carve={carve!r} is not allowed for {where}: it must be three integers >= 1 "
            f"(train, val, test sizes) summing to at most 10000."
        )
    return sizes  # type: ignore[return-value]
