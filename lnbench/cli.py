"""`lnbench train|report|bench ...`: dispatch only."""
from __future__ import annotations

import sys

import lnbench

USAGE = """usage: lnbench <command> [args]

commands:
  train [overrides]   train one run, or a sweep with -m (a Hydra app: `lnbench train --help`)
  report DIR [DIR...] plots, tables and claim verdicts for runs or sweep directories
  bench [options]     time per training step of each model against torch's fused kernels
  check [PRESET...]   run the paper's claim presets (3 seeds, tuned lr) and write one page of verdicts
  status DIR          how far a run, a sweep or a check has got: jobs by state, time so far and left
  presets             the experiment, model, dataset and optimizer presets, with what each is
  --version           lnbench's version
"""

CONF_DIR = str(lnbench.CONF_DIR)  # Hydra takes config_path as a string


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in ("train", "bench", "check"):
        from lnbench.launch.heap import keep_freed_memory

        keep_freed_memory()
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0
    if argv[0] in ("-V", "--version"):
        from lnbench import __version__

        print(f"lnbench {__version__}")
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd == "train":
        from lnbench.launch.entry import main as train_main

        return train_main(rest)
    if cmd == "report":
        from lnbench.report import main as report_main

        return report_main(rest)
    if cmd == "check":
        from lnbench.check.cli import main as check_main

        return check_main(rest)
    if cmd == "bench":
        from lnbench.bench.cli import main as bench_main

        return bench_main(rest)
    if cmd == "status":
        from lnbench.launch.status import main as status_main

        return status_main(rest)
    if cmd == "presets":
        from lnbench.config.presets import main as presets_main

        return presets_main(rest)
    print(f"lnbench: unknown command {cmd!r}: use one of train, report, bench, check, status, presets.\n\n{USAGE}",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
