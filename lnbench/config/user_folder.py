"""Your own defaults that cannot break lnbench (the folder of hydra_plugins/lnbench_user_config; docs/install.md).

`local/<name>.yaml` there applies to every run, whatever it trains. So a key that only some configs have (a
dataset's `data_dir`, `logger.wandb.entity` when W&B is off, a SLURM key under the basic launcher) is applied where
the config has it and ignored elsewhere (`applicable`, which lnbench's Hydra hook calls while Hydra composes, in
every process), and this is said once (`say_ignored`). What no config has, a value of the wrong kind, a file that
is not YAML, a folder that is not one and `local=NAME` with no such file are refused before anything runs (`check`):
one paragraph naming the file and line, exit 2.
"""

from __future__ import annotations

import dataclasses
import re
import sys
import typing
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf

from hydra_plugins.lnbench_user_config import user_config_dir
from lnbench import CONF_DIR, environment
from lnbench.config.schema import SCHEMAS, TrainConfig
from lnbench.config.validate import did_you_mean
from lnbench.errors import ConfigError

LOCAL = "local"  # the group of your defaults files (conf/train.yaml: `optional local: default`)
GROUPS = ("model", "dataset", "optim", "schedule")  # typed by one of several schemas (lnbench.config.schema.SCHEMAS)
FREE = ("hydra", "claims", "tune", "imports", "defaults")  # whose content no lnbench schema types

_ignored: dict[str, str] = {}  # key -> the file that set it: ignored while composing, not said yet
_said: set[str] = set()


def folder() -> Path | None:
    return user_config_dir()


def chosen(overrides: list[str]) -> str:
    """The name `local=NAME` picks (default: default)."""
    names = [o.split("=", 1)[1] for o in overrides if o.split("=", 1)[0].lstrip("+") == LOCAL and "=" in o]
    return names[-1] if names else "default"


# ---- refused before anything runs --------------------------------------------------------------------------------
def check(overrides: list[str]) -> None:
    """The folder, the chosen file, its YAML and its keys; raises ConfigError naming the file and line."""
    where, name = folder(), chosen(overrides)
    given = environment.given("LNBENCH_CONFIG_DIR")
    if where is None:
        if name != "default":
            raise ConfigError(
                f"local={name} is not allowed: LNBENCH_CONFIG_DIR is empty, so the folder of your defaults is off "
                "and has no local/ files. Set LNBENCH_CONFIG_DIR to your folder, or leave local= out."
            )
        return
    if where.exists() and not where.is_dir() or given and not where.is_dir():
        what = "is a file, not a folder" if where.exists() else "does not exist"
        named = f"LNBENCH_CONFIG_DIR={given}" if given else f"{where} (the folder of your own defaults)"
        raise ConfigError(
            f"{named} is not allowed: {where} {what}. It holds your own defaults (local/default.yaml in it); "
            + (
                "set LNBENCH_CONFIG_DIR to a folder, or to nothing (LNBENCH_CONFIG_DIR=) for none."
                if given
                else "move the file away, or set LNBENCH_CONFIG_DIR to another folder (LNBENCH_CONFIG_DIR= for none)."
            )
        )
    if not name:
        raise ConfigError(f"local= is not allowed: it is empty. Give a file's name in {where / LOCAL} (local=NAME).")
    for preset in your_presets(where):  # a broken one is said before it is chosen
        check_file(preset, where, keys=False)
    path = where / LOCAL / f"{name}.yaml"
    if path.exists() and not path.is_file():
        raise ConfigError(f"{path} is not allowed: it is a folder, where your defaults are a file. Move it away.")
    if not path.is_file():
        if name == "default":
            return  # no defaults of your own: lnbench's presets alone
        there = sorted(p.stem for p in (where / LOCAL).glob("*.yaml"))
        raise ConfigError(
            f"local={name} is not allowed: there is no {path}. "
            + (f"The files there are {', '.join(there)}." if there else f"{where / LOCAL} holds no .yaml file.")
        )
    check_file(path, where)


def your_presets(where: Path) -> list[Path]:
    """The YAML files of your folder in the groups Hydra would read them as (model/, hydra/launcher/, ...): only
    those, so that a folder with much else in it (LNBENCH_CONFIG_DIR=$HOME) is not walked."""
    groups = sorted({d.name for d in CONF_DIR.iterdir() if d.is_dir()} | {"hydra"})
    return [p for group in groups if (where / group).is_dir() for p in sorted((where / group).glob("**/*.yaml"))]


