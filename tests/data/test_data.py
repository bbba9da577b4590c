"""Datasets: shapes and specs, pure step-indexed batches, split hygiene, task semantics, clear errors."""

from __future__ import annotations

import gzip
import math
import os
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from lnbench.data import MNIST, Adding, Copy, SeqMNIST, Shakespeare
from lnbench.data.base import IGNORE_INDEX
from lnbench.data.mnist_files import read_idx
from lnbench.errors import ConfigError, DataError

REPO = Path(__file__).resolve().parents[2]
DATA = Path(os.environ.get("LNBENCH_DATA_DIR", REPO.parent / "shared" / "data"))
HAS_MNIST = (DATA / "MNIST" / "raw" / "t10k-images-idx3-ubyte.gz").is_file()
HAS_SHAKESPEARE = (DATA / "tinyshakespeare" / "input.txt").is_file()
real_mnist = pytest.mark.skipif(not HAS_MNIST, reason=f"no MNIST under {DATA}")
real_shakespeare = pytest.mark.skipif(not HAS_SHAKESPEARE, reason=f"no Tiny Shakespeare under {DATA}")


# --- Fake MNIST files: image i carries its index in pixels 0 and 1, so splits can be traced back. ---


def write_idx(path: Path, arr: np.ndarray, magic: int | None = None) -> Path:
    magic = magic if magic is not None else 0x0800 + arr.ndim
    raw = struct.pack(f">{1 + arr.ndim}I", magic, *arr.shape) + arr.astype(np.uint8).tobytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".gz":
        with gzip.open(path, "wb") as f:
            f.write(raw)
    else:
        path.write_bytes(raw)
    return path


