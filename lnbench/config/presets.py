"""The presets of conf/ and the one model of a sweep's axes (`Sweep`), and `lnbench presets`: the experiment,
model, dataset and optimizer presets, each with its one-line description, read from conf/ (each preset's first
comment line; an experiment's axes from its hydra.sweeper.params), so the list never goes stale and nothing is
typed twice. The one reader of conf/<group>/*.yaml as written (`read_preset`, `preset_names`): the schemas'
list of presets (lnbench.config.schema.presets), the claims, `lnbench check` and the bench ask here."""

from __future__ import annotations

import shutil
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from lnbench import CONF_DIR
from lnbench.config import overrides

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


def preset_file(group: str, name: str, conf_dir: Path | str = CONF_DIR) -> Path:
    return Path(conf_dir) / group / f"{name}.yaml"


def preset_names(group: str, conf_dir: Path | str = CONF_DIR) -> list[str]:
    """The presets of conf/<group>, sorted."""
    return sorted(p.stem for p in (Path(conf_dir) / group).glob("*.yaml"))


def read_preset(group: str, name: str, conf_dir: Path | str = CONF_DIR) -> dict[str, Any]:
    """conf/<group>/<name>.yaml as written (the preset's own keys, before Hydra composes it)."""
    return yaml.safe_load(preset_file(group, name, conf_dir).read_text()) or {}


def read_presets(conf_dir: Path) -> list[Preset]:
    found = []
    for group in GROUPS:
        for name in preset_names(group, conf_dir):
            text = preset_file(group, name, conf_dir).read_text()
            found.append(Preset(group, name, description(text), sweeper_params(yaml.safe_load(text))))
    return found


# ---- a sweep's axes: one model -----------------------------------------------------------------
def read_experiment(name: str, conf_dir: Path | str = CONF_DIR) -> dict[str, Any]:
    return read_preset("experiment", name, conf_dir)


def experiments(conf_dir: Path | str = CONF_DIR) -> dict[str, dict[str, Any]]:
    """Every experiment preset as written, by name (conf/experiment/*.yaml, sorted)."""
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
    print(render(read_presets(Path(CONF_DIR))), end="")
    return 0