def check_file(path: Path, where: Path, keys: bool = True) -> None:
    """The file is YAML and a mapping (or empty); with `keys`, each of its keys is one some config has."""
    try:
        tree = yaml.compose(path.read_text())
    except yaml.YAMLError as e:
        raise ConfigError(f"{path} is not YAML: {yaml_problem(e)}. Fix the file, or move it away.") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path} cannot be read ({e}). Fix the file, or move it away.") from None
    if tree is None:
        return  # an empty file: no defaults
    if not isinstance(tree, yaml.MappingNode):
        raise ConfigError(
            f"{path}, line {tree.start_mark.line + 1}: the file must be a mapping of keys to values (`steps: 500`, "
            f"`dataset: {{data_dir: /data}}`), not a {type(tree).__name__.removesuffix('Node').lower()}."
        )
    if keys:
        _check_keys(tree, "", path, known_keys(where))


def yaml_problem(error: Exception) -> str:
    """A YAML error as `line L, column C: problem`."""
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    problem = " ".join(str(getattr(error, "problem", None) or error).split())
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}" if mark else problem


def _check_keys(node: Any, prefix: str, path: Path, known: dict[str, Any]) -> None:
    for key_node, value in node.value:
        key = f"{prefix}{key_node.value}"
        line = key_node.start_mark.line + 1
        if key == "stage":
            raise ConfigError(
                f"{path}, line {line}: stage is not allowed here: a run's stage (tune, widen, judge) is set by "
                "lnbench check's rounds. Remove the key."
            )
        if key.split(".", 1)[0] in FREE or _under_free(key, known):
            continue
        kind = known.get(key)
        if kind is None:
            raise ConfigError(
                f"{path}, line {line}: {key} is not a key of any lnbench config, so it would never apply."
                f"{_near(key, known)} Fix the file, or remove the key."
            )
        if isinstance(value, yaml.MappingNode) and kind is dict:
            _check_keys(value, f"{key}.", path, known)
        elif kind is bool and not (isinstance(value, yaml.ScalarNode) and value.tag.endswith(":bool")):
            raise ConfigError(
                f"{path}, line {line}: {key}: {value.value} is not allowed: {key} is true or false. Fix the file."
            )


def _under_free(key: str, known: dict[str, Any]) -> bool:
    """Below a key whose content no schema types (schedule.main, a sink of your own without a schema)."""
    parts = key.split(".")
    return any(known.get(".".join(parts[:i])) is Any for i in range(1, len(parts)))


def _near(key: str, known: dict[str, Any]) -> str:
    parent = key.rpartition(".")[0]
    siblings = [k.rpartition(".")[2] for k in known if k.rpartition(".")[0] == parent]
    return did_you_mean(key.rpartition(".")[2], siblings)


def located(message: str, key: str) -> str | None:
    """ "FILE, line N" of `key` in your defaults file that Hydra's `message` names (In 'local/NAME': ...)."""
    found, where = re.match(r"In '(local/[^']+)'", message), folder()
    if not found or where is None:
        return None
    path = where / f"{found.group(1)}.yaml"
    try:
        node = yaml.compose(path.read_text())
    except (OSError, yaml.YAMLError):
        return str(path)
    for part in key.split(".") if key else ():
        pairs = node.value if isinstance(node, yaml.MappingNode) else []
        match = next(((k, v) for k, v in pairs if str(k.value) == part), None)
        if match is None:
            return str(path)
        line, node = match[0].start_mark.line + 1, match[1]
    return f"{path}, line {line}" if key else str(path)


def known_keys(where: Path | None) -> dict[str, Any]:
    """Every key some lnbench config has -> dict (a node of keys), bool, Any (free below) or object (a value):
    TrainConfig's, each group's over all its schemas and your own presets, each sink's."""
    known: dict[str, Any] = {}
    _fields(TrainConfig, "", known)
    for group in GROUPS:
        known[group] = dict
        for schema in SCHEMAS[group].values():
            _fields(schema, f"{group}.", known)
        for preset in _yaml_files(where, group):  # a preset of your own: the keys it writes
            _keys_of(preset, f"{group}.", known)
    known["logger"] = dict
    for sink in {p.stem for p in (CONF_DIR / "logger").glob("*.yaml")} | {p.stem for p in _yaml_files(where, "logger")}:
        schema = SCHEMAS["logger"].get(f"base_{sink}")
        known[f"logger.{sink}"] = dict if schema else Any
        if schema:
            _fields(schema, f"logger.{sink}.", known)
    return known


