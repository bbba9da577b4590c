"""`lnbench check [PRESET...] [scale=K] [options] [overrides]`: run the paper's claim presets and judge every claim.

Each preset (conf/experiment/<name>.yaml with a `claims:` list) runs as one Hydra sweep, by default with
the joblib launcher, into a fixed directory (outputs/check/<preset>, or <preset>-xK at scale K), so that
running the command again resumes: completed jobs are skipped, killed ones continue from their checkpoint.
Then, per preset, the rounds of lnbench/check/preset.py: a grid whose winner sits at a compared line's edge is
widened a value at a time on that side (--widen, tuning seeds only); each claim no edge blocks gets its judging
seeds planned for its test's power at its family's level (the same on any machine), declared in judging.json
before any of them runs; the judging rounds add fresh seeds at each line's chosen value to the claims still open.
--budget limits the check's wall time only: once it has run out no round starts, open claims await their seeds
and the same command continues. The presets'
rounds overlap on one warm pool of workers (lnbench/check/runner.py; on SLURM each round is a sweep of its own,
each job a SLURM job). One page, check.md / check.html, lists every verdict, adjusted over its declared family,
with a link to its sweep's report and curves.

scale=K multiplies each preset's steps (and its evaluation and logging intervals), or its epochs where the
preset counts in epochs (fig6_mnist). Any other key=value is passed to every sweep, e.g.
hydra/launcher=slurm hydra.launcher.partition=gpu.
"""

from __future__ import annotations

import os
import sys
import time

# claim_presets and scaled_overrides are not used here: callers of `lnbench check`'s module find them here too
from lnbench.check.args import (
    Args,
    CheckError,
    basic_launcher_unless_joblib,
    check_overrides,
    claim_presets,  # noqa: F401
    parse_args,
    replaced_axes,
    scaled_overrides,  # noqa: F401
    sweep_command,  # noqa: F401
    sweep_dir,  # noqa: F401
    sweep_overrides,
)
from lnbench.check.budget import Budget, minutes
from lnbench.check.design import check_design, kept_design
from lnbench.check.page import write_page
from lnbench.check.preset import Outcome, PresetCheck, judge_preset  # noqa: F401 (Outcome, judge_preset: as before)
from lnbench.config import launchers
from lnbench.config import overrides as hydra_args
from lnbench.runs import check_command, write_check_record


def make_runner(args: Args):
    """The warm pool where it runs the jobs as the sweep's launcher would (basic, joblib: every round in this
    process's pool); under any other (SLURM, submitit) each round a `lnbench train -m` of its own. Returns (runner,
    workers: jobs run at once), both from the launcher's kind (lnbench.config.launchers)."""
    from lnbench.check.runner import PoolRunner, SubprocessRunner  # noqa: PLC0415 (Hydra, the pool: once checked)
    from lnbench.launch.process.pool import joblib_env  # noqa: PLC0415 (Hydra)

    given = hydra_args.axes([a for a in sweep_overrides(args, args.presets[0]) if a != "-m"])
    value = {k: v[-1].split("=", 1)[1] for k, v in given.items()}
    kind = launchers.named(value.get("hydra/launcher", "joblib"))
    workers = kind.job_slots({k.removeprefix("hydra.launcher."): v for k, v in value.items()})
    if not kind.warm_pool:
        return SubprocessRunner(workers), workers
    return PoolRunner(workers, joblib_env(workers) if kind.runs == launchers.FORKED else {}), workers


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["help"]:
        argv = ["--help"]
    try:
        args = parse_args(argv)
        check_design(args)
        basic_launcher_unless_joblib(args)
        check_overrides(args)
    except SystemExit as e:  # --help
        return int(e.code or 0)
    except CheckError as e:
        print(f"lnbench: error: {e}", file=sys.stderr)
        return 2
    for line in [*replaced_axes(args), *kept_design(args)]:
        print(f"lnbench check: {line}", file=sys.stderr)
    t0 = time.time()
    record = {"command": argv, "presets": args.presets, "pid": os.getpid(), "host": os.uname().nodename}
    args.out.mkdir(parents=True, exist_ok=True)
    write_check_record(args.out, {**record, "state": "running", "started": t0})  # for status, a sweep's end
    runner, workers = make_runner(args)
    budget = Budget(args.budget_s, args.budget, t0, workers)
    checks = [PresetCheck(args, preset, budget) for preset in args.presets]
    for line in [budget.read_as(), *plan_estimate(checks, workers)]:
        print(f"lnbench check: {line}", flush=True)
    outcomes: list[Outcome] = []
    extra = [describe(args, runner, workers)]
    md = ""

    def done(outcome: Outcome) -> None:
        nonlocal md
        outcomes.append(outcome)
        outcomes.sort(key=lambda o: args.presets.index(o.preset))
        # the page after every preset: a check stopped half-way still shows the verdicts it reached
        md = write_page(outcomes, args, time.time() - t0, extra)

    try:
        runner.run(checks, done, budget)
    except KeyboardInterrupt:
        write_check_record(args.out, {**record, "state": "stopped", "started": t0})
        print(f"\nlnbench check: interrupted; `{check_command(record)}` resumes it.", file=sys.stderr)
        return 130
    write_check_record(args.out, {**record, "state": "finished", "started": t0})
    print("\n" + md)
    print(f"{args.out / 'check.md'}\n{args.out / 'check.html'}")
    if stopped := [c.preset for c in checks if c.stopped]:
        waiting = sum(bool(d.get("awaiting_seeds")) for o in outcomes for d in o.verdicts)
        print(f"lnbench check: {budget.ran_out()}: {', '.join(stopped)} stopped, {waiting} claim(s) await their seeds")
    if any(o.startswith("logger.wandb.report=") for o in args.overrides):  # the pages as a W&B artifact too
        from lnbench.report.wandb_page import log_check_pages  # noqa: PLC0415 (Hydra and W&B: only when asked)

        print(f"W&B {log_check_pages(args.out, args.overrides) or 'not logged (see the warning above)'}")
    # A preset that produced no verdict at all (its sweep could not run) is a failed check, not a quiet gap.
    return 1 if any(not o.verdicts for o in outcomes) else 0


def describe(args: Args, runner, workers: int) -> str:
    """The page's line on how the check ran its rounds (how it planned its judging seeds: the page reads each
    preset's judging.json, the design that decided)."""
    how = (
        f"one warm pool of {workers} worker(s) for every preset, their rounds overlapping"
        if runner.overlapping
        else f"each round a sweep of its own, one preset after the other ({workers} job slot(s))"
    )
    return f"rounds: {how}; {budget_text(args)}"


def budget_text(args: Args) -> str:
    return "no --budget" if args.budget_s is None else f"--budget {args.budget} ({args.budget_s:g} s of wall time)"


def plan_estimate(checks: list[PresetCheck], workers: int) -> list[str]:
    """What the whole plan will take here, per preset and in all (an estimate, labelled so), and each claim's plan."""
    from lnbench.report import load_runs  # noqa: PLC0415 (the report's imports: once the arguments are checked)

    lines, total = [], 0.0
    for c in checks:
        took, text = c.estimate(load_runs(c.directory) if c.directory.is_dir() else [])
        total += took
        lines.append(f"  {c.preset}: {text}")
        lines += [f"    {cid}: {p.summary()}" for cid, p in c.plans(c.claims()).items()]
    head = f"the whole plan will take here about {minutes(total / workers)} on {workers} worker(s), an estimate:"
    return [head, *lines]
