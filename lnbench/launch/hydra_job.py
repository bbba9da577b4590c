"""A sweep job's life through Hydra, written once for every launcher of ours: its config composed from the sweep's as
Hydra's launchers compose it (`compose`), then Hydra's `run_job` (`run`), which writes the job's directory and
`.hydra/` records, calls the sweep's callbacks and the task function (lnbench.launch.entry.Job), and returns
Hydra's JobReturn. The warm pool (lnbench.launch.process.pool), the packed launcher (lnbench.launch.sweep.pack) and
the SLURM launcher (lnbench.launch.slurm.launcher, composing what its jobs will compose on their nodes) use these.
"""

from __future__ import annotations

from typing import Any, Sequence

from hydra.core.utils import JobReturn, run_job
from hydra.types import HydraContext
from omegaconf import open_dict

BASIC, JOBLIB = "basic", "joblib"  # how a launcher names its jobs (hydra.job.id): `3`, or `train_3`


def compose(loader, sweep_config, overrides: Sequence[str], idx: int, ids: str = BASIC):
    """The job `idx` of the sweep: `sweep_config` with the job's `overrides`, its number, and its id as the launcher
    `ids` names it (Hydra's basic launcher: the number; joblib: `<job name>_<number>`)."""
    config = loader.load_sweep_config(sweep_config, list(overrides))
    with open_dict(config):
        config.hydra.job.id = f"{config.hydra.job.name}_{idx}" if ids == JOBLIB else idx
        config.hydra.job.num = idx
    return config


def run(hydra_context: HydraContext, config, task_function, quiet: bool = False) -> JobReturn:
    """Hydra's run_job of one composed job of a sweep, in its directory under hydra.sweep.dir. `quiet`: without the
    sweep's callbacks and the job's logging (a job whose directory is written now, and which runs later)."""
    if quiet:
        hydra_context = HydraContext(config_loader=hydra_context.config_loader, callbacks=NoCallbacks())
    return run_job(
        hydra_context=hydra_context,
        task_function=task_function,
        config=config,
        job_dir_key="hydra.sweep.dir",
        job_subdir_key="hydra.sweep.subdir",
        configure_logging=not quiet,
    )


class NoCallbacks:
    """A quiet run tells the sweep's callbacks nothing: to them, the job starts and ends when it runs."""

    def on_job_start(self, **kwargs: Any) -> None:
        pass

    def on_job_end(self, **kwargs: Any) -> None:
        pass
