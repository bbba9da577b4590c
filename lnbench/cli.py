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
    try:
        return train(cfg, run_dir, name=run_name(overrides), group=group, tags=tags)
    except UserError as e:
        if multirun or os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise  # the sweep records the failure in the job's summary.json and goes on
        print(f"lnbench: error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    sys.exit(main())
