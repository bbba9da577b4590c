"""Kept for users' modules written before lnbench.nn.normalizers: `from lnbench.options import register`."""

from lnbench.nn.normalizers import Normalizer, NormConfig, NormKind, normalizer, register  # noqa: F401
