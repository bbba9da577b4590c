"""Datasets: each hands out CPU batches by step (see `base.py` for the contract)."""

from lnbench.data.base import IGNORE_INDEX, Dataset, DataSpec
from lnbench.data.mnist import MNIST, SeqMNIST
from lnbench.data.shakespeare import Shakespeare
from lnbench.data.synthetic import Adding, Copy

__all__ = ["IGNORE_INDEX", "DataSpec", "Dataset", "MNIST", "SeqMNIST", "Adding", "Copy", "Shakespeare"]
