"""The presets of conf/ and the one model of a sweep's axes (`Sweep`), and `lnbench presets`: the experiment,
model, dataset and optimizer presets, each with its one-line description, read from conf/ (each preset's first
comment line; an experiment's axes from its hydra.sweeper.params), so the list never goes stale and nothing is
typed twice. The one reader of conf/<group>/*.yaml as written (`read_preset`, `preset_names`): the schemas'
list of presets (lnbench.config.schema.presets), the claims, `lnbench check` and the bench ask here. Presets are
found where Hydra finds them (lnbench.environment.conf_dirs): lnbench's conf/, then the folder of your own, so
that a claim preset of yours is one `lnbench check` runs."""

from __future__ import annotations

import shutil
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from lnbench.config import overrides
from lnbench.environment import conf_dirs
from lnbench.errors import ConfigError

# A YAML file whose aliases expand past this many values is refused: no config needs it, and one that does (a
# "billion laughs" file: a few lines, 10^9 values) would hang Hydra, which expands every alias.
MAX_VALUES = 100_000

GROUPS = {
    "experiment": "lnbench train -m +experiment=NAME",
    "model": "lnbench train model=NAME",
    "dataset": "lnbench train dataset=NAME",
    "optim": "lnbench train optim=NAME",
    "schedule": "lnbench train schedule=NAME",
    "logger": "lnbench train logger=NAME",
}


@dataclass
class Preset:
    group: str
    name: str
    description: str
    axes: dict[str, str]  # experiments: swept key -> values


def preset_file(group: str, name: str, conf_dir: Path | str | None = None) -> Path:
    """The file of a preset: in `conf_dir`, or where Hydra finds it (lnbench's conf/ first, then yours)."""
    dirs = [Path(conf_dir)] if conf_dir is not None else conf_dirs()
    files = [d / group / f"{name}.yaml" for d in dirs]
    return next((f for f in files if f.exists()), files[0])


def preset_names(group: str, conf_dir: Path | str | None = None) -> list[str]:
    """The presets of <group> in `conf_dir`, or wherever Hydra finds them, sorted."""
    dirs = [Path(conf_dir)] if conf_dir is not None else conf_dirs()
    return sorted({p.stem for d in dirs for p in (d / group).glob("*.yaml")})


def read_preset(group: str, name: str, conf_dir: Path | str | None = None) -> dict[str, Any]:
    """<group>/<name>.yaml as written (the preset's own keys, before Hydra composes it)."""
    return read_yaml(preset_file(group, name, conf_dir)) or {}


