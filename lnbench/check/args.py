"""`lnbench check`'s arguments: parsed by argparse, sorted into presets, scale=K and overrides, and checked
before any sweep starts (the options' values, --out, the design of looks of a sweep judged before, and each
preset's sweep composed with the overrides and validated, values included). Every refusal is a CheckError:
one paragraph, exit 2, nothing written."""

from __future__ import annotations

import difflib
import importlib.util
import math
import re
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from lnbench import CONF_DIR
from lnbench.atomic import unwritable
from lnbench.check.budget import BudgetError, parse_budget
from lnbench.claims import verdicts as verdictlib
from lnbench.claims.family import DEFAULT_ADJUST
from lnbench.claims.stats import ADJUST
from lnbench.config import overrides as hydra_args
from lnbench.config.choices import Stage
from lnbench.config.presets import experiments, read_experiment, sweeper_params
from lnbench.errors import OptionsParser, UserError

# The order of a full check: the cheap synthetic presets first, so a first verdict comes early.
ORDER = (
    "ln_gain_init",
    "longer_test_seqs",
    "seq_len_sweep",
    "batch_size_sweep",
    "pmnist",
    "fig6_mnist",
    "shakespeare_bpc",
)
SCALED = ("steps", "eval_every", "log_every")
EPOCHS = re.compile(r"^\$\{lnbench\.epochs:([0-9.eE+-]+),")
DEFAULTS = {"hydra/launcher": "joblib", "logger": "none", "progress": "false"}

USAGE = """usage: lnbench check [PRESET ...] [scale=K] [--out DIR] [options] [key=value ...]

  PRESET              claim presets to run (default: all): {presets}
  scale=K             multiply steps (or epochs) by K, e.g. scale=10 on a GPU or a cluster
  --out DIR           where the sweeps and check.md/check.html go (default: outputs/check)
  --budget TIME       the check's wall time, e.g. 90m, 2h, 1h30m, 5400s (default none): once it has run out
                      no round starts; open claims await their seeds and the same command continues. It
                      never changes a claim's plan
  --max-seeds N       the most judging seeds a claim is planned (default {cap}; kept in judging.json)
  --judging-seeds N   judging seeds per look, looks of N, 2N, ... up to --max-seeds (default 3N), instead of
                      a plan per claim; 0: no judging seeds (judged on the tuning seeds, which favours the
                      noisier line)
  --widen N           values added past a grid's edge, one a round, while a compared line's winner sits
                      there (default {widen}; 0: none)
  --adjust METHOD     over each claim's declared family: bonferroni (default: the same verdict on every page),
                      holm, bh (false discovery rate) or none
  key=value           passed to every sweep, e.g. hydra/launcher=slurm hydra.launcher.partition=gpu
                      (defaults: {defaults})
"""
OPTIONS = {
    "--judging-seeds": "judging",
    "--max-seeds": "max_seeds",
    "--widen": "widen",
    "--adjust": "adjust",
    "--budget": "budget",
}
DEFAULT_WIDEN = 3


class CheckError(UserError):
    """Bad arguments: one paragraph, exit 2."""


def claim_presets() -> list[str]:
    """Every experiment preset that declares claims, wherever Hydra finds it (lnbench's, then your own folder's),
    in ORDER first, then by name."""
    try:
        found = [name for name, cfg in experiments().items() if cfg.get("claims")]
    except UserError as e:  # a preset of yours that cannot be read
        raise CheckError(str(e)) from None
    return sorted(found, key=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), n))


@dataclass
class Args:
    presets: list[str]
    scale: float = 1.0
    out: Path = Path("outputs/check")
    overrides: list[str] = field(default_factory=list)
    judging: int | None = None  # judging seeds per look; None: planned per claim (lnbench.claims.plan)
    max_seeds: int | None = None  # the cap of a plan, or the last look (default: 3 looks)
    widen: int = DEFAULT_WIDEN
    adjust: str = DEFAULT_ADJUST
    budget_s: float | None = None  # the check's wall time (lnbench.check.budget); None: the whole plan
    budget: str = "none"  # --budget as given

    @property
    def planned(self) -> bool:
        """Each claim's judging seeds planned for its test's power (the default)."""
        return self.judging is None

    @property
    def looks(self) -> list[int]:
        """The looks given by hand (--judging-seeds N: N, 2N, ... up to --max-seeds); [] where none is: no
        judging seeds (--judging-seeds 0) or a plan per claim (planned)."""
        if not self.judging:
            return []
        last = self.max_seeds or 3 * self.judging
        looks = list(range(self.judging, last + 1, self.judging))
        return looks + ([last] if looks[-1] != last else [])


