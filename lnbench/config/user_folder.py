"""Your own defaults and presets (the folder lnbench.environment.user_conf_dir names, on Hydra's search path through
hydra_plugins/lnbench_user_config; docs/install.md), refused before anything runs where they are wrong (`check`).

Hydra merges `local/<name>.yaml` whole into every run, so it may set only what every config has: the `site` node
(data folder, W&B entity and project, SLURM partition and account, which the presets interpolate), the run's own
keys (steps, device, ...) and the keys every preset of a group shares. A key only some presets have belongs in
`local/<group>/<preset>.yaml` (Hydra's specialisation: conf/train.yaml's `optional local/dataset: ${dataset}`) or
in a preset of your own. `check` refuses, naming the file and line, what would fail only in some runs, the keys
that moved into `site` (with their new name), and a folder, file or name Hydra would skip silently: one paragraph,
exit 2.
"""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path
from typing import Any

import yaml

from lnbench import CONF_DIR, environment
from lnbench.config.domains import declared, innermost
from lnbench.config.presets import yaml_tree
from lnbench.config.schema import SCHEMAS, TrainConfig, presets
from lnbench.config.validate import did_you_mean
from lnbench.environment import user_conf_dir
from lnbench.errors import ConfigError

LOCAL = "local"  # the group of your defaults files (conf/train.yaml: `optional local: default`)
SPECIALISED = ("model", "dataset", "optim")  # local/<group>/<preset>.yaml: conf/train.yaml's `optional local/...`
FREE = ("hydra", "claims", "tune", "imports", "defaults")  # whose content no lnbench schema types
# Keys your defaults set before the site node, refused with their new name: the presets read them from there.
MOVED = {
    "dataset.data_dir": "site.data_dir",
    "logger.wandb.entity": "site.wandb_entity",
    "logger.wandb.project": "site.wandb_project",
    "hydra.launcher.partition": "site.slurm_partition",
    "hydra.launcher.account": "site.slurm_account",
}
NOT_A_FILE = "it is not a plain file (a folder, a pipe, a device)"
ONE_PRESET = {  # keys below these belong to one preset of the group, which not every run has
    "logger.": "a key of one sink, which not every run has on: choose a logger preset of your own (logger/NAME.yaml "
    "in {where}) with `defaults: [override /logger: NAME]`",
    "hydra.launcher.": "a key of one launcher: write a launcher preset of your own (hydra/launcher/NAME.yaml in "
    "{where}, docs/install.md)",
}


def chosen(overrides: list[str]) -> str:
    """The name `local=NAME` picks (default: default; `local=laptop.yaml` is laptop, as Hydra reads it)."""
    names = [o.split("=", 1)[1] for o in overrides if o.split("=", 1)[0].lstrip("+") == LOCAL and "=" in o]
    return names[-1].removesuffix(".yaml") if names else "default"


