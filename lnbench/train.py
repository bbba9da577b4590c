"""Kept for users' modules written before lnbench.training.recipe: `from lnbench.train import train`."""

from lnbench.training.recipe import train  # noqa: F401
