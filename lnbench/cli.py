"""`lnbench train|report|bench ...`: dispatch only."""

from __future__ import annotations

import os
import re
import sys

import lnbench
from lnbench import environment
from lnbench.errors import ConfigError

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

COMPLETION = ("-sc", "--shell-completion")  # Hydra's flag, also in the query its install script makes
NEEDS_CONF = ("train", "check", "bench", "presets")
NO_CONF = (
    "lnbench: its config groups are missing: neither {conf} (an installed wheel's) nor {parent} (a checkout's) "
    "holds train.yaml, so there is no preset to run. Reinstall lnbench (`pip install --force-reinstall "
    "<path or git URL of lnbench>`), or in a checkout restore conf/ with `git checkout -- conf`."
)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    # torch.cuda.is_available() through NVML, not the CUDA runtime: a runtime call starts CUDA in this process, and a
    # sweep forks its jobs from it (lnbench.launch.process.isolate), in whose children CUDA then fails to initialize.
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    from lnbench.launch.process.closed_pipe import quiet_when_closed

    quiet_when_closed()
    if argv and argv[0] in ("train", "bench", "check"):
        from lnbench.launch.process.heap import keep_freed_memory

        keep_freed_memory()
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0
    if argv[0] in ("-V", "--version"):
        print(f"lnbench {lnbench.__version__}")
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd in COMPLETION or (cmd == "train" and any(a in COMPLETION for a in rest)):
        return shell_completion(cmd, rest)
    try:
        environment.check()  # before any command: a bad LNBENCH_* value is refused as a bad flag is
    except ConfigError as e:
        print(f"lnbench: error: {e}", file=sys.stderr)
        return 2
    if cmd in NEEDS_CONF and not (lnbench.CONF_DIR / "train.yaml").is_file():
        print(NO_CONF.format(conf=lnbench.CONF_DIR, parent=lnbench.CONF_DIR.parent.parent / "conf"), file=sys.stderr)
        return 2
    if cmd == "train":
        from lnbench.launch.entry import main as train_main

        if any(a in ("--cfg", "-c", "--info", "-i") for a in rest):  # what Hydra shows: which files it came from
            from lnbench.config.user_folder import sources

            print(sources(rest), file=sys.stderr)
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
        from lnbench.launch.sweep.status import main as status_main

        return status_main(rest)
    if cmd == "presets":
        from lnbench.config.presets import main as presets_main

        return presets_main(rest)
    print(
        f"lnbench: error: unknown command {cmd!r}: use one of train, report, bench, check, status, presets.\n\n{USAGE}",
        file=sys.stderr,
    )
    return 2


def shell_completion(cmd: str, rest: list[str]) -> int:
    """`lnbench train -sc install=bash` and the query its script makes, `lnbench -sc query=bash`."""
    from lnbench.launch import completion
    from lnbench.launch.entry import main as train_main

    if cmd == "train":
        return completion.install(train_main, rest)
    return completion.query(train_main, [cmd, *rest], re.findall(r"^  ([a-z]\w*)", USAGE, re.M))


if __name__ == "__main__":
    sys.exit(main())
