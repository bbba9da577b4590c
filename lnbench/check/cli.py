"""`lnbench check [PRESET...] [scale=K] [options] [overrides]`: run the paper's claim presets and judge every claim.

Each preset (conf/experiment/<name>.yaml with a `claims:` list) runs as one Hydra sweep, by default with
the joblib launcher, into a fixed directory (outputs/check/<preset>, or <preset>-xK at scale K), so that
running the command again resumes: completed jobs are skipped, killed ones continue from their checkpoint.
Then, per preset, the rounds of lnbench/check/rounds.py: a grid whose winner sits at its edge is widened by one
value on that side (--widen), and fresh judging seeds run at each line's chosen value (--judging-seeds).
Once every preset is judged, the claims still inconclusive after the family adjustment get more judging
seeds, a round at a time, up to --max-seeds (looks that spend alpha as lnbench/claims/verdicts.py says). One
page, check.md / check.html, lists every verdict, adjusted over all the claims of the page, with a link to
its sweep's report and curves.

scale=K multiplies each preset's steps (and its evaluation and logging intervals), or its epochs where the
preset counts in epochs (fig6_mnist). Any other key=value is passed to every sweep, e.g.
hydra/launcher=slurm hydra.launcher.partition=gpu.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lnbench import report
from lnbench.atomic import write_bytes
from lnbench.check import rounds

# claim_presets and scaled_overrides are not used here: callers of `lnbench check`'s module find them here too
from lnbench.check.args import (
    Args,
    CheckError,
    basic_launcher_unless_joblib,
    check_design,
    check_overrides,
    claim_presets,  # noqa: F401
    parse_args,
    replaced_axes,
    scaled_overrides,  # noqa: F401
    sweep_command,
    sweep_dir,
)
from lnbench.check.page import adjusted, write_page
from lnbench.claims import verdicts as verdictlib
from lnbench.claims.judge import DESIGN_FILE
from lnbench.config.presets import read_experiment, sweeper_params
from lnbench.launch.process.guardian import die_with_parent


@dataclass
class Outcome:
    preset: str
    directory: Path
    seconds: float
    load: tuple[float, float]  # 1-minute load average at the start and the end
    exit_code: int
    verdicts: list[dict[str, Any]]
    note: str = ""
    added: dict[str, int] = field(default_factory=dict)  # runs by stage: tune, widen, judge


def run_sweep(cmd: list[str]) -> int:
    print(f"\nlnbench check: {' '.join(cmd[3:])}", flush=True)
    sweep = subprocess.Popen(cmd, preexec_fn=die_with_parent)  # a killed check leaves no sweep training on
    try:
        return sweep.wait()
    except KeyboardInterrupt:
        # Ctrl-C reached the sweep too: let its jobs write their checkpoints (never kill it mid-write)
        sweep.wait()
        raise


def judge_preset(args: Args, directory: Path, figures: bool = True):
    """The preset's report (written), or None if its sweep left no runs."""

    runs = report.load_runs(directory) if directory.is_dir() else []
    if not runs:
        return None
    rep = report.make_report(directory, runs, {}, x_axes=report.X_AXES if figures else (), adjust=args.adjust)
    if figures:
        report.write_report(rep, directory / report.OUT_DIR)
    return rep


def run_preset(args: Args, preset: str) -> Outcome:
    """The tuning sweep, the widening rounds, the first look's judging seeds, the report."""
    base = sweep_command(args, preset)
    directory = sweep_dir(args, preset)
    load0, t0 = os.getloadavg()[0], time.time()
    code = run_sweep(base)
    refused: list[str] = []  # rounds whose sweep refused its input (exit 2): a bug to report, never a quiet gap
    # read again only after a round added runs
    rep = judge_preset(args, directory, figures=False) if args.widen or args.looks else None
    for k in range(1, args.widen + 1):
        cells = rounds.widen_cells(rep, rounds.needed(rep), args.widen) if rep else []
        if not cells:
            break
        for cmd in rounds.commands(base, directory, f"widen-{k}", cells, _drop(preset, cells)):
            if run_sweep(cmd) == 2:
                refused.append(f"widen-{k}")
        rep = judge_preset(args, directory, figures=False)
    if args.looks and rep:
        write_bytes(directory / DESIGN_FILE, (json.dumps(rounds.design_record(args.looks)) + "\n").encode())
        cells = rounds.judge_cells(rep, rounds.needed(rep), rounds.judging_seeds(args.looks, 0))
        for cmd in rounds.commands(base, directory, "judge-1", cells, _drop(preset, cells)):
            if run_sweep(cmd) == 2:
                refused.append("judge-1")
    rep = judge_preset(args, directory)
    seconds, load1 = time.time() - t0, os.getloadavg()[0]
    if rep is None:
        return Outcome(preset, directory, seconds, (load0, load1), code, [], "the sweep left no runs")
    notes = [_note(rep)] if _note(rep) else []
    note = "; ".join(notes + [f"the {r} sweep refused its input (see the log above it)" for r in refused])
    return Outcome(preset, directory, seconds, (load0, load1), code, rep.verdicts, note, rounds.counts(rep.runs))


