"""`lnbench check [PRESET...] [scale=K] [overrides]`: run the paper's claim presets and judge every claim.

Each preset (conf/experiment/<name>.yaml with a `claims:` list) runs as one Hydra sweep, by default with
the joblib launcher, into a fixed directory (outputs/check/<preset>, or <preset>-xK at scale K), so that
running the command again resumes: completed jobs are skipped, killed ones continue from their checkpoint.
Then `lnbench report` judges the claims of each sweep, and one page, check.md / check.html, lists every
verdict with a link to its sweep's report and curves.

scale=K multiplies each preset's steps (and its evaluation and logging intervals), or its epochs where the
preset counts in epochs (fig6_mnist). Any other key=value is passed to every sweep, e.g.
hydra/launcher=submitit_slurm hydra.launcher.partition=gpu.
"""
from __future__ import annotations

import html
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from lnbench import CONF_DIR
from lnbench import claims as claimlib
from lnbench.atomic import write_bytes

# The order of a full check: the cheap synthetic presets first, so a first verdict comes early.
ORDER = ("ln_gain_init", "longer_test_seqs", "seq_len_sweep", "batch_size_sweep", "pmnist", "fig6_mnist", "shakespeare_bpc")
SCALED = ("steps", "eval_every", "log_every")
EPOCHS = re.compile(r"^\$\{lnbench\.epochs:([0-9.eE+-]+),")
DEFAULTS = {"hydra/launcher": "joblib", "logger": "none", "progress": "false"}

USAGE = """usage: lnbench check [PRESET ...] [scale=K] [--out DIR] [key=value ...]

  PRESET      claim presets to run (default: all): {presets}
  scale=K     multiply steps (or epochs) by K, e.g. scale=10 on a GPU or a cluster
  --out DIR   where the sweeps and check.md/check.html go (default: outputs/check)
  key=value   passed to every sweep, e.g. hydra/launcher=submitit_slurm hydra.launcher.partition=gpu
              (defaults: {defaults})
"""


class CheckError(Exception):
    """Bad arguments: one paragraph, exit 2."""


def claim_presets() -> list[str]:
    """Every experiment preset that declares claims, in ORDER first, then by name."""
    found = []
    for path in sorted((CONF_DIR / "experiment").glob("*.yaml")):
        if (yaml.safe_load(path.read_text()) or {}).get("claims"):
            found.append(path.stem)
    return sorted(found, key=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), n))


@dataclass
class Args:
    presets: list[str]
    scale: float = 1.0
    out: Path = Path("outputs/check")
    overrides: list[str] = field(default_factory=list)


def parse_args(argv: list[str]) -> Args:
    available = claim_presets()
    presets, overrides, scale, out = [], [], 1.0, Path("outputs/check")
    it = iter(argv)
    for arg in it:
        if arg == "--out":
            out = Path(next(it, "") or ".")
        elif arg.startswith("--out="):
            out = Path(arg.split("=", 1)[1])
        elif arg.startswith("scale="):
            try:
                scale = float(arg.split("=", 1)[1])
            except ValueError:
                scale = -1.0
            if not scale > 0:
                raise CheckError(f"{arg} is not allowed: scale must be a number > 0 (e.g. scale=10 multiplies every preset's steps by 10).")
        elif "=" in arg:
            overrides.append(arg)
        elif arg in available:
            presets.append(arg)
        else:
            raise CheckError(f"preset {arg!r} is not a claim preset: use one of {', '.join(available)} "
                             f"(conf/experiment/*.yaml with a `claims:` list), or none for all of them.")
    return Args(presets or available, scale, out, overrides)


