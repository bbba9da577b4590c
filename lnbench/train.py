"""Kept for users' modules written before lnbench.training.recipe: `from lnbench.train import train`.
Deprecated: removed in lnbench 0.4; import from lnbench.training.recipe."""

import warnings

from lnbench.training.recipe import train  # noqa: F401

REMOVED_IN = "0.4"
warnings.warn(
    f"lnbench.train is deprecated and will be removed in lnbench {REMOVED_IN}: "
    "import train from lnbench.training.recipe.",
    DeprecationWarning,
    stacklevel=2,
)
