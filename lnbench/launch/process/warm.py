"""What a job process makes ready before it forks a sweep job (lnbench.launch.process.isolate), so that the next
jobs of the same process find it done: the modules the job's config names (`_target_`), and its dataset, made
once per dataset config (lnbench.data.cache); where the code came from (git, asked once per process).
Nothing here changes what a job computes: a job that finds
nothing ready makes it itself, as before.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from omegaconf import DictConfig, OmegaConf

from lnbench import phases
from lnbench.data import cache
from lnbench.training import provenance
from lnbench.training.recipe import setup_data


def prepare(cfg: DictConfig, threads: int | None) -> None:
    """The modules of every `_target_` in `cfg` imported, and the job's dataset kept (with `threads` torch
    threads, the job's; not where it will choose its own)."""
    with phases.timer().phase(phases.JOB_READY):
        for target in targets(OmegaConf.to_container(cfg, resolve=False)):
            if target.startswith("lnbench."):  # a user's own modules: `imports:` loads them here (user_modules)
                import_module_of(target)
        provenance.git_state(provenance.SOURCE)  # asked of git once per process (a subprocess each, else)
        provenance.cpu_model()
        for package in provenance.PACKAGES:
            provenance.version(package)
        if threads:
            cache.keep(cfg.dataset, threads, lambda: setup_data(cfg.dataset))


def targets(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [node["_target_"]] if isinstance(node.get("_target_"), str) else []
        return own + [t for v in node.values() for t in targets(v)]
    if isinstance(node, list):
        return [t for v in node for t in targets(v)]
    return []


def import_module_of(target: str) -> None:
    """Imports the longest importable module prefix of a dotted `_target_` (a.b.Class -> a.b); quietly
    nothing where none imports: instantiating it in the job says why."""
    parts = target.split(".")
    for n in range(len(parts) - 1, 0, -1):
        name = ".".join(parts[:n])
        if name in sys.modules:
            return
        try:
            importlib.import_module(name)
            return
        except Exception:  # noqa: BLE001 - the job's own instantiate reports a bad target
            continue
