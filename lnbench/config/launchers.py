"""How a launcher runs a sweep's jobs, as one record (`LauncherKind`) that the launcher declares: Hydra's launchers
in HYDRA here (their code is not ours), lnbench's own as `lnbench_kind` on their plugin class. Everything that
depends on the launcher reads this record: preflight (a stop signal's meaning, whether lnbench forks each job),
the thread decision (a job's share of the cores), lnbench check (a warm pool or a sweep process per round, and its
slots) and the error hints (the extra that installs it).

So a launcher of lnbench's own touches at most 3 files: its plugin module under hydra_plugins/ (the class, its
kind declared on it), conf/hydra/launcher/<name>.yaml, and the module that does its work.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping

from hydra.plugins.launcher import Launcher
from omegaconf import OmegaConf

from lnbench import CONF_DIR
from lnbench.config.runtime import usable_cores

IN_PROCESS = "in-process"  # Hydra calls the jobs one after another in the sweep's process; lnbench forks each
FORKED = "forked"  # a pool of worker processes calls the jobs; lnbench forks each in its worker
PROCESS_PER_JOB = "process per job"  # the launcher starts a process of its own for each job; lnbench forks none

PLAIN_SUBMITIT_SLURM = (
    "hydra/launcher=submitit_slurm is Hydra's launcher as it comes: a job at its time limit is not requeued "
    "(max_num_timeout=0), a job that SLURM requeues or cancels may be reported too early or waited for forever "
    "(without sacct), and a re-run submits every job again. hydra/launcher=slurm is lnbench's, with the same keys "
    "(docs/slurm.md)."
)


@dataclass(frozen=True)
class LauncherKind:
    runs: str  # IN_PROCESS, FORKED or PROCESS_PER_JOB
    slots: str | None = None  # hydra.launcher's key for how many jobs run at once (None: one at a time)
    default_slots: int = -1  # where that key is not given; < 0 as joblib reads n_jobs (-1: one per core, -2 ...)
    cores: str | None = None  # hydra.launcher's key for the cores each job gets (cpus_per_task)
    remote: bool = False  # its jobs run on other machines (SLURM): a stop signal here is not theirs
    extra: str | None = None  # the extra of lnbench that installs it: pip install 'lnbench[<extra>]'
    warm_pool: bool = False  # lnbench check's warm pool runs its jobs as it does (lnbench.launch.process.pool)
    said: str | None = None  # a warning where it is chosen

    @property
    def isolated(self) -> bool:
        """Each job in a process of its own (the launcher's): lnbench runs it there as a single run's."""
        return self.runs == PROCESS_PER_JOB

    def job_slots(self, launcher: Mapping[str, Any]) -> int:
        """How many jobs run at once under `launcher` (hydra.launcher's keys), the cores counted as joblib counts
        them (shareable_cores)."""
        if self.slots is None:
            return 1
        given = launcher.get(self.slots)
        n = self.default_slots if given is None else int(given)
        return max(shareable_cores() + 1 + n, 1) if n < 0 else n

    def job_cores(self, launcher: Mapping[str, Any]) -> int | None:
        """The cores one job may use: its own (`cores`), else, where a pool of workers shares this machine, the
        shareable cores divided among the slots (what joblib's workers get, lnbench.launch.process.pool.joblib_env);
        None where the jobs do not share the machine."""
        if self.cores and (given := launcher.get(self.cores)):
            return int(given)
        return cores_per_job(self.job_slots(launcher)) if self.runs == FORKED else None


BASIC = LauncherKind(IN_PROCESS, warm_pool=True)
JOBLIB = LauncherKind(FORKED, slots="n_jobs", extra="joblib", warm_pool=True)
SUBMITIT_LOCAL = LauncherKind(PROCESS_PER_JOB, slots="array_parallelism", cores="cpus_per_task", extra="slurm")
SUBMITIT_SLURM = replace(SUBMITIT_LOCAL, default_slots=256, remote=True)
UNKNOWN = LauncherKind(IN_PROCESS)  # a launcher that declares no kind: its jobs forked, one at a time as far as we know


class LauncherOfOurs(Launcher):
    """What lnbench's own launchers (hydra_plugins/lnbench_*) share: Hydra's setup, kept for `launch`, which hands
    the work to a module of lnbench imported on first use (Hydra imports every plugin at start-up)."""

    config = hydra_context = task_function = None

    def setup(self, *, hydra_context, task_function, config) -> None:
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function


_SUBMITIT = "hydra_plugins.hydra_submitit_launcher.submitit_launcher"
HYDRA = {  # Hydra's launchers, by their option in hydra/launcher: (their class, their kind)
    "basic": ("hydra._internal.core_plugins.basic_launcher.BasicLauncher", BASIC),
    "joblib": ("hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher", JOBLIB),
    "submitit_local": (f"{_SUBMITIT}.LocalLauncher", SUBMITIT_LOCAL),
    "submitit_slurm": (f"{_SUBMITIT}.SlurmLauncher", replace(SUBMITIT_SLURM, said=PLAIN_SUBMITIT_SLURM)),
}
_BY_CLASS = {target: kind for target, kind in HYDRA.values()}


def kind_of(target: str) -> LauncherKind:
    """The kind of the launcher class `target` (hydra.launcher._target_): Hydra's from HYDRA, else the one its class
    or a class it derives from declares. By qualified names: Hydra's plugin scan may import a plugin module twice,
    and the two copies' classes are not each other's subclasses."""
    if target in _BY_CLASS:
        return _BY_CLASS[target]
    module, _, name = target.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError):  # Hydra itself says what it cannot load
        return UNKNOWN
    for c in cls.__mro__:
        if isinstance(declared := c.__dict__.get("lnbench_kind"), LauncherKind):
            return declared
        if (inherited := _BY_CLASS.get(f"{c.__module__}.{c.__qualname__}")) is not None:
            return replace(inherited, said=None)  # a launcher derived from Hydra's is not Hydra's as it comes
    return UNKNOWN


def named(name: str) -> LauncherKind:
    """The kind of `hydra/launcher=<name>`: Hydra's, or the class conf/hydra/launcher/<name>.yaml names."""
    if name in HYDRA:
        return HYDRA[name][1]
    try:
        target = OmegaConf.load(Path(CONF_DIR) / "hydra" / "launcher" / f"{name}.yaml").get("_target_")
    except OSError:
        return UNKNOWN
    return kind_of(str(target)) if target else UNKNOWN


def of_config(launcher: Any) -> LauncherKind:
    """The kind of a composed hydra.launcher node (None: the basic launcher's, as Hydra's default)."""
    return BASIC if launcher is None else kind_of(str(launcher.get("_target_", "")))


def shareable_cores() -> int:
    """The cores a parallel launcher's jobs share: this process's affinity and its CPU quota (cgroups), as joblib's
    loky counts them; without joblib, the affinity."""
    try:
        from joblib.externals.loky import cpu_count  # noqa: PLC0415 (the joblib extra: optional)
    except ImportError:
        return len(usable_cores())
    return int(cpu_count())


def cores_per_job(slots: int) -> int:
    """One job's share when `slots` jobs run at once on the shareable cores."""
    return max(shareable_cores() // max(slots, 1), 1)