def _fields(schema: type, prefix: str, known: dict[str, Any]) -> None:
    hints = typing.get_type_hints(schema)
    for f in dataclasses.fields(schema):
        hint = hints.get(f.name, Any)
        inner = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
        if dataclasses.is_dataclass(inner[0]):
            known[f"{prefix}{f.name}"] = dict
            _fields(inner[0], f"{prefix}{f.name}.", known)
        elif f"{prefix}{f.name}" not in known:
            known[f"{prefix}{f.name}"] = bool if inner[0] is bool else Any if hint is Any else object


def _yaml_files(where: Path | None, group: str) -> list[Path]:
    return sorted((where / group).glob("*.yaml")) if where is not None and (where / group).is_dir() else []


def _keys_of(preset: Path, prefix: str, known: dict[str, Any]) -> None:
    try:
        data = yaml.safe_load(preset.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return  # Hydra says what is wrong with it, if it is ever chosen
    for key, value in data.items() if isinstance(data, dict) else ():
        if key != "defaults":
            known.setdefault(f"{prefix}{key}", Any if isinstance(value, dict) else object)


# ---- applied where the config has the key (called by lnbench's Hydra hook, in every process) ---------------------
def applicable(mine: Any, reference: Any, file: str) -> Any:
    """`mine` (your defaults file, loaded) without the keys the config composed without it (`reference`) does not
    have: a key under a schema's node that it lacks, or a logger entry for a sink that is not on. Ignored keys are
    kept for say_ignored."""

    def plain(value: Any) -> Any:
        return OmegaConf.to_container(value, resolve=False) if OmegaConf.is_config(value) else value

    def keep(node: Any, ref: Any, prefix: str) -> dict[str, Any]:
        out = {}
        for key in node.keys():
            full, value = f"{prefix}{key}", node._get_node(key)
            there = ref._get_node(key) if isinstance(ref, DictConfig) and key in ref else None
            if full == "defaults":
                out[key] = plain(value)  # Hydra has read it already (the defaults tree)
            elif there is None:
                if _open(ref) and prefix != "logger.":  # a new key where any is welcome (hydra.job.env_set)
                    out[key] = plain(value)
                else:  # a key of a schema this config does not use, or a sink that is not on
                    for leaf in _leaves(value, full):
                        _ignored.setdefault(leaf, file)
            elif isinstance(value, DictConfig) and isinstance(there, DictConfig) and not value._is_none():
                out[key] = keep(value, there, f"{full}.")
            else:
                out[key] = plain(value)
        return out

    return OmegaConf.create(keep(mine, reference, ""))


def _leaves(value: Any, key: str) -> list[str]:
    """The keys as the file spells them: logger.wandb.entity, not logger.wandb."""
    if isinstance(value, DictConfig) and not value._is_none() and len(value):
        return [leaf for k in value.keys() for leaf in _leaves(value._get_node(k), f"{key}.{k}")]
    return [key]


def _open(node: Any) -> bool:
    """A node that takes new keys (no schema behind it): logger's entries, hydra.job.env_set, ..."""
    return isinstance(node, DictConfig) and OmegaConf.get_type(node) in (dict, None) and not node._get_flag("struct")


def say_ignored() -> None:
    """Once per process and key, on stderr: the keys of your defaults this config does not have."""
    new = {k: f for k, f in _ignored.items() if k not in _said}
    if not new:
        return
    _said.update(new)
    for file in sorted(set(new.values())):
        keys = sorted(k for k, f in new.items() if f == file)
        print(
            f"lnbench: your defaults in {file} set {', '.join(keys)}, which this config has no key for: "
            f"{'it is' if len(keys) == 1 else 'they are'} ignored here and applied where a config has "
            f"{'it' if len(keys) == 1 else 'them'} (e.g. a dataset read from files, a sink that is on).",
            file=sys.stderr,
        )