class _Parser(OptionsParser):
    """argparse's errors as one paragraph, in lnbench check's words where it has its own."""

    argv: list[str] = []

    def error(self, message: str):
        if m := re.fullmatch(r"argument (--[\w-]+): expected one argument", message):
            name = m.group(1)
            after = self.argv[self.argv.index(name) + 1 : self.argv.index(name) + 2] if name in self.argv else []
            given = f"{after[0]!r}, another option" if after else "none"
            wanted = WANTED.get(name, "a value (lnbench check --help)")
            raise CheckError(f"{name} needs {wanted}; it was given {given}.")
        if m := re.match(r"unrecognized arguments: (\S+)", message):
            option = m.group(1).split("=")[0]
            raise CheckError(
                f"option {option!r} is not allowed: use --out, {', '.join(OPTIONS)}, scale=K, preset "
                "names or key=value overrides for every sweep (`lnbench check --help`)."
            )
        super().error(message)

    def format_help(self) -> str:
        from lnbench.claims import plan  # noqa: PLC0415 (scipy: only for the help's defaults)

        defaults = " ".join(f"{k}={v}" for k, v in DEFAULTS.items())
        return USAGE.format(
            presets=", ".join(claim_presets()),
            defaults=defaults,
            cap=plan.CAP,
            widen=DEFAULT_WIDEN,
        )


WANTED = {"--out": "a directory, e.g. --out outputs/check"}

# Overrides that would wreck the check's own layout or judging: each refused, with what to do instead.
OUT_HINT = "lnbench check lays out its sweeps itself: give --out DIR to move them all"
RESERVED = {
    "hydra.sweep.dir": OUT_HINT,
    "hydra.sweep.subdir": OUT_HINT,
    "hydra.run.dir": OUT_HINT,
    "hydra.output_subdir": OUT_HINT,
    "hydra.searchpath": "lnbench check sets the search path of its rounds itself",
    "hydra.sweeper.params": "a preset's swept axes are replaced by giving the key its values (e.g. seed=0,1)",
    "experiment": "name the presets as arguments (lnbench check fig6_mnist pmnist)",
    "stage": "lnbench check sets each run's stage (tune, widen, judge) itself",
    "claims": "the claims are the presets' (conf/experiment/*.yaml); a preset of your own declares its own",
    "tune": "the tuned keys are the presets' (their `tune:`); give a key one value to fix it",
    "cell": "lnbench check's rounds set it",
}


def parser(argv: list[str]) -> _Parser:
    p = _Parser(prog="lnbench check", allow_abbrev=False, refuse=CheckError)
    p.argv = argv
    p.add_argument("items", nargs="*", metavar="PRESET|scale=K|key=value")
    p.add_argument("--out", type=Path, default=Args.out)
    for option, attr in OPTIONS.items():
        p.add_argument(option, dest=attr)
    return p


def reserved(key: str) -> str | None:
    """Why `key` (or a key under it) is lnbench check's own, or None."""
    return next((why for k, why in RESERVED.items() if key == k or key.startswith(f"{k}.")), None)


def parse_args(argv: list[str]) -> Args:
    """Options by argparse; the positional items sorted into presets, scale=K and overrides; values checked."""
    parsed = parser(argv).parse_intermixed_args(argv)
    args = Args([], out=parsed.out)
    available = claim_presets()
    for item in parsed.items:
        name, eq, given = item.partition("=")
        if name == "scale":
            args.scale = _scale(item, given)
        elif eq or item.startswith("~"):  # key=value, or ~key (Hydra's deletion)
            if why := reserved(name.lstrip("+~")):
                raise CheckError(f"{item} is not allowed under lnbench check: {why}.")
            args.overrides.append(item)
        elif item in available:
            args.presets.append(item)
        else:
            near = difflib.get_close_matches(item, available, n=2)
            hint = f" (did you mean {' or '.join(near)}?)" if near else ""
            raise CheckError(
                f"preset {item!r} is not a claim preset{hint}: use one of {', '.join(available)} "
                "(experiment/*.yaml with a `claims:` list, in conf/ or your own folder), or none for all of them."
            )
    for option, attr in OPTIONS.items():
        if (text := getattr(parsed, attr)) is not None:
            _set_option(args, option, text)
    args.presets = args.presets or available
    if args.judging and args.max_seeds is not None and args.max_seeds < args.judging:
        raise CheckError(
            f"--max-seeds {args.max_seeds} is not allowed with --judging-seeds {args.judging}: a claim gets at "
            f"least the first look's seeds (use --max-seeds {args.judging} for a single look)."
        )
    return args


