"""Your own defaults for every `lnbench train` (W&B entity, data folder, a SLURM partition and account): the folder
$LNBENCH_CONFIG_DIR, else $XDG_CONFIG_HOME/lnbench, else ~/.config/lnbench, on Hydra's config search path.

A search path plugin (Hydra loads them from the hydra_plugins package only), so that it holds for `lnbench train`,
check's sweeps and every config lnbench composes, in a checkout as in an installed wheel, whose conf/ a user cannot
edit. Its `local/default.yaml` is applied to every run (conf/train.yaml's `optional local: default`), at the top of
the config whether or not it says `# @package _global_` (UserFolderSource), each key where the config has it
(`applied_where_it_exists`); any other group file there is one more preset (`~/.config/lnbench/model/mine.yaml` is
`model=mine`). docs/install.md.
"""

from __future__ import annotations

import os
from pathlib import Path

from hydra.core.config_search_path import ConfigSearchPath
from hydra.core.object_type import ObjectType
from hydra.plugins.config_source import ConfigLoadError, ConfigResult, ConfigSource
from hydra.plugins.search_path_plugin import SearchPathPlugin
from omegaconf import OmegaConf

import lnbench
from lnbench import environment
from lnbench.config.overrides import applied_where_it_exists

PROVIDER = "lnbench-user"
SCHEME = "lnbench-user"  # UserFolderSource's: the folder as Hydra's file source reads it, with local/'s package


def user_config_dir() -> Path | None:
    """The folder, or None where LNBENCH_CONFIG_DIR is set empty (for tests: a developer's defaults stay out)."""
    given = environment.given("LNBENCH_CONFIG_DIR")  # its ~user checked before any command (lnbench.environment)
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
            search_path.append(PROVIDER, f"{SCHEME}://{folder.absolute()}")


class UserFolderSource(ConfigSource):
    """Hydra's file source (hydra._internal's FileConfigSource, whose few lines are here so that no private class
    is used), but a file of local/ lands at the top of the config without a `# @package _global_` line, so that a
    file written without it, or an empty one, is no error."""

    def __init__(self, provider: str, path: str) -> None:
        super().__init__(provider=provider, path=path if "://" in path else f"{SCHEME}://{path}")

    @staticmethod
    def scheme() -> str:
        return SCHEME

    def load_config(self, config_path: str) -> ConfigResult:
        full = os.path.realpath(os.path.join(self.path, self._normalize_file_name(config_path)))
        if not os.path.exists(full):
            raise ConfigLoadError(f"Config not found : {full}")
        with open(full, encoding="utf-8") as f:
            header = ConfigSource._get_header_dict(f.read(512))
            f.seek(0)
            cfg = OmegaConf.load(f)
        if config_path.startswith("local/") and header.get("package") is None:
            header["package"] = "_global_"
        return ConfigResult(config=cfg, path=f"{self.scheme()}://{self.path}", provider=self.provider, header=header)

    def available(self) -> bool:
        return self.is_group("")

    def is_group(self, config_path: str) -> bool:
        return os.path.isdir(os.path.realpath(os.path.join(self.path, config_path)))

    def is_config(self, config_path: str) -> bool:
        return os.path.isfile(os.path.realpath(os.path.join(self.path, self._normalize_file_name(config_path))))

    def list(self, config_path: str, results_filter: ObjectType | None) -> list[str]:
        files: list[str] = []
        folder = os.path.realpath(os.path.join(self.path, config_path))
        for name in os.listdir(folder):
            self._list_add_result(
                files=files, file_path=os.path.join(config_path, name), file_name=name, results_filter=results_filter
            )
        return sorted(set(files))


def user_file(path: str) -> str:
    """The file a config path of ours (`local/default`) was read from, for what lnbench says of it."""
    folder = user_config_dir()
    return str(folder / f"{path}.yaml") if folder is not None else path


# Your defaults file, applied key by key where the config has the key (lnbench.config.overrides says how).
applied_where_it_exists(PROVIDER, user_file)


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
