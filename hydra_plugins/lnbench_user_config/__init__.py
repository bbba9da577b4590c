"""Your own defaults for every `lnbench train` (W&B entity, data folder, a SLURM partition and account): the folder
$LNBENCH_CONFIG_DIR, else $XDG_CONFIG_HOME/lnbench, else ~/.config/lnbench, on Hydra's config search path.

A search path plugin (Hydra loads them from the hydra_plugins package only), so that it holds for `lnbench train`,
check's sweeps and every config lnbench composes, in a checkout as in an installed wheel, whose conf/ a user cannot
edit. Its `local/default.yaml` is applied to every run (conf/train.yaml's `optional local: default`); any other
group file there is one more preset (`~/.config/lnbench/model/mine.yaml` is `model=mine`). docs/install.md.
"""

from __future__ import annotations

import os
from pathlib import Path

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin

import lnbench

PROVIDER = "lnbench-user"


def user_config_dir() -> Path | None:
    """The folder, or None where LNBENCH_CONFIG_DIR is set empty (for tests: a developer's defaults stay out)."""
    given = os.environ.get("LNBENCH_CONFIG_DIR")
    if given is not None:
        return Path(given).expanduser() if given else None
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config").expanduser() / "lnbench"


class LnbenchUserConfig(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        # Hydra asks every search path plugin of the environment in every Hydra app: only lnbench's gets the folder.
        # (hydra.main gives the main folder as a plain path, initialize_config_dir as a file:// one)
        folder = user_config_dir()
        mains = [e.path.removeprefix("file://") for e in search_path.get_path() if e.provider == "main"]
        if folder is not None and any(Path(p).resolve() == lnbench.CONF_DIR for p in mains):
            search_path.append(PROVIDER, f"file://{folder.absolute()}")


def sources(overrides: list[str]) -> str:
    """Where `lnbench train --cfg job` / `--info` took its values from, in the order they apply (later wins)."""
    folder = user_config_dir()
    chosen = [o.split("=", 1)[1] for o in overrides if o.split("=", 1)[0].lstrip("+") == "local"]
    name = chosen[-1] if chosen else "default"
    mine = "off (LNBENCH_CONFIG_DIR is empty)" if folder is None else str(folder / "local" / f"{name}.yaml")
    if folder is not None and not (folder / "local" / f"{name}.yaml").is_file():
        mine += " (none there)"
    return (
        f"lnbench: the values come from, each over the one before: lnbench's presets in {lnbench.CONF_DIR} "
        f"(train.yaml and the groups it names); your defaults, {mine}; +experiment=...; the command line. "
        "`--info defaults` lists every file."
    )
