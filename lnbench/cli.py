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
  presets             the experiment, model, dataset and optimizer presets, with what each is
  --version           lnbench's version
"""

CONF_DIR = str(lnbench.CONF_DIR)  # Hydra takes config_path as a string


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in ("train", "bench", "check"):
        from lnbench.heap import keep_freed_memory

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
        return train_app(rest)
    if cmd == "report":
        from lnbench.report import main as report_main

        return report_main(rest)
    if cmd == "check":
        from lnbench.check import main as check_main

        return check_main(rest)
    if cmd == "bench":
        from lnbench.bench import main as bench_main

        return bench_main(rest)
    if cmd == "presets":
        from lnbench.presets import main as presets_main

        return presets_main(rest)
    print(f"lnbench: unknown command {cmd!r}: use one of train, report, bench, check, presets.\n\n{USAGE}", file=sys.stderr)
    return 2


def train_app(args: list[str]) -> int:
    """`lnbench train`: bad input of any kind is refused here, before Hydra creates a directory (exit 2,
    one paragraph); then Hydra runs the job or the sweep."""
    import hydra

    from lnbench.config import register_configs
    from lnbench.errors import Interrupted, UserError
    from lnbench.renamed import rewrite_and_say
    from lnbench.job import SWEEP, full_error, preflight, resume_overrides, sweep_interrupted, sweep_was_interrupted, task, user_error

    register_configs()
    typed = list(args)
    # `lnbench train steps=5 -m seed=0,1`: argparse would take -m after an override for a stray argument.
    args = [a for a in args if a in ("-m", "--multirun")] + [a for a in args if a not in ("-m", "--multirun")]
    try:
        args = rewrite_and_say(resume_overrides(args))  # a resumed run's saved overrides may use old keys too
        preflight(args, CONF_DIR)
    except UserError as e:
        if full_error():
            raise
        return user_error(e)
    except KeyboardInterrupt:
        return stopped_before_training()
    # Hydra reads sys.argv itself; show it the train arguments under the program name `lnbench train`.
    sys.argv = ["lnbench train", *args]
    try:
        hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="train")(task)()
    except (Interrupted, KeyboardInterrupt) as e:  # SIGTERM/SIGINT: checkpoints are written; stop the run (and the sweep)
        if full_error():
            raise
        signum = getattr(e, "signum", 2)
        if SWEEP:
            print(f"lnbench: {sweep_interrupted(signum, typed)}", file=sys.stderr)
        elif isinstance(e, Interrupted):
            print(f"lnbench: {e}", file=sys.stderr)
        else:
            return stopped_before_training()
        return 128 + signum
    except Exception as e:  # a launcher's report of jobs a signal stopped (joblib: BrokenProcessPool; submitit: a failed job)
        broken = "BrokenProcessPool" in type(e).__name__ + type(e.__cause__).__name__
        if not SWEEP or full_error() or not (broken or sweep_was_interrupted()):
            raise
        signum = 15 if "SIGTERM received" in str(e) else 2
        print(f"lnbench: {sweep_interrupted(signum, typed)}", file=sys.stderr)
        return 128 + signum
    if SWEEP and sweep_was_interrupted():  # submitit: the jobs stopped on the signal and returned
        print(f"lnbench: {sweep_interrupted(2, typed)}", file=sys.stderr)
        return 130
    return 0


def stopped_before_training() -> int:
    from lnbench.job import full_error

    if full_error():
        raise KeyboardInterrupt
    print("lnbench: interrupted before training started.", file=sys.stderr)
    return 130


if __name__ == "__main__":
    sys.exit(main())