def scaled_overrides(preset: str, scale: float) -> list[str]:
    """steps, eval_every, log_every of the preset times `scale` (its epochs, where it counts in epochs)."""
    if scale == 1:
        return []
    cfg = yaml.safe_load((CONF_DIR / "experiment" / f"{preset}.yaml").read_text()) or {}
    out = []
    for key in SCALED:
        value = cfg.get(key)
        if isinstance(value, int):
            out.append(f"{key}={max(1, round(value * scale))}")
        elif isinstance(value, str) and (m := EPOCHS.match(value)):
            epochs = float(m.group(1)) * scale
            # quoted: Hydra's override grammar takes no nested interpolation bare; OmegaConf resolves it
            out.append(f"{key}='{value[:m.start(1)]}{epochs:g}{value[m.end(1):]}'")
    return out


def sweep_dir(args: Args, preset: str) -> Path:
    # a different scale is a different config: its own directory (a checkpoint resumes only its own config)
    return args.out / (preset if args.scale == 1 else f"{preset}-x{args.scale:g}")


def sweep_command(args: Args, preset: str) -> list[str]:
    given = {o.split("=", 1)[0].lstrip("+") for o in args.overrides}
    if any(k.startswith("logger.") for k in given):  # logger.wandb.mode=online (or logger.mode=...): that logger, not none
        given.add("logger")
    defaults = [f"{k}={v}" for k, v in DEFAULTS.items() if k not in given]
    return [sys.executable, "-m", "lnbench.cli", "train", "-m", f"+experiment={preset}",
            f"hydra.sweep.dir={sweep_dir(args, preset)}", *defaults, *scaled_overrides(preset, args.scale), *args.overrides]


@dataclass
class Outcome:
    preset: str
    directory: Path
    seconds: float
    load: tuple[float, float]  # 1-minute load average at the start and the end
    exit_code: int
    verdicts: list[dict[str, Any]]
    note: str = ""


def run_preset(args: Args, preset: str) -> Outcome:
    from lnbench import report

    cmd = sweep_command(args, preset)
    print(f"\nlnbench check: {preset}: {' '.join(cmd[3:])}", flush=True)
    load0, t0 = os.getloadavg()[0], time.time()
    sweep = subprocess.Popen(cmd)
    try:
        code = sweep.wait()
    except KeyboardInterrupt:
        # Ctrl-C reached the sweep too: let its jobs write their checkpoints (never kill it mid-write)
        sweep.wait()
        raise
    seconds, load1 = time.time() - t0, os.getloadavg()[0]
    directory = sweep_dir(args, preset)
    runs = report.load_runs(directory) if directory.is_dir() else []
    if not runs:
        return Outcome(preset, directory, seconds, (load0, load1), code, [], "the sweep left no runs")
    rep = report.make_report(directory, runs, {})
    report.write_report(rep, directory / report.OUT_DIR)
    note = "; ".join(rep.claim_errors)
    failed = [r for r in runs if r.status != "completed"]
    if failed:
        note = (note + "; " if note else "") + f"{len(failed)} of {len(runs)} jobs not completed (see its report)"
    return Outcome(preset, directory, seconds, (load0, load1), code, rep.verdicts, note)


def page_rows(outcomes: list[Outcome], base: Path) -> list[list[str]]:
    rows = []
    for o in outcomes:
        link = os.path.relpath(o.directory / "report" / "report.html", base)
        if not o.verdicts:
            rows.append(["—", o.preset, "no verdict: " + (o.note or "no claims"), "—", "—", link])
        for d in o.verdicts:
            verdict = d["verdict"] + (f" ({d['reason']})" if d["verdict"] == claimlib.INCONCLUSIVE and d["reason"] else "")
            rows.append([f"{d['id']}: {d['text']}", o.preset, verdict, claimlib.fmt_effect(d), str(d["n_seeds"]), link])
    return rows


COLUMNS = ["claim", "preset", "verdict", "effect [95% CI]", "seeds", "curves"]


