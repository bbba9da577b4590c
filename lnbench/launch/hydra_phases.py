"""Hydra's share of a sweep job's time, for lnbench.phases: with $LNBENCH_PHASES set, a job process (a joblib
worker, or the basic launcher's sweep process) times Hydra's steps around each job, which lnbench does not call
itself: composing the job's config, its output directory, `.hydra/*.yaml` and logging set-up (run_job), and
the callbacks. Installed once per process by the first Job unpickled or run there; never without the variable.
"""

from __future__ import annotations

import functools
import time

import hydra.core.utils as hydra_utils
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.core_plugins import basic_launcher

from lnbench import phases

try:
    from hydra_plugins.hydra_joblib_launcher import _core as joblib_core
except ImportError:  # the joblib extra is not installed
    joblib_core = None

_installed: list[bool] = []


def _timed(fn, name: str, first: str | None = None):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        t0 = time.time()
        if first is not None and not _seen_first:
            _seen_first.append(True)
            phases.record(first, phases.process_start() or t0, t0)
        try:
            return fn(*args, **kwargs)
        finally:
            phases.record(name, t0)

    return wrapper


_seen_first: list[bool] = []


def instrument_hydra() -> None:
    """Wraps Hydra's per-job steps in phases (once per process)."""
    if _installed:
        return
    _installed.append(True)
    ConfigLoaderImpl.load_sweep_config = _timed(
        ConfigLoaderImpl.load_sweep_config, "hydra: compose the job's config", first="worker: start to its first job"
    )
    hydra_utils.configure_log = _timed(hydra_utils.configure_log, "hydra: logging set-up")
    hydra_utils._save_config = _timed(hydra_utils._save_config, "hydra: .hydra/*.yaml written")
    if joblib_core is not None:
        joblib_core.run_job = _timed(joblib_core.run_job, "[run_job]")
    basic_launcher.run_job = _timed(basic_launcher.run_job, "[run_job]")
