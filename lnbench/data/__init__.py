"""Datasets: each hands out CPU batches by step (see `base.py` for the contract). The classes below are the
configs' `_target_`s (lnbench.config.schema: `lnbench.data.MNIST`, ...)."""

from lnbench.data.mnist import MNIST, SeqMNIST
from lnbench.data.shakespeare import Shakespeare
from lnbench.data.synthetic import Adding, Copy

__all__ = ["MNIST", "SeqMNIST", "Adding", "Copy", "Shakespeare"]
