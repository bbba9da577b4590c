"""`lnbench train|report|bench ...`: dispatch only."""
from __future__ import annotations

import sys
from pathlib import Path

USAGE = """usage: lnbench <command> [args]

commands:
  train [overrides]   train one run, or a sweep with -m (a Hydra app: `lnbench train --help`)
  report DIR          plots and tables for a run or sweep directory
  bench [options]     time per training step of each model against torch's fused kernels
"""

CONF_DIR = str(Path(__file__).resolve().parent.parent / "conf")


def main(argv: list[str] | None = None) -> int:
    from lnbench.threads import passive_waiting

    passive_waiting()  # before anything imports torch
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
    from lnbench.errors import Interrupted, UserError
    from lnbench.job import full_error, resume_overrides, task, user_error

    try:
        args = resume_overrides(args)
    except UserError as e:
        return user_error(e)
    register_configs()
    # Hydra reads sys.argv itself; show it the train arguments under the program name `lnbench train`.
    sys.argv = ["lnbench train", *args]
    try:
        hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="train")(task)()
    except Interrupted as e:  # SIGTERM/SIGINT: the checkpoint is written; stop the run (and the sweep)
        if full_error():
            raise
        print(f"lnbench: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:  # Ctrl-C before the loop started: nothing to save
        if full_error():
            raise
        print("lnbench: interrupted before training started.", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