# ---- refused before anything runs --------------------------------------------------------------------------------
def check(overrides: list[str]) -> None:
    """The folder, the chosen file, its YAML and its keys, and every other file of yours Hydra may read; raises
    ConfigError naming the file and line."""
    where, name = user_conf_dir(), chosen(overrides)
    given = environment.given("LNBENCH_CONFIG_DIR")
    if where is None:
        if name != "default":
            raise ConfigError(
                f"local={name} is not allowed: LNBENCH_CONFIG_DIR is empty, so the folder of your defaults is off "
                "and has no local/ files. Set LNBENCH_CONFIG_DIR to your folder, or leave local= out."
            )
        return
    named = f"LNBENCH_CONFIG_DIR={given}" if given else f"{where} (the folder of your own defaults)"
    if broken_link(where):
        raise ConfigError(f"{named} is not allowed: {broken_link(where)}. Point it at a folder, or remove the link.")
    if where.exists() and not where.is_dir() or given and not where.is_dir():
        what = "is a file, not a folder" if where.exists() else "does not exist"
        raise ConfigError(
            f"{named} is not allowed: {where} {what}. It holds your own defaults (local/default.yaml in it); "
            + (
                "set LNBENCH_CONFIG_DIR to a folder, or to nothing (LNBENCH_CONFIG_DIR=) for none."
                if given
                else "move the file away, or set LNBENCH_CONFIG_DIR to another folder (LNBENCH_CONFIG_DIR= for none)."
            )
        )
    if not where.is_dir():
        return  # the default folder, absent: no defaults of your own
    if not name or "/" in name or "\\" in name or name.startswith(".") or name == "null":
        there = sorted(p.stem for p in (where / LOCAL).glob("*.yaml"))
        what = {"": "it is empty", "null": "Hydra takes no null here"}.get(name, "it is a path")
        raise ConfigError(
            f"local={name} is not allowed: {what}. local= takes the name of a file in {where / LOCAL}"
            + (f" ({', '.join(there)})" if there else "")
            + "; ~local runs without one. For a file elsewhere, move or link it there, or set LNBENCH_CONFIG_DIR to "
            "the folder above its local/."
        )
    for preset in your_presets(where):  # a broken one is said before it is chosen
        check_file(preset, keys=False)
    if "~local" in overrides:  # Hydra's deletion: no defaults file of yours
        return
    path = where / LOCAL / f"{name}.yaml"
    if broken_link(path):
        raise ConfigError(f"{path} is not allowed: {broken_link(path)}. Fix the link, or remove it.")
    if path.exists() and not path.is_file():
        raise ConfigError(f"{path} is not allowed: {NOT_A_FILE}, where your defaults are a file. Move it away.")
    if not path.is_file():
        if name == "default":
            return  # no defaults of your own: lnbench's presets alone
        there = sorted(p.stem for p in (where / LOCAL).glob("*.yaml"))
        raise ConfigError(
            f"local={name} is not allowed: there is no {path}. "
            + (f"The files there are {', '.join(there)}." if there else f"{where / LOCAL} holds no .yaml file.")
        )
    check_file(path, keys=True)


def broken_link(path: Path) -> str:
    """Why `path` is a link Hydra would take for no file ('' where it is none): a loop, or a link to nothing."""
    try:
        path.stat()
    except OSError as e:
        if e.errno == errno.ELOOP:
            return f"{path} is a symbolic link that loops ({e.strerror})"
        if path.is_symlink():
            return f"{path} is a symbolic link to {os.readlink(path)}, which does not exist"
    return ""


def your_presets(where: Path) -> list[Path]:
    """The YAML files of your folder in the groups Hydra would read them as (model/, hydra/launcher/, local/dataset/,
    ...): only those, so that a folder with much else in it (LNBENCH_CONFIG_DIR=$HOME) is not walked."""
    groups = sorted(
        {d.name for d in CONF_DIR.iterdir() if d.is_dir()} | {"hydra", *(f"local/{g}" for g in SPECIALISED)}
    )
    found = [p for group in groups if (where / group).is_dir() for p in sorted((where / group).glob("**/*.yaml"))]
    for p in found:
        if broken_link(p):
            raise ConfigError(f"{p} is not allowed: {broken_link(p)}. Fix the link, or remove it.")
        if not p.is_file():  # reading a pipe would wait for ever
            raise ConfigError(f"{p} is not allowed: {NOT_A_FILE}. Move it away.")
    return found


