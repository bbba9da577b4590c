"""`lnbench presets`: the experiment, model, dataset and optimizer presets, each with its one-line
description, read from conf/ (each preset's first comment line; an experiment's axes from its
hydra.sweeper.params), so the list never goes stale and nothing is typed twice."""
from __future__ import annotations

import shutil
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import yaml

from lnbench import CONF_DIR

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


def read_presets(conf_dir: Path) -> list[Preset]:
    found = []
    for group in GROUPS:
        for path in sorted((conf_dir / group).glob("*.yaml")):
            text = path.read_text()
            params = (((yaml.safe_load(text) or {}).get("hydra") or {}).get("sweeper") or {}).get("params") or {}
            found.append(Preset(group, path.stem, description(text), {k: str(v) for k, v in params.items()}))
    return found


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
        print(f"lnbench presets: {argv[0]!r} is not allowed: `lnbench presets` takes no arguments (only --help) and "
              "lists every preset of conf/.", file=sys.stderr)
        return 2
    print(render(read_presets(Path(CONF_DIR))), end="")
    return 0
