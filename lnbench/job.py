"""One Hydra job of `lnbench train`: the task function Hydra calls, its failure handling, and the checks
Hydra runs (as a callback) before it writes into a run or sweep directory.

A user error becomes one paragraph and exit 2, a divergence exit 1; in a sweep both become a one-line
error Hydra records before it goes on with the other jobs. Each job's status is in its own summary.json.
"""
from __future__ import annotations

import faulthandler
import logging
import os
import sys
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger("lnbench")


def resume_overrides(args: list[str]) -> list[str]:
    """`resume=DIR`: the overrides DIR's run was started with, then these (which may not differ from them:
    lnbench.checkpoint compares the composed config with the checkpoint's)."""
    from lnbench.errors import ConfigError

    given = [a for a in args if a.startswith("resume=")]
    if not given:
        return args
    run_dir = Path(given[-1].split("=", 1)[1]).expanduser()
    if any(a in ("-m", "--multirun") for a in args):
        raise ConfigError(
            f"resume={run_dir} continues one run and cannot be swept (-m). To resume a sweep, run the same "
            f"sweep command again with hydra.sweep.dir=<its directory>: each job continues from its checkpoint."
        )
    saved = run_dir / ".hydra" / "overrides.yaml"
    if not saved.is_file():
        why = "does not exist" if not run_dir.exists() else "holds no .hydra/overrides.yaml"
        raise ConfigError(
            f"resume={run_dir} is not allowed: it {why}. resume takes the directory of an earlier run "
            f"(outputs/runs/<date>/<time>, or a sweep's <dir>/<job number>)."
        )
    from omegaconf import OmegaConf

    before = [str(o) for o in OmegaConf.load(saved) if not str(o).startswith(("resume=", "hydra.run.dir="))]
    return [*before, *args, f"hydra.run.dir={run_dir}"]  # the run continues in its own directory


def task(cfg) -> dict:
    """One Hydra job. User errors become one paragraph and a non-zero exit, never a traceback.

    In a sweep a failed job (bad input, divergence) raises a one-line error Hydra records, then it runs
    the other jobs; each job's status is in its own summary.json.
    """
    import time

    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from lnbench.errors import Diverged, UserError
    from lnbench import threads
    from lnbench.track import run_name
    from lnbench.train import train

    started = time.time()
    hc = HydraConfig.get()
    run_dir = Path(hc.runtime.output_dir)
    multirun = hc.mode == RunMode.MULTIRUN
    overrides = list(hc.overrides.task)
    group = str(Path(hc.sweep.dir)) if multirun else None
    tags = [o for o in overrides if not o.startswith("hydra")] if multirun else []
    cfg.threads = threads.apply(cfg.threads, hc)  # the cores free now, within the launcher's share; logged
    # A segfault or an OOM kill bypasses every except clause: leave the native traceback in the job's
    # own directory, where the report looks for it.
    run_dir.mkdir(parents=True, exist_ok=True)
    crash_log = open(run_dir / "crash.log", "a")
    faulthandler.enable(crash_log)
    try:
        return train(cfg, run_dir, name=run_name(overrides), group=group, tags=tags)
    except Diverged as e:  # summary.json already says diverged
        if full_error():
            raise
        if multirun:
            log.error("job %s diverged: %s", hc.job.num, e)
            raise job_failed(f"lnbench: job {hc.job.num} ({' '.join(overrides)}) diverged: {e}") from None
        print(f"lnbench: {e}", file=sys.stderr)
        sys.exit(1)
    except BaseException as e:
        record_failure(run_dir, e, started)
        if not isinstance(e, UserError) or full_error():
            raise  # a bug: Hydra prints it (in a sweep it records the failure and runs the other jobs)
        if multirun:
            log.error("job %s failed: %s", hc.job.num, e)
            raise job_failed(f"lnbench: job {hc.job.num} ({' '.join(overrides)}) failed: {e}") from None
        sys.exit(user_error(e))
    finally:
        faulthandler.disable()
        crash_log.close()
        if (run_dir / "crash.log").stat().st_size == 0:
            (run_dir / "crash.log").unlink()


