"""`lnbench train -m ARGS` as lnbench check runs it on a warm pool (lnbench.launch.process.pool): the sweep composed
in the check's own process by Hydra, as `lnbench train` would compose it (the same overrides, the same
`hydra.mode=MULTIRUN`, Hydra's basic sweeper writing multirun.yaml and listing the jobs, the sweep's callbacks
called at its start and end), its jobs then run by the pool's workers as Hydra's joblib launcher runs them. So
the run directories and their `.hydra/` records are the ones a sweep of its own leaves, and `lnbench status`,
`lnbench report` and a rerun read them as before; only the processes differ: one Hydra and one pool for the
whole check, not a Hydra, a preflight and a loky pool per round.

The jobs' checks before the first job (lnbench.launch.preflight) are not repeated per round: the check ran
them once over the user's overrides with every preset (lnbench.check.args.check_overrides), and a round's other
overrides are the check's own. A job whose config cannot be composed fails alone, with its reason.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from itertools import count
from pathlib import Path
from typing import Any

from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.plugins import Plugins
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, setup_globals
from hydra.types import HydraContext, RunMode
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from lnbench.config import launchers
from lnbench.config import overrides as hydra_args
from lnbench.config.hydra_errors import composing
from lnbench.config.renamed import rewrite_and_say
from lnbench.config.schema import register_configs
from lnbench.config.validate import validate_sweep
from lnbench.errors import UserError
from lnbench.launch import hydra_job
from lnbench.launch.entry import CONF_DIR, VERSION_BASE, Job
from lnbench.launch.preflight import Plan
from lnbench.launch.process.pool import SweepContext
from lnbench.launch.sweep import stop as sweep_stop

_keys = count()


@dataclass
class ComposedSweep:
    """One sweep composed here, its jobs to run on the pool, and its callbacks to end it with."""

    out_dir: Path
    context: SweepContext
    jobs: list[tuple[int, list[str]]]  # (job number, overrides)
    callbacks: Any
    failed: list[str] = field(default_factory=list)  # one line per job that did not complete

    def end(self) -> int:
        """The sweep's end, as `lnbench train -m` ends: its callbacks' end (the end-of-sweep block) and its exit
        code (1 where a job failed, as Hydra's sweeper raises the first failure)."""
        self.callbacks.on_multirun_end(config=self.context.config, config_name="train")
        sweep_stop.clear(self.out_dir)
        return 1 if self.failed else 0


class SweepRefused(Exception):
    """The sweep's overrides do not compose (exit 2 of `lnbench train`): the message says why."""


class InProcessHydra:
    """One Hydra for all the sweeps of a check, initialised on lnbench's config folder as `lnbench train`'s
    hydra.main initialises its own (the same version base; the job's name, `train`, is conf/train.yaml's)."""

    def __init__(self):
        register_configs()
        GlobalHydra.instance().clear()
        initialize_config_dir(config_dir=CONF_DIR, version_base=VERSION_BASE, job_name="train")
        self.loader = GlobalHydra.instance().config_loader()

    def close(self) -> None:
        """Hydra's global state let go (a later Hydra in this process starts afresh)."""
        GlobalHydra.instance().clear()

    def sweep(self, args: list[str]) -> ComposedSweep:
        """`lnbench train ARGS` (ARGS with -m and hydra.sweep.dir=...), composed; its jobs not run yet."""
        args = [a for a in args if a in ("-m", "--multirun")] + [a for a in args if a not in ("-m", "--multirun")]
        args = rewrite_and_say(args)
        given = [a.split("=", 1)[1] for a in args if a.startswith("hydra.sweep.dir=")]
        if not given:
            raise SweepRefused("a sweep of lnbench check names its directory (hydra.sweep.dir=...)")
        out_dir = Path(given[-1])
        args = [*args, f"hydra.sweep.dir={hydra_args.hydra_value(str(out_dir))}"]
        overrides = [*hydra_args.parse(args).overrides, "hydra.mode=MULTIRUN"]  # as Hydra's _run_app adds
        setup_globals()
        try:
            with composing(overrides):
                cfg = self.loader.load_configuration("train", overrides, run_mode=RunMode.MULTIRUN)
            validate_sweep(cfg)
        except UserError as e:
            raise SweepRefused(str(e)) from None
        kind = launchers.of_config(OmegaConf.select(cfg, "hydra.launcher", default=None))
        task_function = Job(Plan(args, True, out_dir, kind))
        sweep_stop.clear(out_dir)  # as lnbench train: a rerun of a stopped sweep starts afresh
        callbacks = SweepCallbacks(cfg)
        callbacks.on_multirun_start(config=cfg, config_name="train")
        context = HydraContext(config_loader=self.loader, callbacks=callbacks)
        sweeper = Plugins.instance().instantiate_sweeper(config=cfg, hydra_context=context, task_function=task_function)
        listed = ListedJobs()
        sweeper.launcher = listed
        # Each job's config is composed by the worker that runs it (as joblib's workers do): composing each
        # here first too would cost ~0.1 s a job in this process.
        sweeper.validate_batch_is_legal = lambda batch: None
        task_overrides = OmegaConf.to_container(cfg.hydra.overrides.task, resolve=False)
        sweeper.sweep(arguments=task_overrides)  # writes multirun.yaml; the jobs go to `listed`
        ids = hydra_job.JOBLIB if kind.runs == launchers.FORKED else hydra_job.BASIC  # a pool's jobs: as joblib's
        state = Singleton.get_state()
        sweep = SweepContext(f"{next(_keys)}:{out_dir}", context, cfg, task_function, state, ids, VERSION_BASE)
        return ComposedSweep(out_dir, sweep, listed.jobs, callbacks)


class SweepCallbacks:
    """The sweep's callbacks (`hydra.callbacks`, lnbench's SweepEnd among them), called as Hydra's own Callbacks
    calls them: in order at a start, in reverse at an end, a callback's exception a warning."""

    def __init__(self, config: DictConfig):
        self.callbacks = [instantiate(c) for c in (OmegaConf.select(config, "hydra.callbacks") or {}).values()]

    def _notify(self, name: str, reverse: bool = False, **kwargs) -> None:
        for c in reversed(self.callbacks) if reverse else self.callbacks:
            try:
                getattr(c, name)(**kwargs)
            except Exception as e:  # noqa: BLE001 - as Hydra: a callback's failure is said, the sweep goes on
                warnings.warn(f"Callback {type(c).__name__}.{name} raised {type(e).__name__}: {e}", stacklevel=2)

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        self._notify("on_multirun_start", config=config, **kwargs)

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        self._notify("on_multirun_end", reverse=True, config=config, **kwargs)

    def on_job_start(self, config: DictConfig, **kwargs) -> None:
        self._notify("on_job_start", config=config, **kwargs)

    def on_job_end(self, config: DictConfig, job_return, **kwargs) -> None:
        self._notify("on_job_end", reverse=True, config=config, job_return=job_return, **kwargs)


class ListedJobs:
    """Stands in for the sweep's launcher: keeps the jobs Hydra's sweeper hands it, for the pool to run."""

    def __init__(self):
        self.jobs: list[tuple[int, list[str]]] = []

    def launch(self, job_overrides, initial_job_idx: int):
        self.jobs += [(initial_job_idx + i, list(o)) for i, o in enumerate(job_overrides)]
        return [JobReturn(status=JobStatus.COMPLETED) for _ in job_overrides]