def _scale(arg: str, text: str) -> float:
    try:
        scale = float(text)
    except ValueError:
        scale = math.nan
    if not (math.isfinite(scale) and scale > 0):
        raise CheckError(
            f"{arg} is not allowed: scale must be a finite number > 0 "
            "(e.g. scale=10 multiplies every preset's steps by 10)."
        )
    return scale


def _set_option(args: Args, name: str, text: str) -> None:
    if name == "--budget":
        try:
            args.budget_s, args.budget = parse_budget(text), text
        except BudgetError as e:
            raise CheckError(str(e)) from None
        return
    if name == "--adjust":
        if text not in ADJUST:
            raise CheckError(f"--adjust {text!r} is not allowed: use bonferroni (the default), holm, bh or none.")
        args.adjust = text
        return
    low = {"--judging-seeds": 0, "--max-seeds": verdictlib.MIN_SEEDS, "--widen": 0}[name]
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < low or name == "--judging-seeds" and 0 < value < verdictlib.MIN_SEEDS:
        what = {
            "--judging-seeds": f"0 (judge on the tuning seeds) or an integer >= {verdictlib.MIN_SEEDS}",
            "--max-seeds": f"an integer >= {verdictlib.MIN_SEEDS}",
            "--widen": "an integer >= 0",
        }[name]
        raise CheckError(f"{name} {text!r} is not allowed: use {what}.")
    setattr(args, OPTIONS[name], value)


def scaled_overrides(preset: str, scale: float) -> list[str]:
    """steps, eval_every, log_every of the preset times `scale` (its epochs, where it counts in epochs)."""
    if scale == 1:
        return []
    cfg = read_experiment(preset)
    out = []
    for key in SCALED:
        value = cfg.get(key)
        if isinstance(value, int):
            out.append(f"{key}={max(1, round(value * scale))}")
        elif isinstance(value, str) and (m := EPOCHS.match(value)):
            epochs = float(m.group(1)) * scale
            # quoted: Hydra's override grammar takes no nested interpolation bare; OmegaConf resolves it
            out.append(f"{key}='{value[: m.start(1)]}{epochs:g}{value[m.end(1) :]}'")
    return out


def sweep_dir(args: Args, preset: str) -> Path:
    # a different scale is a different config: its own directory (a checkpoint resumes only its own config)
    return args.out / (preset if args.scale == 1 else f"{preset}-x{args.scale:g}")


def sweep_command(args: Args, preset: str) -> list[str]:
    """The `lnbench train -m ...` of a preset's tuning sweep, as a command line."""
    return [sys.executable, "-m", "lnbench.cli", "train", *sweep_overrides(args, preset)]


def sweep_overrides(args: Args, preset: str) -> list[str]:
    """What `lnbench train` is given for a preset's tuning sweep: -m, the preset, its directory, the defaults
    the user did not override, the scaled steps, then the user's overrides (the last word is theirs)."""
    given = {o.split("=", 1)[0].lstrip("+") for o in args.overrides}
    if any(
        k.startswith("logger.") for k in given
    ):  # logger.wandb.mode=online (or logger.mode=...): that logger, not none
        given.add("logger")
    defaults = [f"{k}={v}" for k, v in DEFAULTS.items() if k not in given]
    if any(o.startswith("logger.wandb.") or o.startswith("logger=") and "wandb" in o for o in args.overrides):
        # W&B: every round of a preset in one group; the round as the job type (lnbench.check.rounds.commands)
        wandb = {"logger.wandb.group": sweep_dir(args, preset).name, "logger.wandb.job_type": Stage.tune.value}
        defaults += [f"{k}={v}" for k, v in wandb.items() if k not in given]
    return [
        "-m",
        f"+experiment={preset}",
        f"hydra.sweep.dir={sweep_dir(args, preset)}",
        *defaults,
        *scaled_overrides(preset, args.scale),
        *args.overrides,
    ]