def full_error() -> bool:
    return os.environ.get("HYDRA_FULL_ERROR") == "1"


def user_error(e: BaseException) -> int:
    print(f"lnbench: error: {e}", file=sys.stderr)
    return 2


def _hydra_classes() -> dict[str, type]:
    """Classes built on Hydra's, made on first use so that `lnbench report|bench` does not import Hydra."""
    from hydra.errors import CompactHydraException
    from hydra.experimental.callback import Callback

    class JobFailed(CompactHydraException):
        """A sweep job's user error or divergence: Hydra prints a CompactHydraException as one line, no traceback."""

    class RunChecks(Callback):
        """A Hydra callback (conf/train.yaml), called before Hydra creates the run or sweep directory and
        writes its .hydra/ files there. One clear error, and a run directory left as it was, when that
        directory cannot be written, or when it holds a checkpoint of a run with another config."""

        def on_run_start(self, config, **kwargs) -> None:
            check_output_dir(config.hydra.run.dir, "hydra.run.dir")
            with user_errors_exit():
                check_resume(config)

        def on_multirun_start(self, config, **kwargs) -> None:
            check_output_dir(config.hydra.sweep.dir, "hydra.sweep.dir")

    for c in (JobFailed, RunChecks):  # importable (and picklable, for parallel launchers) as lnbench.job.X
        c.__module__, c.__qualname__ = __name__, c.__name__
    return {"JobFailed": JobFailed, "RunChecks": RunChecks}


_HYDRA_CLASSES: dict[str, type] = {}


def __getattr__(name: str):
    if name in ("JobFailed", "RunChecks"):
        if not _HYDRA_CLASSES:
            _HYDRA_CLASSES.update(_hydra_classes())
        return _HYDRA_CLASSES[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def job_failed(message: str) -> Exception:
    return __getattr__("JobFailed")(message)


@contextmanager
def user_errors_exit():
    """A UserError in the block ends the process with its message (exit 2), or a traceback with HYDRA_FULL_ERROR=1."""
    from lnbench.errors import UserError

    try:
        yield
    except UserError as e:
        if full_error():
            raise
        sys.exit(user_error(e))


def check_output_dir(folder: str, key: str) -> None:
    import tempfile

    from lnbench.errors import ConfigError

    with user_errors_exit():
        try:
            Path(folder).mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=folder):
                pass
        except OSError as e:
            raise ConfigError(
                f"{key}={folder} is not allowed: the output directory cannot be written ({e.strerror or e}). "
                f"Choose a writable one with {key}=<dir>, or start lnbench from a writable folder."
            ) from None


def check_resume(config) -> None:
    """A run directory with a checkpoint continues that run: the composed config must match its config."""
    from omegaconf import OmegaConf

    run_dir = Path(config.hydra.run.dir)
    if not (run_dir / "checkpoint.pt").exists():
        return
    from lnbench import checkpoint

    task_cfg = OmegaConf.masked_copy(config, [k for k in config if k != "hydra"])
    checkpoint.load(run_dir, OmegaConf.to_container(task_cfg, resolve=True, enum_to_str=True))


def record_failure(run_dir: Path, error: BaseException, started: float = 0.0) -> None:
    """A job that failed before its first step still leaves a summary.json saying why (replacing one an
    earlier attempt left, but not the one this attempt's train loop wrote)."""
    from lnbench.atomic import write_json

    summary = run_dir / "summary.json"
    if not summary.exists() or summary.stat().st_mtime < started:
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            write_json(summary, {"status": "failed", "error": f"{type(error).__name__}: {error}", "steps": 0})
        except OSError:
            pass  # an unwritable directory: the error itself says so
