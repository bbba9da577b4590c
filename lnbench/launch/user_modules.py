"""The user's own modules a run names (`imports: [mypkg.mynorm]`), imported in every process of the run:
the CLI before it checks the config, each sweep job's process (a joblib worker, a submitit job) before its
job. A module that registers a normalizer, a model or a dataset works under every launcher that way.

Names resolve as `python -c 'import NAME'` does where lnbench was started: the current directory, then
PYTHONPATH and the installed packages.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Iterable

from lnbench.errors import ConfigError


def load(names: Iterable[str]) -> None:
    """Imports each module once per process. One that does not exist is a ConfigError; one that raises while
    it is imported has a bug, which passes unchanged (lnbench.launch.failures)."""
    names = [str(n) for n in names or ()]
    if names and os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())  # the console script's path starts at its own folder, not the user's
    for name in names:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as e:
            if not e.name or not f"{name}.".startswith(f"{e.name}."):
                raise  # the module exists; an import inside it failed
            raise ConfigError(
                f"imports={names} is not allowed: there is no module {e.name!r} here ({e}). Give importable module "
                f"names (mypkg.mynorm): installed, or on PYTHONPATH, or in the folder lnbench is started from."
            ) from None