def basic_launcher_unless_joblib(args: Args) -> None:
    """The default launcher, joblib, is an extra (lnbench[joblib]): without it the sweeps run on Hydra's basic one."""
    chosen = any(o.startswith("hydra/launcher=") for o in args.overrides)
    if chosen or importlib.util.find_spec("hydra_plugins.hydra_joblib_launcher"):
        return
    args.overrides.append("hydra/launcher=basic")
    print(
        "lnbench check: the joblib launcher is not installed (pip install 'lnbench[joblib]'): each sweep runs its "
        "jobs one at a time (hydra/launcher=basic).",
        file=sys.stderr,
    )


def check_overrides(args: Args) -> None:
    """The key=value overrides and your own defaults, composed with every preset's sweep as `lnbench train` would
    before its first job (lnbench.launch.preflight), and each job validated, values included: a typo or a bad value
    is one error now, not a sweep of failed jobs per preset. A job the preset itself refuses (BN at batch 1) is not
    the overrides' fault: it fails alone, as it would without them."""
    from lnbench.config import user_folder  # noqa: PLC0415 (Hydra: only to check the sweeps)
    from lnbench.config.schema import register_configs  # noqa: PLC0415 (Hydra: only to check the sweeps)
    from lnbench.launch.preflight import preflight  # noqa: PLC0415 (Hydra: only to check the sweeps)

    try:  # your own defaults, once: what is wrong there is no preset's
        user_folder.check(args.overrides)
    except UserError as e:
        raise CheckError(str(e)) from None
    register_configs()
    for preset in args.presets:
        try:
            preflight(sweep_overrides(args, preset), str(CONF_DIR), sweep_values=True, users=args.overrides)
        except UserError as e:
            raise CheckError(f"{e} (with the sweep of {preset})") from None


def replaced_axes(args: Args) -> list[str]:
    """A line per preset whose swept axis an override replaces: legitimate (one learning rate on purpose), but
    the sweep is smaller than the preset's and a tuned key has fewer values to choose from, so it is said."""
    given = hydra_args.axes(args.overrides)
    lines = []
    for preset in args.presets:
        cfg = read_experiment(preset)
        params = sweeper_params(cfg)
        hit = [k for k in given if k.lstrip("+") in params]
        if not hit:
            continue
        axes = hydra_args.axes([f"{k}={v}" for k, v in params.items()])
        before = math.prod(len(v) for v in axes.values())
        after = math.prod(len(given[k] if k in hit else v) for k, v in axes.items())
        tuned = [k for k in hit if k in (cfg.get("tune") or [])]
        typed = [o for o in args.overrides if o.split("=", 1)[0].lstrip("+") in hit]
        lines.append(
            f"{' '.join(typed)} {'replaces' if len(typed) == 1 else 'replace'} {preset}'s swept "
            + ", ".join(f"{k}={params[k]}" for k in hit)
            + f": its sweep runs {after} jobs, not {before}"
            + (f", and {' and '.join(tuned)} is tuned over the values given only" if tuned else "")
            + "."
        )
    return lines


def check_out(out: Path) -> None:
    """--out can be made and written into: asked, not assumed from permissions (root may write everywhere, except
    where the file system refuses, e.g. under /proc). A probe file is made and removed; no folder is made."""
    if why := unwritable(out):
        raise CheckError(f"--out {out} cannot be written: {why}. Give a directory you can write to with --out DIR.")
    existing = out.absolute()
    while not existing.exists():
        existing = existing.parent
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
        if existing != out.absolute():
            existing.joinpath(".lnbench-probe").mkdir()
            existing.joinpath(".lnbench-probe").rmdir()
    except OSError as e:
        raise CheckError(
            f"--out {out} cannot be written: {existing} refuses new files ({e.strerror or e}). "
            "Give a directory you can write to with --out DIR."
        ) from None