def header(outcomes: list[Outcome], args: Args, seconds: float) -> list[str]:
    counts: dict[str, int] = {}
    for o in outcomes:
        for d in o.verdicts:
            counts[d["verdict"]] = counts.get(d["verdict"], 0) + 1
    lines = [
        f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}; scale={args.scale:g}; overrides: {' '.join(args.overrides) or 'none'}",
        "verdicts: " + (", ".join(f"{n} {v}" for v, n in sorted(counts.items())) or "none"),
        f"time of this invocation: {seconds / 60:.1f} min on {os.cpu_count()} cores (jobs completed earlier were skipped); "
        "1-minute load average at the start and end of each preset: "
        + ", ".join(f"{o.preset} {o.seconds / 60:.1f} min, load {o.load[0]:.1f}→{o.load[1]:.1f}" for o in outcomes),
        "statistics: " + claimlib.METHOD + "; effect > 0 supports the claim",
        "each model runs at its own learning rate, chosen per panel on validation only (the preset's `tune:`); "
        "the linked report says which value won and flags a winner at the edge of the grid",
    ]
    lines += [f"{o.preset}: {o.note}" for o in outcomes if o.note]
    return lines


def render_markdown(outcomes: list[Outcome], args: Args, seconds: float, base: Path) -> str:
    def cells(values: list[str]) -> str:
        return "| " + " | ".join(v.replace("|", "\\|").replace("\n", " ") for v in values) + " |"

    rows = page_rows(outcomes, base)
    body = [cells(r[:-1] + [f"[report]({r[-1]})"]) for r in rows]
    return "\n".join(["# lnbench check", "", *[f"- {line}" for line in header(outcomes, args, seconds)], "",
                      cells(COLUMNS), cells(["---"] * len(COLUMNS)), *body, ""])


def render_html(outcomes: list[Outcome], args: Args, seconds: float, base: Path) -> str:
    from lnbench.report import STYLE

    colors = {"held": "#d9f2d9", "contradicted": "#f7d4d4"}
    head = "".join(f"<th>{html.escape(c)}</th>" for c in COLUMNS)
    body = []
    for r in page_rows(outcomes, base):
        bg = colors.get(r[2].split(" ", 1)[0], "#fff")
        tds = "".join(f"<td>{html.escape(v)}</td>" for v in r[:-1])
        body.append(f"<tr style='background:{bg}'>{tds}<td><a href='{html.escape(r[-1])}'>report</a></td></tr>")
    items = "".join(f"<li>{html.escape(line)}</li>" for line in header(outcomes, args, seconds))
    return (f"<!doctype html><meta charset='utf-8'><title>lnbench check</title><style>{STYLE}</style>"
            f"<h1>lnbench check</h1><ul>{items}</ul><table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>")


def write_page(outcomes: list[Outcome], args: Args, seconds: float) -> str:
    args.out.mkdir(parents=True, exist_ok=True)
    md = render_markdown(outcomes, args, seconds, args.out)
    write_bytes(args.out / "check.md", md.encode())
    write_bytes(args.out / "check.html", render_html(outcomes, args, seconds, args.out).encode())
    return md


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in ("-h", "--help", "help"):
        print(USAGE.format(presets=", ".join(claim_presets()), defaults=" ".join(f"{k}={v}" for k, v in DEFAULTS.items())))
        return 0
    try:
        args = parse_args(argv)
    except CheckError as e:
        print(f"lnbench check: {e}", file=sys.stderr)
        return 2
    t0 = time.time()
    outcomes = []
    md = ""
    for preset in args.presets:
        try:
            outcomes.append(run_preset(args, preset))
        except KeyboardInterrupt:
            print(f"\nlnbench check: interrupted during {preset}; run the same command again to resume.", file=sys.stderr)
            return 130
        # the page after every preset: a check stopped half-way still shows the verdicts it reached
        md = write_page(outcomes, args, time.time() - t0)
    print("\n" + md)
    print(f"{args.out / 'check.md'}\n{args.out / 'check.html'}")
    # A preset that produced no verdict at all (its sweep could not run) is a failed check, not a quiet gap.
    return 1 if any(not o.verdicts for o in outcomes) else 0