def yaml_tree(path: Path) -> yaml.Node | None:
    """The YAML file's node tree (None: empty), refused (ConfigError naming the file) where it cannot be read, is
    not YAML, nests past Python's recursion, or holds an alias that expands past MAX_VALUES or into itself."""
    if path.exists() and not path.is_file():  # reading a pipe would wait for ever
        raise ConfigError(f"{path} is not allowed: it is not a plain file (a folder, a pipe, a device). Move it away.")
    try:
        tree = yaml.compose(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise ConfigError(f"{path} is not YAML: {yaml_problem(e)}. Fix the file, or move it away.") from None
    except (OSError, UnicodeDecodeError) as e:
        why = getattr(e, "strerror", None) or e
        raise ConfigError(f"{path} cannot be read ({why}). Fix the file, or move it away.") from None
    except RecursionError:
        raise ConfigError(f"{path} is not allowed: it nests deeper than any config does. Fix the file.") from None
    if tree is not None and _values(tree, {}, path) > MAX_VALUES:
        raise ConfigError(
            f"{path} is not allowed: its aliases (*name) expand to more than {MAX_VALUES:,} values, which no config "
            "needs (a YAML 'billion laughs' file would never finish loading). Write the values out, or move it away."
        )
    return tree


def _values(node: yaml.Node, seen: dict[int, int], path: Path) -> int:
    """The values `node` expands to, each alias counted as often as it is used (memoised: linear in the file)."""
    if id(node) in seen:
        if seen[id(node)] < 0:
            line = node.start_mark.line + 1
            raise ConfigError(f"{path}, line {line}: an alias (*name) there contains itself. Fix the file.")
        return seen[id(node)]
    seen[id(node)] = -1
    children = [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else node.value
    total = 1 + (sum(_values(c, seen, path) for c in children) if isinstance(children, list) else 0)
    seen[id(node)] = total
    return total


def read_yaml(path: Path) -> Any:
    """The YAML file as Python values, refused as yaml_tree refuses it."""
    return None if yaml_tree(path) is None else yaml.safe_load(path.read_text(encoding="utf-8"))


def yaml_problem(error: Exception) -> str:
    """A YAML error as `line L, column C: problem`."""
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    problem = " ".join(str(getattr(error, "problem", None) or error).split())
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}" if mark else problem


def read_presets(conf_dir: Path | None = None) -> list[Preset]:
    found = []
    for group in GROUPS:
        for name in preset_names(group, conf_dir):
            path = preset_file(group, name, conf_dir)
            axes = sweeper_params(read_yaml(path))  # first: it refuses what cannot be read
            found.append(Preset(group, name, description(path.read_text()), axes))
    return found


# ---- a sweep's axes: one model -----------------------------------------------------------------
def read_experiment(name: str, conf_dir: Path | str | None = None) -> dict[str, Any]:
    return read_preset("experiment", name, conf_dir)


def experiments(conf_dir: Path | str | None = None) -> dict[str, dict[str, Any]]:
    """Every experiment preset as written, by name (experiment/*.yaml, sorted)."""
    return {name: read_experiment(name, conf_dir) for name in preset_names("experiment", conf_dir)}


def sweeper_params(config: Any) -> dict[str, str]:
    """hydra.sweeper.params of a preset or of what multirun.yaml recorded: key -> its values as written."""
    node: Any = config
    for part in ("hydra", "sweeper", "params"):
        node = node.get(part) if hasattr(node, "get") else None
    return {str(k): str(v) for k, v in (node or {}).items()}


@dataclass(frozen=True)
class Sweep:
    """A basic sweep: its preset's axes (hydra.sweeper.params) and the command line's overrides, which Hydra's
    basic sweeper combines (a key on the command line replaces the preset's)."""

    params: dict[str, str]
    task: tuple[str, ...] = ()

    @classmethod
    def from_record(cls, record: Any) -> "Sweep | None":
        """The sweep Hydra recorded in a sweep's multirun.yaml (read by lnbench.runs.reader.recorded_sweep); None
        where `record` is not such a record."""
        if not isinstance(record, dict) or not isinstance(record.get("hydra"), dict):
            return None
        task = (record["hydra"].get("overrides") or {}).get("task") or []
        return cls(sweeper_params(record), tuple(map(str, task)))

    def overrides(self) -> list[str]:
        return [*(f"{k}={v}" for k, v in self.params.items()), *self.task]

    def axes(self) -> dict[str, list[str]]:
        """Each key's overrides, one per value, in the basic sweeper's order."""
        return overrides.axes(self.overrides())

    def jobs(self) -> list[list[str]]:
        return overrides.expand(self.overrides())

    def swept(self) -> set[str]:
        """The keys it varies: the preset's axes the command line does not set to one value, and the command
        line's sweeps."""
        given = overrides.sweeping(list(self.task))
        return {k for k in self.params if given.get(k, True)} | {k for k, sweeps in given.items() if sweeps}


def description(text: str) -> str:
    """The first comment line that is not a Hydra directive (`# @package ...`)."""
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        words = line.lstrip("#").strip()
        if words and not words.startswith("@"):
            return words
    return ""


def render(presets: list[Preset], width: int | None = None) -> str:
    width = width or min(shutil.get_terminal_size((100, 20)).columns, 120)
    out = []
    for group, usage in GROUPS.items():
        members = [p for p in presets if p.group == group]
        if not members:
            continue
        pad = max(len(p.name) for p in members) + 2
        out.append(f"{group} presets  ({usage})")
        for p in members:
            text = p.description + (f" [axes: {'; '.join(f'{k}={v}' for k, v in p.axes.items())}]" if p.axes else "")
            lines = textwrap.wrap(text, width - pad - 2) or [""]
            out.append(f"  {p.name:<{pad}}{lines[0]}")
            out += [f"  {'':<{pad}}{line}" for line in lines[1:]]
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print("usage: lnbench presets\n\n" + __doc__.split("\n\n")[0])
        return 0
    if argv:
        print(
            f"lnbench: error: {argv[0]!r} is not allowed: `lnbench presets` takes no arguments (only --help) and "
            "lists every preset of conf/.",
            file=sys.stderr,
        )
        return 2
    try:
        print(render(read_presets()), end="")
    except ConfigError as e:  # a preset of yours that cannot be read
        print(f"lnbench: error: {e}", file=sys.stderr)
        return 2
    return 0
