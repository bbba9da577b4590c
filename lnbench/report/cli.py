"""`lnbench report DIR [DIR...] [options]`: its arguments, and every way they can be wrong.

Bad input (a DIR that is no directory or holds no runs, an option naming a key or metric the runs do not
have, a value that is no number, an --out that cannot be written) is refused with one paragraph naming
the value and what is allowed, exit 2, before anything is written.
"""

from __future__ import annotations

import argparse
import difflib
import math
import sys
from pathlib import Path
from typing import Any

from lnbench.atomic import unwritable
from lnbench.claims.family import DEFAULT_ADJUST
from lnbench.errors import OptionsParser, UserError
from lnbench.report.analysis import varied_keys
from lnbench.report.make import PRIMARY, make_report
from lnbench.report.page import summary, write_report
from lnbench.runs import OUT_DIR, Run, load_runs, source_names

DESCRIPTION = "A run or a whole sweep directory -> convergence plots (PNG), claim verdicts and a Markdown/HTML table."
ADJUST = {
    "bonferroni": "over each claim's declared family, the default: the same verdict on every page",
    "holm": "family-wise error over the declared family",
    "bh": "Benjamini-Hochberg false discovery rate",
    "none": "no adjustment",
}


class ReportError(UserError):
    """Bad input to `lnbench report`; the message names the value and what is allowed."""