def check_file(path: Path, keys: bool) -> None:
    """The file is YAML and a mapping (or empty); with `keys`, each of its keys is one every config has."""
    tree = yaml_tree(path)
    if tree is None:
        return  # an empty file: no defaults
    if not isinstance(tree, yaml.MappingNode):
        raise ConfigError(
            f"{path}, line {tree.start_mark.line + 1}: the file must be a mapping of keys to values (`steps: 500`, "
            f"`site: {{data_dir: /data}}`), not a {type(tree).__name__.removesuffix('Node').lower()}."
        )
    listed = next((v for k, v in tree.value if k.value == "defaults"), None)
    if listed is not None and not (
        isinstance(listed, yaml.SequenceNode)
        and all(
            isinstance(d, yaml.ScalarNode)
            or isinstance(d, yaml.MappingNode)
            and len(d.value) == 1
            and not d.value[0][1].tag.endswith(":null")
            for d in listed.value
        )
    ):
        raise ConfigError(
            f"{path}, line {listed.start_mark.line + 1}: defaults is not allowed as written: Hydra takes a list of "
            "names, or of one `group: name` each with a preset's name "
            "(`defaults: [override /hydra/launcher: cluster]`). Fix the file."
        )
    if keys:
        _check_keys(tree, "", path, every_configs_keys())


def _check_keys(node: Any, prefix: str, path: Path, known: dict[str, Any]) -> None:
    for key_node, value in node.value:
        key = f"{prefix}{key_node.value}"
        at = f"{path}, line {key_node.start_mark.line + 1}"
        if key == "stage":
            raise ConfigError(
                f"{at}: stage is not allowed here: a run's stage (tune, widen, judge) is set by lnbench check's "
                "rounds. Remove the key."
            )
        if key in MOVED:
            raise ConfigError(
                f"{at}: {key} is not allowed in your defaults any more: it is {MOVED[key]} now, which every preset "
                f"that has {key} reads. Write `{MOVED[key].split('.')[1]}:` under `site:` instead."
            )
        if isinstance(value, yaml.MappingNode) and any(k.startswith(f"{key}.") for k in [*MOVED, *ONE_PRESET]):
            _check_keys(value, f"{key}.", path, known)  # hydra: and logger: hold keys refused above
            continue
        if hint := next((h for p, h in ONE_PRESET.items() if key.startswith(p)), None):
            raise ConfigError(f"{at}: {key} is not allowed here: it is {hint.format(where=path.parent.parent)}.")
        if key.split(".", 1)[0] in FREE or _under_free(key, known):
            continue
        kind = known.get(key)
        if kind is None:
            raise ConfigError(f"{at}: {key} is not allowed here: {_why_not(key, known, path)}")
        if isinstance(value, yaml.MappingNode) and kind is dict:
            _check_keys(value, f"{key}.", path, known)
        elif kind is bool and not (isinstance(value, yaml.ScalarNode) and value.tag.endswith(":bool")):
            raise ConfigError(f"{at}: {key}: {value.value} is not allowed: {key} is true or false. Fix the file.")


def _why_not(key: str, known: dict[str, Any], path: Path) -> str:
    group = key.split(".", 1)[0]
    having = sorted(
        name
        for name, base in presets(group).items()
        if group in SPECIALISED and base and key.split(".", 1)[1] in _keys_of(SCHEMAS[group][base])
    )
    if having:
        folder = path.parent / group
        return (
            f"only some {group} presets have it ({', '.join(having)}), and this file applies to every run. Set it "
            f"in {folder}/NAME.yaml (as `{key.split('.', 1)[1]}: ...`), which applies where {group}=NAME."
        )
    parent = key.rpartition(".")[0]
    siblings = [k.rpartition(".")[2] for k in known if k.rpartition(".")[0] == parent]
    return f"no lnbench config has it.{did_you_mean(key.rpartition('.')[2], siblings)} Fix the file, or remove the key."


def _under_free(key: str, known: dict[str, Any]) -> bool:
    """Below a key whose content no schema types (schedule.main)."""
    parts = key.split(".")
    return any(known.get(".".join(parts[:i])) is Any for i in range(1, len(parts)))


