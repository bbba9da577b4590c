"""Binarized MNIST: one fixed binarization (the same bits for every run and every split), its pixel
frequencies, the fixed split, batches by seed, clear errors."""

import numpy as np
import pytest
import torch
from conftest import DATA_DIR, HAVE_DATA

from lnbench.data.binarized_mnist import BinarizedMNIST, _splitmix64, binarize, uniforms
from lnbench.errors import ConfigError
from tests.data.test_data import fake_images, make_mnist

real_mnist = pytest.mark.skipif(not HAVE_DATA, reason=f"no MNIST under {DATA_DIR}")


def test_the_counter_generator_is_splitmix64():
    """The first outputs of splitmix64 from state 0 (Vigna's reference implementation): the binarization can
    never change with a library version."""
    got = _splitmix64(np.array([0, 1, 2], dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15))
    assert [int(v) for v in got] == [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F]
    u = uniforms(0, 0, 0, 200_000)
    assert 0 <= u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 0.005


def test_a_pixel_is_on_with_probability_intensity_over_255():
    levels = np.repeat(np.array([0, 51, 128, 204, 255], dtype=np.uint8), 40_000).reshape(-1, 8)
    bits = binarize(levels, seed=3, stream=0).reshape(-1)
    for level in (0, 51, 128, 204, 255):
        freq = bits[levels.reshape(-1) == level].mean()
        # 40,000 draws: 4 standard deviations of a frequency are at most 0.01
        assert abs(freq - level / 255) < 0.01, (level, freq)
    assert bits[levels.reshape(-1) == 0].max() == 0 and bits[levels.reshape(-1) == 255].min() == 1


def test_an_images_bits_depend_on_its_file_index_and_seed_only():
    images = np.random.default_rng(0).integers(0, 256, (50, 784), dtype=np.uint8)
    whole = binarize(images, seed=0, stream=1)
    assert np.array_equal(binarize(images.copy(), seed=0, stream=1), whole)
    assert not np.array_equal(binarize(images, seed=1, stream=1), whole)
    assert not np.array_equal(binarize(images, seed=0, stream=0), whole)  # the train file's image 3 is not t10k's


@pytest.fixture
def fake_dir(tmp_path):
    return make_mnist(tmp_path / "data", n_test=300, n_train=None)


def test_the_data_is_the_same_for_every_run_seed_and_only_the_batch_order_follows_it(fake_dir):
    a = BinarizedMNIST(data_dir=str(fake_dir), batch_size=16, seed=0, carve=[200, 50, 50])
    b = BinarizedMNIST(data_dir=str(fake_dir), batch_size=16, seed=1, carve=[200, 50, 50])
    assert a.digest == b.digest
    for split in ("val", "test"):
        assert all(torch.equal(x, y) for (x, _), (y, _) in zip(a.eval_batches(split), b.eval_batches(split)))
    x, y = a.train_batch(0)
    assert torch.equal(x, y) and set(x.unique().tolist()) <= {0.0, 1.0} and x.shape == (16, 784)
    assert not torch.equal(x, b.train_batch(0)[0])
    assert torch.equal(
        x, BinarizedMNIST(data_dir=str(fake_dir), batch_size=16, seed=0, carve=[200, 50, 50]).train_batch(0)[0]
    )
    c = BinarizedMNIST(data_dir=str(fake_dir), batch_size=16, seed=0, carve=[200, 50, 50], binarize_seed=1)
    assert c.digest != a.digest
    assert a.spec.task == "bound" and a.spec.kind == "binary" and 0 < a.spec.baseline < 784 * np.log(2)


def test_with_the_training_files_the_split_is_larochelle_and_murrays(tmp_path):
    root = make_mnist(tmp_path / "data", n_test=40, n_train=120)
    d = BinarizedMNIST(data_dir=str(root), batch_size=8, seed=0, val_size=20)
    train = binarize(make_images(0, 120), 0, 0)  # the train file's stream: 0
    assert (len(d._splits["train"]), len(d._splits["val"]), len(d._splits["test"])) == (100, 20, 40)
    assert np.array_equal(d._splits["train"], train[:100]) and np.array_equal(d._splits["val"], train[100:])
    assert np.array_equal(d._splits["test"], binarize(make_images(10000, 40), 0, 1))


def make_images(start, n):
    return fake_images(start, n)[0].reshape(n, 784)


@pytest.mark.parametrize(
    "kw,match",
    [
        ({"binarize_seed": -1}, "dataset.binarize_seed=-1 is not allowed"),
        ({"carve": [200, 100, 100]}, r"dataset.carve=\[200, 100, 100\] is not allowed"),
        ({"batch_size": 500}, "dataset.batch_size=500 is not allowed"),
    ],
)
def test_bad_settings_are_refused(fake_dir, kw, match):
    with pytest.raises(ConfigError, match=match):
        BinarizedMNIST(data_dir=str(fake_dir), **{"batch_size": 16, "seed": 0, "carve": [200, 50, 50], **kw})


@real_mnist
def test_the_binarization_of_the_10k_split_here_is_the_recorded_one():
    """docs/experiments.md records this digest: the bits every draw_mnist run on this data trains on."""
    d = BinarizedMNIST(data_dir=str(DATA_DIR), batch_size=128, seed=0)
    assert d.digest.startswith("79a1da1c27ca110e")
    assert "binarize_seed 0" in d.describe() and "79a1da1c27ca110e" in d.describe()