def parser() -> argparse.ArgumentParser:
    p = OptionsParser(prog="lnbench report", description=DESCRIPTION, refuse=ReportError)
    p.add_argument(
        "dirs",
        type=Path,
        nargs="+",
        metavar="DIR",
        help="run or sweep directories (outputs/multirun/<date>/<time>, or a folder of runs such as "
        "outputs/runs/<date>); several are compared in one report",
    )
    p.add_argument(
        "--target",
        action="append",
        default=[],
        metavar="METRIC=VALUE",
        help="count steps and seconds until val METRIC <= VALUE (repeatable; default: the primary "
        "metric's best value of the slowest-converging completed run that learned)",
    )
    p.add_argument("--lines", metavar="KEY", help="the swept key drawn as lines (default: model)")
    p.add_argument(
        "--panels", metavar="KEY[,KEY]", help="the swept keys drawn as panels (default: the other swept keys)"
    )
    p.add_argument(
        "--tune",
        metavar="KEY[,KEY]",
        help="swept keys to select per line and panel on validation (default: the preset's `tune:`)",
    )
    p.add_argument("--out", type=Path, help=f"where to write (default: DIR/{OUT_DIR}; required with several DIRs)")
    p.add_argument(
        "--adjust",
        default=DEFAULT_ADJUST,
        metavar="METHOD",
        help="the claims' adjustment over their declared family: bonferroni (the default), holm, bh "
        "(Benjamini-Hochberg false discovery rate) or none; the unadjusted verdict is always shown",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    try:
        args = parser().parse_args(argv)
        return report_command(args)
    except SystemExit as e:  # --help
        return int(e.code or 0)
    except UserError as e:
        print(f"lnbench: error: {e}", file=sys.stderr)
        return 2


def report_command(args: argparse.Namespace) -> int:
    roots: list[Path] = args.dirs
    check_dirs(roots, args.out)
    if args.adjust not in ADJUST:
        raise ReportError(
            f"--adjust {args.adjust!r} is not allowed: use " + ", ".join(f"{k} ({v})" for k, v in ADJUST.items()) + "."
        )
    panels, tune = _keys(args.panels), _keys(args.tune)
    targets = parse_targets(args.target)
    runs = read_runs(roots)
    check_options(runs, args.lines, panels, tune, targets)
    out = args.out or roots[0] / OUT_DIR
    check_out(out, given=args.out is not None)
    rep = make_report(roots[0], runs, targets, args.lines, panels, tune=tune, roots=roots, adjust=args.adjust)
    try:
        paths = write_report(rep, out)
    except OSError as e:
        raise ReportError(
            f"the report could not be written to {out}: {e.strerror or e}. Free space there, or give "
            "another directory with --out DIR."
        ) from None
    print("\n".join(map(str, paths)) + "\n")
    print(summary(rep), end="")
    return 0


def _keys(text: str | None) -> list[str] | None:
    return None if text is None else text.split(",")


def check_dirs(roots: list[Path], out: Path | None) -> None:
    for root in roots:
        if not root.exists():
            raise ReportError(
                f"DIR {root} does not exist: give a run directory or a sweep directory "
                "(outputs/multirun/<date>/<time>, "
                "outputs/runs/<date>)."
            )
        if not root.is_dir():
            raise ReportError(
                f"DIR {root} is a file, not a directory: give the directory of a run or of a sweep (the one holding "
                "summary.json or the job directories 0, 1, ...)."
            )
    if len(roots) > 1 and out is None:
        # each DIR/report is that directory's own report (lnbench check links to it): a comparison goes elsewhere
        raise ReportError(
            f"{len(roots)} directories are compared: say where the report goes with --out DIR "
            f"(each DIR/{OUT_DIR} is kept for that directory's own report)."
        )


def read_runs(roots: list[Path]) -> list[Run]:
    try:
        if len(roots) > 1:
            runs = [run for root, name in zip(roots, source_names(roots)) for run in load_runs(root, name)]
        else:
            runs = load_runs(roots[0])
    except OSError as e:
        raise ReportError(
            f"{e.filename} could not be read ({e.strerror}): a report reads every run's files; "
            "fix the permissions or leave that directory out."
        ) from None
    if not runs:
        raise ReportError(
            f"no runs under {', '.join(map(str, roots))} (no summary.json, metrics.jsonl or .hydra/overrides.yaml): "
            "give the directory of a run, a sweep or a folder of runs."
        )
    return runs


def check_out(out: Path, given: bool) -> None:
    """Refuse an --out that cannot be written before the (slow) report is made."""
    if why := unwritable(out):
        where = f"--out {out}" if given else f"the report's directory {out} (the default, DIR/{OUT_DIR})"
        raise ReportError(f"{where} cannot be written: {why}. Give a directory you can write to with --out DIR.")


def parse_targets(items: list[str]) -> dict[str, float]:
    """`--target error=0.05` per metric; a bare number is for the primary metric."""
    targets = {}
    for item in items:
        metric, _, text = item.rpartition("=")
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise ReportError(
                f"--target {item!r} is not METRIC=NUMBER with a finite number (e.g. --target error=0.05)."
            )
        if value < 0:  # "steps to target" counts until val METRIC <= VALUE: never, below every metric's floor
            raise ReportError(
                f"--target {item!r} can never be reached: every metric lnbench logs (loss, error, mse, "
                "bpc, the bound) is >= 0, and a target counts the steps until the metric is at or below "
                "it. Give a number >= 0 (e.g. --target error=0.05)."
            )
        targets[metric or PRIMARY] = value
    return targets


def check_options(
    runs: list[Run], line: str | None, panels: list[str] | None, tune: list[str] | None, targets: dict[str, float]
) -> None:
    """Refuse a --lines/--panels/--tune key no run has and a --target metric no run logged, naming those that
    exist: a misspelt key would otherwise give one panel of everything, silently."""
    axes = varied_keys([r for r in runs if r.trained] or runs)
    for option, keys in (
        ("--lines", [] if line is None else [line]),
        ("--panels", panels or []),
        ("--tune", tune or []),
    ):
        for key in keys:
            if not any(r.has(key) for r in runs):
                near = difflib.get_close_matches(key, sorted(config_keys(runs)), n=3)
                raise ReportError(
                    f"{option} {key!r} is no config key of these runs. Keys that vary between them: "
                    f"{', '.join(axes) or 'none'}"
                    + (f"; did you mean {' or '.join(near)}?" if near else "")
                    + " (any key of the runs' .hydra/config.yaml is allowed, e.g. dataset.batch_size)."
                )
    for key in tune or []:
        if key not in axes:  # legitimate elsewhere, a no-op here: there is one value to choose from
            raise ReportError(
                f"--tune {key!r} is not allowed: these runs did not sweep it (every run has {key}="
                f"{runs[0].value(key)}), so there is nothing to choose. Keys that vary between them: "
                f"{', '.join(axes) or 'none'}."
            )
    if line and panels and line in panels:
        raise ReportError(f"--lines {line!r} is also in --panels: a key draws either the lines or the panels.")
    logged = set().union(*(r.metrics("val") for r in runs))
    for metric in targets:
        if metric != PRIMARY and metric not in logged:
            raise ReportError(
                f"--target {metric!r}: no run logged a validation {metric}. Metrics they logged: "
                f"{', '.join(sorted(logged)) or 'none yet'} (e.g. --target {next(iter(sorted(logged)), 'loss')}=0.1)."
            )


def config_keys(runs: list[Run]) -> set[str]:
    keys: set[str] = set()
    for r in runs:
        keys |= {*r.overrides, *r.choices, *_flat(r.config)}
    return keys


def _flat(d: dict[str, Any], prefix: str = "") -> list[str]:
    return [
        k for key, v in d.items() for k in (_flat(v, f"{prefix}{key}.") if isinstance(v, dict) else [f"{prefix}{key}"])
    ]