def every_configs_keys() -> dict[str, Any]:
    """Every key every lnbench config has -> dict (a node of keys), bool, Any (free below) or object (a value):
    TrainConfig's, and of each group those all its schemas share."""
    known: dict[str, Any] = {}
    _fields(TrainConfig, "", known)
    for group in SPECIALISED:
        known[group] = dict
        shared = set.intersection(*(set(_keys_of(s)) for s in SCHEMAS[group].values()))
        known.update(
            {f"{group}.{k}": v for s in SCHEMAS[group].values() for k, v in _keys_of(s).items() if k in shared}
        )
    return known


def _keys_of(schema: type) -> dict[str, Any]:
    found: dict[str, Any] = {}
    _fields(schema, "", found)
    return found


def _fields(schema: type, prefix: str, known: dict[str, Any]) -> None:
    for key, hint, _ in declared(schema, prefix):
        parts = key.split(".")
        for end in range(prefix.count(".") + 1, len(parts)):  # the nested schemas' nodes on the way
            known[".".join(parts[:end])] = dict
        known.setdefault(key, bool if innermost(hint) is bool else Any if hint is Any else object)


# ---- where a refusal or a value came from ------------------------------------------------------------------------
def located(message: str, key: str) -> str | None:
    """ "FILE, line N" of `key` in your defaults file that Hydra's `message` names (In 'local/NAME': ...)."""
    found, where = re.match(r"In '(local/[^']+)'", message), user_conf_dir()
    if not found or where is None:
        return None
    path = where / f"{found.group(1)}.yaml"
    try:
        text = path.read_text()
        node = yaml.compose(text)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return str(path)
    group = found.group(1).split("/")
    key = key.removeprefix(f"{group[1]}.") if len(group) == 3 else key  # local/dataset/x.yaml holds dataset's keys
    if not key:  # Hydra names no key: the line of the first name it quotes (`Could not override 'nogroup'`)
        names = re.findall(r"'([^']+)'", message[found.end() :])
        lines = [n for n, ln in enumerate(text.splitlines(), 1) for name in names if name in ln]
        return f"{path}, line {lines[0]}" if lines else str(path)
    for part in key.split("."):
        pairs = node.value if isinstance(node, yaml.MappingNode) else []
        match = next(((k, v) for k, v in pairs if str(k.value) == part), None)
        if match is None:
            return str(path)
        line, node = match[0].start_mark.line + 1, match[1]
    return f"{path}, line {line}"


def chose(group: str, name: str, overrides: list[str]) -> str | None:
    """ "FILE, line N" of the file of yours whose defaults list chose `group`=`name` (`override /model: nope`, or a
    bare `- nope` in a file of that group); None where no file of yours did."""
    where = user_conf_dir()
    if where is None or not where.is_dir():
        return None
    word = rf"(?<![\w.-]){re.escape(name)}(?![\w.-])"
    own = rf"/?{re.escape(group)}\s*:\s*{word}"
    for path in [where / LOCAL / f"{chosen(overrides)}.yaml", *your_presets(where)]:
        try:
            lines = path.read_text().splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        bare = rf"^\s*-\s*{word}\s*$" if path.parent.relative_to(where).as_posix() == group else own
        for n, line in enumerate(lines, 1):
            if re.search(own, line) or re.search(bare, line):
                return f"{path}, line {n}"
    return None


def sources(overrides: list[str]) -> str:
    """Where `lnbench train --cfg job` / `--info` took its values from, in the order they apply (later wins)."""
    folder, name = user_conf_dir(), chosen(overrides)
    mine = "off (LNBENCH_CONFIG_DIR is empty)" if folder is None else str(folder / LOCAL / f"{name}.yaml")
    if folder is not None and not (folder / LOCAL / f"{name}.yaml").is_file():
        mine += " (none there)"
    return (
        f"lnbench: the values come from, each over the one before: lnbench's presets in {CONF_DIR} "
        f"(train.yaml and the groups it names); your defaults, {mine}, then local/<group>/<preset>.yaml there; "
        "+experiment=...; the command line. `--info defaults` lists every file."
    )