def fake_images(start: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    ids = np.arange(start, start + n)
    # Random pixels so that rows and permutations are visible.
    x = np.random.default_rng(start).integers(0, 256, (n, 28, 28), dtype=np.uint8)
    x[:, 0, 0], x[:, 0, 1] = ids % 256, ids // 256
    return x, (ids % 10).astype(np.uint8)


def make_mnist(root: Path, n_test: int = 300, n_train: int | None = None, gz: bool = True) -> Path:
    """torchvision's layout under root; train ids are 0.., test ids start at 10000."""
    raw, ext = root / "MNIST" / "raw", ".gz" if gz else ""
    pairs = [("t10k", 10000, n_test)] + ([("train", 0, n_train)] if n_train else [])
    for split, start, n in pairs:
        x, y = fake_images(start, n)
        write_idx(raw / f"{split}-images-idx3-ubyte{ext}", x)
        write_idx(raw / f"{split}-labels-idx1-ubyte{ext}", y)
    return root


def ids_of(x: torch.Tensor) -> list[int]:
    """Fake image ids back from unnormalized batches."""
    px = (x.reshape(len(x), -1)[:, :2] * 255).round().long()
    return (px[:, 0] + 256 * px[:, 1]).tolist()


def eval_ids(ds, split: str) -> list[int]:
    return [i for x, _ in ds.eval_batches(split) for i in ids_of(x)]


@pytest.fixture
def fake_dir(tmp_path: Path) -> Path:
    return make_mnist(tmp_path / "data")


# --- MNIST ---


@real_mnist
def test_mnist_real_shapes_spec_and_carve_note():
    ds = MNIST(data_dir=str(DATA), batch_size=32, seed=0)
    x, y = ds.train_batch(0)
    assert x.shape == (32, 784) and x.dtype == torch.float32
    assert y.shape == (32,) and y.dtype == torch.int64 and 0 <= y.min() and y.max() <= 9
    assert ds.spec.kind == "flat" and ds.spec.task == "classify"
    assert ds.spec.num_outputs == 10 and ds.spec.input_size == 784
    assert ds.spec.baseline == pytest.approx(math.log(10))
    assert ds.train_size == 8000
    assert [sum(len(b) for _, b in ds.eval_batches(s)) for s in ("val", "test")] == [1000, 1000]
    assert "carved from the 10k test split" in ds.describe()
    # Standardized with the usual MNIST statistics: roughly zero mean, unit std over a big batch.
    big = MNIST(data_dir=str(DATA), batch_size=2000, seed=0)
    xb, _ = big.train_batch(0)
    assert abs(xb.mean().item()) < 0.05 and abs(xb.std().item() - 1) < 0.05
    raw, _ = MNIST(data_dir=str(DATA), batch_size=32, seed=0, normalize=False).train_batch(0)
    assert raw.min() >= 0 and raw.max() <= 1 and torch.allclose((raw - 0.1307) / 0.3081, x, atol=1e-5)


@real_mnist
def test_mnist_real_carve_deterministic():
    a = MNIST(data_dir=str(DATA), batch_size=50, seed=3, carve=[500, 100, 100])
    b = MNIST(data_dir=str(DATA), batch_size=50, seed=3, carve=[500, 100, 100])
    c = MNIST(data_dir=str(DATA), batch_size=50, seed=4, carve=[500, 100, 100])
    va, vb, vc = (torch.cat([x for x, _ in d.eval_batches("val")]) for d in (a, b, c))
    assert torch.equal(va, vb) and not torch.equal(va, vc)


def test_mnist_carve_disjoint_deterministic_and_covering(fake_dir):
    kw = dict(data_dir=str(fake_dir), batch_size=20, seed=0, normalize=False, carve=(200, 50, 40))
    ds = MNIST(**kw)
    assert ds.train_size == 200 and "carved from the 10k test split" in ds.describe()
    epoch0 = [i for s in range(10) for i in ids_of(ds.train_batch(s)[0])]
    epoch1 = [i for s in range(10, 20) for i in ids_of(ds.train_batch(s)[0])]
    val, test = eval_ids(ds, "val"), eval_ids(ds, "test")
    # Every training image exactly once per epoch, in a new order each epoch.
    assert len(set(epoch0)) == 200 and sorted(epoch0) == sorted(epoch1) and epoch0 != epoch1
    assert len(set(val)) == 50 and len(set(test)) == 40
    assert not (set(epoch0) & set(val) or set(epoch0) & set(test) or set(val) & set(test))
    assert eval_ids(MNIST(**kw), "val") == val
    assert eval_ids(MNIST(**{**kw, "seed": 1}), "val") != val
    # Labels travel with their images.
    x, y = ds.train_batch(0)
    assert [i % 10 for i in ids_of(x)] == y.tolist()


def test_mnist_with_training_files_uses_them(tmp_path):
    root = make_mnist(tmp_path, n_test=30, n_train=100, gz=False)  # plain IDX files read too
    ds = MNIST(data_dir=str(root), batch_size=10, seed=0, val_size=20, normalize=False)
    train = [i for s in range(8) for i in ids_of(ds.train_batch(s)[0])]
    val, test = eval_ids(ds, "val"), eval_ids(ds, "test")
    assert ds.train_size == 80 and sorted(train + val) == list(range(100))
    assert test == list(range(10000, 10030))  # the official test split, untouched and in order
    assert "carved" not in ds.describe()


def test_limit_train_caps_training_set(fake_dir):
    ds = MNIST(data_dir=str(fake_dir), batch_size=10, seed=0, carve=(200, 50, 40), limit_train=30)
    assert ds.train_size == 30 and ds.describe().startswith("mnist: train 30 / val 50 / test 40")


def test_data_dir_relative_and_env_fallback(fake_dir, monkeypatch):
    monkeypatch.chdir(fake_dir.parent)
    assert MNIST(data_dir="data", batch_size=10, seed=0, carve=(100, 50, 50)).train_size == 100
    monkeypatch.setenv("LNBENCH_DATA_DIR", str(fake_dir))
    assert MNIST(data_dir="", batch_size=10, seed=0, carve=(100, 50, 50)).train_size == 100
    monkeypatch.delenv("LNBENCH_DATA_DIR")
    with pytest.raises(DataError, match="LNBENCH_DATA_DIR"):
        MNIST(data_dir=None, batch_size=10, seed=0)


def test_idx_cache_reuses_decoded_arrays(fake_dir):
    path = fake_dir / "MNIST" / "raw" / "t10k-images-idx3-ubyte.gz"
    assert read_idx(path, "images-idx3") is read_idx(path, "images-idx3")


# --- SeqMNIST ---


def test_seq_mnist_rows_and_fixed_permutation(fake_dir):
    kw = dict(data_dir=str(fake_dir), batch_size=16, seed=0, carve=(200, 50, 40), normalize=False)
    flat, _ = MNIST(**kw).train_batch(2)
    seq = SeqMNIST(**kw)
    xs, _ = seq.train_batch(2)
    assert xs.shape == (16, 28, 28) and seq.spec.kind == "sequence" and seq.spec.input_size == 28
    assert seq.spec.seq_len == 28
    assert torch.equal(xs, flat.reshape(16, 28, 28))
    px = SeqMNIST(**kw, seq_len=784, permute=True)
    xp, _ = px.train_batch(2)
    assert xp.shape == (16, 784, 1) and px.spec.input_size == 1
    assert torch.equal(xp[:, :, 0], flat[:, torch.from_numpy(px.perm)])
    # Fixed: the same permutation for every run seed; a different one for another permutation_seed.
    assert np.array_equal(SeqMNIST(**{**kw, "seed": 5}, seq_len=784, permute=True).perm, px.perm)
    assert not np.array_equal(SeqMNIST(**kw, seq_len=784, permute=True, permutation_seed=1).perm, px.perm)
    assert SeqMNIST(**kw, seq_len=16).train_batch(0)[0].shape == (16, 16, 49)


@real_mnist
def test_seq_mnist_real_rows():
    flat, _ = MNIST(data_dir=str(DATA), batch_size=8, seed=0).train_batch(0)
    seq, _ = SeqMNIST(data_dir=str(DATA), batch_size=8, seed=0).train_batch(0)
    img = flat.reshape(8, 28, 28)
    assert all(torch.equal(seq[:, r], img[:, r]) for r in range(28))


def test_seq_mnist_errors(fake_dir):
    kw = dict(data_dir=str(fake_dir), batch_size=10, seed=0)
    with pytest.raises(ConfigError, match=r"dataset\.seq_len=5 .*must divide 784"):
        SeqMNIST(**kw, seq_len=5)
    with pytest.raises(ConfigError, match=r"dataset\.eval_seq_len=56 .*784 pixels"):
        SeqMNIST(**kw, eval_seq_len=56)
    assert SeqMNIST(**kw, eval_seq_len=28, carve=(100, 50, 50)).train_size == 100


# --- Adding ---


def test_adding_targets_markers_and_shapes():
    ds = Adding(batch_size=64, seed=0, seq_len=21)
    x, y = ds.train_batch(0)
    assert x.shape == (64, 21, 2) and x.dtype == torch.float32
    assert y.shape == (64,) and y.dtype == torch.float32
    assert ds.spec.task == "regress" and ds.spec.num_outputs == 1 and ds.spec.input_size == 2
    assert ds.spec.baseline == pytest.approx(1 / 6) and ds.train_size is None
    values, markers = x[..., 0], x[..., 1]
    assert values.min() >= 0 and values.max() <= 1
    assert set(markers.unique().tolist()) == {0.0, 1.0}
    assert (markers[:, :10].sum(1) == 1).all() and (markers[:, 10:].sum(1) == 1).all()
    assert torch.allclose((values * markers).sum(1), y)


def test_adding_predicting_one_scores_one_sixth():
    ds = Adding(batch_size=1, seed=0)
    _, y = ds.generate(200_000, 10, torch.Generator().manual_seed(0))
    assert ((y - 1) ** 2).mean().item() == pytest.approx(1 / 6, abs=0.003)


def test_adding_eval_sets_fixed_distinct_and_at_eval_seq_len():
    ds = Adding(batch_size=8, seed=0, seq_len=10, eval_seq_len=40, val_size=30, test_size=20, eval_batch_size=16)
    val, test = list(ds.eval_batches("val")), list(ds.eval_batches("test"))
    assert [len(b[1]) for b in val] == [16, 14] and [len(b[1]) for b in test] == [16, 4]
    assert val[0][0].shape[1] == 40 and ds.train_batch(0)[0].shape[1] == 10
    assert not torch.equal(val[0][0][:4, :, 0], test[0][0][:4, :, 0])  # distinct streams, not just sizes
    assert torch.equal(val[0][0], next(iter(ds.eval_batches("val")))[0])


def test_fixed_training_set_is_covered_once_per_epoch():
    ds = Adding(batch_size=16, seed=0, train_size=64)
    rows = torch.cat([ds.train_batch(s)[0].flatten(1) for s in range(4)])
    assert ds.train_size == 64 and len(rows.unique(dim=0)) == 64
    again = torch.cat([ds.train_batch(s)[0].flatten(1) for s in range(4, 8)])
    assert torch.equal(rows.unique(dim=0), again.unique(dim=0))


# --- Copy ---


def test_copy_targets_reproduce_symbols():
    ds = Copy(batch_size=32, seed=0, num_symbols=5, copy_len=4, seq_len=15, eval_seq_len=30)
    x, y = ds.train_batch(0)
    assert x.shape == y.shape == (32, 15) and x.dtype == y.dtype == torch.int64
    assert ds.spec.vocab_size == 7 and ds.spec.num_outputs == 7 and ds.spec.task == "tagging"
    assert ds.spec.baseline == pytest.approx(math.log(5)) and ds.spec.seq_len == 15
    assert x[:, :4].min() >= 1 and x[:, :4].max() <= 5
    assert (x[:, 15 - 4 - 1] == 6).all() and (x[:, 4:10] == 0).all() and (x[:, 11:] == 0).all()
    assert torch.equal(y[:, -4:], x[:, :4]) and (y[:, :-4] == IGNORE_INDEX).all()
    xv, yv = next(iter(ds.eval_batches("test")))
    assert xv.shape[1] == 30 and torch.equal(yv[:, -4:], xv[:, :4]) and (xv[:, 25] == 6).all()


def test_copy_minimal_length_and_errors():
    x, y = Copy(batch_size=2, seed=0, copy_len=3, seq_len=7).train_batch(0)
    assert (x[:, 3] == 9).all() and torch.equal(y[:, 4:], x[:, :3])
    with pytest.raises(ConfigError, match=r"dataset\.seq_len=6 .*2 \* copy_len \+ 1 = 7"):
        Copy(batch_size=2, seed=0, copy_len=3, seq_len=6)
    with pytest.raises(ConfigError, match=r"dataset\.eval_seq_len=20"):
        Copy(batch_size=2, seed=0, eval_seq_len=20)


# --- Shakespeare ---


@real_shakespeare
def test_shakespeare_windows_shift_and_decode():
    text = (DATA / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8")
    ds = Shakespeare(data_dir=str(DATA), batch_size=8, seed=0, seq_len=64, eval_seq_len=128)
    x, y = ds.train_batch(0)
    assert x.shape == y.shape == (8, 64) and x.dtype == y.dtype == torch.int64
    assert torch.equal(x[:, 1:], y[:, :-1])
    assert ds.spec.vocab_size == ds.spec.num_outputs == 65 and ds.spec.bits and ds.spec.task == "tagging"
    assert ds.spec.baseline == pytest.approx(math.log(65))
    window = ds.decode(x[0]) + ds.decode(y[0, -1:])
    assert window in text[: int(0.9 * len(text)) + 1]  # drawn from the training part
    assert ds.decode(ds.encode("First Citizen:\n")) == "First Citizen:\n"
    assert ds.train_size == round(0.9 * len(text)) // 64
    val = list(ds.eval_batches("val"))
    xv = torch.cat([b[0] for b in val])
    assert xv.shape == (200, 128) and torch.equal(torch.cat([b[1] for b in val])[:, :-1], xv[:, 1:])
    assert ds.decode(xv[0]) == text[round(0.9 * len(text)) :][:128]  # first window starts the split
    assert "not carried between windows" in ds.describe()


@real_shakespeare
def test_shakespeare_eval_windows_non_overlapping_and_capped():
    text = (DATA / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8")
    test_part = text[round(0.95 * len(text)) :]
    ds = Shakespeare(data_dir=str(DATA), batch_size=4, seed=0, seq_len=500, max_eval_windows=None)
    xs = torch.cat([x for x, _ in ds.eval_batches("test")])
    assert xs.shape == ((len(test_part) - 1) // 500, 500)
    joined = "".join(ds.decode(r) for r in xs)  # consecutive windows tile the split
    assert joined == test_part[: len(joined)]
    capped = Shakespeare(data_dir=str(DATA), batch_size=4, seed=0, seq_len=500, max_eval_windows=10)
    xc = torch.cat([x for x, _ in capped.eval_batches("test")])
    assert len(xc) == 10 and all(any(torch.equal(r, q) for q in xs) for r in xc)
    assert torch.equal(xc[0], xs[0]) and not torch.equal(xc[1], xs[1])  # spread out, not a prefix


# --- Purity and errors, for every dataset ---


def builders(fake: Path):
    kw = dict(data_dir=str(fake), carve=(200, 50, 40))
    out = {
        "mnist": lambda seed: MNIST(batch_size=8, seed=seed, **kw),
        "seq_mnist": lambda seed: SeqMNIST(batch_size=8, seed=seed, **kw),
        "adding": lambda seed: Adding(batch_size=8, seed=seed),
        "adding_fixed": lambda seed: Adding(batch_size=8, seed=seed, train_size=32),
        "copy": lambda seed: Copy(batch_size=8, seed=seed),
    }
    if HAS_SHAKESPEARE:
        out["shakespeare"] = lambda seed: Shakespeare(data_dir=str(DATA), batch_size=8, seed=seed)
    return out


def test_train_batch_is_a_pure_function_of_seed_and_step(fake_dir):
    for name, make in builders(fake_dir).items():
        a, b, c = make(0), make(0), make(1)
        xa, ya = a.train_batch(7)
        xb, yb = b.train_batch(7)
        assert torch.equal(xa, xb) and torch.equal(ya, yb), name
        assert torch.equal(a.train_batch(7)[0], xa), name  # no hidden iterator state
        assert not torch.equal(a.train_batch(8)[0], xa), name
        assert not torch.equal(c.train_batch(7)[0], xa), name
        assert a.describe().startswith(name.split("_fixed")[0]), name


@pytest.mark.parametrize("cls", [MNIST, SeqMNIST, Adding, Copy, Shakespeare])
def test_batch_size_zero_is_a_config_error(cls, fake_dir):
    kw = {"data_dir": str(fake_dir)} if cls in (MNIST, SeqMNIST, Shakespeare) else {}
    with pytest.raises(ConfigError, match=r"dataset\.batch_size=0 is not allowed"):
        cls(batch_size=0, seed=0, **kw)


def test_missing_data_is_a_data_error_naming_the_path(tmp_path):
    with pytest.raises(DataError, match=str(tmp_path)) as e:
        MNIST(data_dir=str(tmp_path), batch_size=8, seed=0)
    assert "LNBENCH_DATA_DIR" in str(e.value) and "download" in str(e.value)
    with pytest.raises(DataError, match=str(tmp_path)):
        Shakespeare(data_dir=str(tmp_path), batch_size=8, seed=0)


def test_download_without_torchvision_is_a_data_error(tmp_path):
    try:
        import torchvision  # noqa: F401
    except ImportError:
        with pytest.raises(DataError, match="torchvision"):
            MNIST(data_dir=str(tmp_path), batch_size=8, seed=0, download=True)
    else:
        pytest.skip("torchvision is installed: would try to download")


def test_truncated_idx_file_is_a_data_error(tmp_path):
    root = make_mnist(tmp_path / "plain", gz=False)
    img = root / "MNIST" / "raw" / "t10k-images-idx3-ubyte"
    img.write_bytes(img.read_bytes()[:-100])
    with pytest.raises(DataError, match=f"{img}.*truncated"):
        MNIST(data_dir=str(root), batch_size=8, seed=0)
    gz = make_mnist(tmp_path / "gz")
    img = gz / "MNIST" / "raw" / "t10k-images-idx3-ubyte.gz"
    img.write_bytes(img.read_bytes()[:-50])  # a cut gzip stream
    with pytest.raises(DataError, match=str(img)):
        MNIST(data_dir=str(gz), batch_size=8, seed=0)


@real_mnist
def test_truncated_copy_of_real_file_is_a_data_error(tmp_path):
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    src = DATA / "MNIST" / "raw"
    (raw / "t10k-labels-idx1-ubyte.gz").write_bytes((src / "t10k-labels-idx1-ubyte.gz").read_bytes())
    data = gzip.decompress((src / "t10k-images-idx3-ubyte.gz").read_bytes())
    (raw / "t10k-images-idx3-ubyte").write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError, match="truncated"):
        MNIST(data_dir=str(tmp_path), batch_size=8, seed=0)


def test_bad_magic_number_is_a_data_error(tmp_path):
    root = make_mnist(tmp_path)
    x, _ = fake_images(0, 300)
    write_idx(root / "MNIST" / "raw" / "t10k-labels-idx1-ubyte.gz", x, magic=0x0803)  # images as labels
    with pytest.raises(DataError, match=r"t10k-labels-idx1-ubyte\.gz has magic number 0x00000803"):
        MNIST(data_dir=str(root), batch_size=8, seed=0)


def test_carve_larger_than_the_file_is_a_config_error(fake_dir):
    with pytest.raises(ConfigError, match=r"dataset\.carve=\[200, 100, 100\]"):
        MNIST(data_dir=str(fake_dir), batch_size=8, seed=0, carve=[200, 100, 100])


def test_hydra_instantiate_with_listconfig(fake_dir):
    hydra_utils = pytest.importorskip("hydra.utils")
    from omegaconf import OmegaConf

    cfg = OmegaConf.create(
        {
            "_target_": "lnbench.data.MNIST",
            "data_dir": str(fake_dir),
            "batch_size": 8,
            "seed": 0,
            "carve": [100, 50, 50],
        }
    )
    assert hydra_utils.instantiate(cfg).train_size == 100