def _drop(preset: str, cells: list) -> set[str]:
    """The overrides a round's sweep leaves out of the preset's command: its cells set them (and the seeds)."""
    params = sweeper_params(read_experiment(preset))
    return {"seed", *params, *(k for c in cells for k in c.values)}


def _note(rep) -> str:
    note = "; ".join(rep.claim_errors)
    failed = [r for r in rep.runs if r.status not in ("completed", "diverged")]
    if failed:
        note = (
            note + "; " if note else ""
        ) + f"{len(failed)} of {len(rep.runs)} jobs neither completed nor diverged (see its report)"
    return note


def more_seeds(args: Args, outcomes: list[Outcome], look: int) -> tuple[int, float, tuple[float, float]]:
    """One adaptive round: judging seeds up to looks[look] for the claims the family still leaves
    inconclusive (and could decide: judged on judging seeds, at the previous look, nothing blocking them).
    Returns (claims that got seeds, seconds, load at start and end)."""
    family = adjusted(outcomes, args.adjust)
    pending = {
        d["id"]
        for d in family
        if d["verdict"] == verdictlib.INCONCLUSIVE
        and not d.get("raw_reason")
        and not d.get("note")
        and d.get("n_seeds") == args.looks[look - 1]
    }
    load0, t0 = os.getloadavg()[0], time.time()
    for o in outcomes:
        ids = pending & {d["id"] for d in o.verdicts}
        rep = judge_preset(args, o.directory, figures=False) if ids else None
        if rep is None:
            continue
        cells = rounds.judge_cells(rep, rounds.needed(rep, ids), rounds.judging_seeds(args.looks, look))
        t1 = time.time()
        for cmd in rounds.commands(
            sweep_command(args, o.preset), o.directory, f"judge-{look + 1}", cells, _drop(o.preset, cells)
        ):
            run_sweep(cmd)
        rep = judge_preset(args, o.directory)
        o.verdicts, o.note, o.added, o.seconds = (
            rep.verdicts,
            _note(rep),
            rounds.counts(rep.runs),
            o.seconds + time.time() - t1,
        )
    return len(pending), time.time() - t0, (load0, os.getloadavg()[0])


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
    for line in replaced_axes(args):
        print(f"lnbench check: {line}", file=sys.stderr)
    t0 = time.time()
    outcomes: list[Outcome] = []
    extra: list[str] = []
    md = ""
    try:
        for preset in args.presets:
            outcomes.append(run_preset(args, preset))
            # the page after every preset: a check stopped half-way still shows the verdicts it reached
            md = write_page(outcomes, args, time.time() - t0, extra)
        for look in range(1, len(args.looks)):
            n, seconds, (l0, l1) = more_seeds(args, outcomes, look)
            if not n:
                break
            extra.append(
                f"round {look + 1}: judging seeds up to {args.looks[look]} for {n} claim(s) still inconclusive, "
                f"{seconds / 60:.1f} min, load {l0:.1f}→{l1:.1f}"
            )
            md = write_page(outcomes, args, time.time() - t0, extra)
    except KeyboardInterrupt:
        print("\nlnbench check: interrupted; run the same command again to resume.", file=sys.stderr)
        return 130
    print("\n" + md)
    print(f"{args.out / 'check.md'}\n{args.out / 'check.html'}")
    if any(o.startswith("logger.wandb.report=") for o in args.overrides):  # the pages as a W&B artifact too
        from lnbench.report.wandb_page import log_check_pages  # noqa: PLC0415 (Hydra and W&B: only when asked)

        print(f"W&B {log_check_pages(args.out, args.overrides) or 'not logged (see the warning above)'}")
    # A preset that produced no verdict at all (its sweep could not run) is a failed check, not a quiet gap.
    return 1 if any(not o.verdicts for o in outcomes) else 0
