"""`lnbench train|report|bench ...`: dispatch only."""
from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

USAGE = """usage: lnbench <command> [args]

commands:
  train [overrides]   train one run, or a sweep with -m (a Hydra app: `lnbench train --help`)
  report DIR          plots and tables for a run or sweep directory
  bench [options]     time per training step of each model against torch's fused kernels
"""

CONF_DIR = str(Path(__file__).resolve().parent.parent / "conf")
log = logging.getLogger("lnbench")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd == "train":
        return train_app(rest)
    if cmd == "report":
        from lnbench.report import main as report_main

        return report_main(rest)
    if cmd == "bench":
        from lnbench.bench import main as bench_main

        return bench_main(rest)
    print(f"lnbench: unknown command {cmd!r}: use one of train, report, bench.\n\n{USAGE}", file=sys.stderr)
    return 2


def train_app(args: list[str]) -> int:
    import hydra

    from lnbench.config import register_configs

    register_configs()
    # Hydra reads sys.argv itself; show it the train arguments under the program name `lnbench train`.
    sys.argv = ["lnbench train", *args]
    hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="train")(task)()
    return 0


def task(cfg) -> dict:
    """One Hydra job. User errors become one paragraph and a non-zero exit, never a traceback."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from lnbench.errors import UserError
    from lnbench.track import run_name
    from lnbench.train import train

    hc = HydraConfig.get()
    run_dir = Path(hc.runtime.output_dir)
    multirun = hc.mode == RunMode.MULTIRUN
    overrides = list(hc.overrides.task)
    group = str(Path(hc.sweep.dir)) if multirun else None
    tags = [o for o in overrides if not o.startswith("hydra")] if multirun else []
    if cfg.threads is None and (threads := parallel_job_threads(hc)):
        cfg.threads = threads
    try:
        return train(cfg, run_dir, name=run_name(overrides), group=group, tags=tags)
    except BaseException as e:
        record_failure(run_dir, e)
        if not isinstance(e, UserError) or multirun or os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise  # in a sweep Hydra records the failure and runs the other jobs
        print(f"lnbench: error: {e}", file=sys.stderr)
        sys.exit(2)


def record_failure(run_dir: Path, error: BaseException) -> None:
    """A job that failed before its first step still leaves a summary.json saying why."""
    from lnbench.atomic import write_json

    if not (run_dir / "summary.json").exists():
        run_dir.mkdir(parents=True, exist_ok=True)
        write_json(run_dir / "summary.json", {"status": "failed", "error": f"{type(error).__name__}: {error}", "steps": 0})


def parallel_job_threads(hc) -> int | None:
    """Torch threads for one job of a parallel launcher, so that jobs sharing the cores do not fight.

    joblib's n_jobs=-1 means one job per core (-2 all but one, ...). None where jobs do not share.
    """
    from omegaconf import OmegaConf

    n_jobs = OmegaConf.select(hc, "launcher.n_jobs", default=None)
    if n_jobs is None:
        return None
    cores = os.cpu_count() or 1
    jobs = cores + 1 + n_jobs if n_jobs < 0 else n_jobs
    return max(1, cores // max(jobs, 1))


if __name__ == "__main__":
    sys.exit(main())
