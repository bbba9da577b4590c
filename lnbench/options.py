"""Kept for users' modules written before lnbench.nn.normalizers: `from lnbench.options import register`.
Deprecated: removed in lnbench 0.4; import from lnbench.nn.normalizers."""

import warnings

from lnbench.nn.normalizers import Normalizer, NormConfig, NormKind, normalizer, register  # noqa: F401

REMOVED_IN = "0.4"
warnings.warn(
    f"lnbench.options is deprecated and will be removed in lnbench {REMOVED_IN}: "
    "import from lnbench.nn.normalizers (register, normalizer, Normalizer, NormConfig, NormKind).",
    DeprecationWarning,
    stacklevel=2,
)
