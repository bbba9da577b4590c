"""Your own defaults and presets for every `lnbench train`: the folder lnbench.environment.user_conf_dir() names,
on Hydra's config search path after lnbench's presets (a SearchPathPlugin: Hydra's public way, which it loads from
hydra_plugins only, so that it holds for `lnbench train`, check's sweeps and every config lnbench composes, in a
checkout as in an installed wheel, whose conf/ a user cannot edit).

What it holds is plain Hydra: conf/train.yaml's `optional local: default` merges local/default.yaml (local=NAME:
local/NAME.yaml), its `optional local/dataset: ${dataset}` (model, optim) the file of the chosen preset; any other
group file is one more preset (`model/mine.yaml` is `model=mine`). lnbench.config.user_folder refuses what is wrong
there before anything runs; docs/install.md. This module imports only downward (lnbench), never the other way.
"""

from __future__ import annotations

import os
from pathlib import Path

from hydra.core.config_search_path import ConfigSearchPath
from hydra.core.object_type import ObjectType
from hydra.plugins.config_source import ConfigLoadError, ConfigResult, ConfigSource
from hydra.plugins.search_path_plugin import SearchPathPlugin
from omegaconf import OmegaConf

from lnbench import CONF_DIR
from lnbench.environment import user_conf_dir

PROVIDER = "lnbench-user"
SCHEME = "lnbench-user"  # UserFolderSource's: the folder as Hydra's file source reads it, with local/'s packages


class LnbenchUserConfig(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        # Hydra asks every search path plugin of the environment in every Hydra app: only lnbench's gets the folder.
        # (hydra.main gives the main folder as a plain path, initialize_config_dir as a file:// one)
        folder = user_conf_dir()
        mains = [e.path.removeprefix("file://") for e in search_path.get_path() if e.provider == "main"]
        if folder is not None and any(Path(p).resolve() == CONF_DIR for p in mains):
            search_path.append(PROVIDER, f"{SCHEME}://{folder.absolute()}")


class UserFolderSource(ConfigSource):
    """Hydra's file source (hydra._internal's FileConfigSource, whose few lines are here so that no private class
    is used), but a file of local/ without a `# @package` line lands where it is meant to: local/NAME.yaml at the
    top of the config, local/GROUP/NAME.yaml in that group's node (`data_dir: /x`, not `dataset: {data_dir: /x}`)."""

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
        parts = config_path.split("/")
        if parts[0] == "local" and header.get("package") is None:
            header["package"] = parts[1] if len(parts) == 3 else "_global_"
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
