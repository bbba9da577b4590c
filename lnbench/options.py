"""Kept for users' modules written before lnbench.nn.normalizers: `from lnbench.options import register`."""
from lnbench.nn.normalizers import NormConfig, NormKind, Normalizer, normalizer, register  # noqa: F401
