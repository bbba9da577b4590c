"""Whether a check may go on in its --out, and under which design: a sweep judged under one design is never
continued under another, since choosing the looks after seeing the data would void the error rates they keep
(lnbench/claims/plan.py). So a rerun goes on under the design its judging.json declares, whatever its own
--judging-seeds, --max-seeds or --widen say (a line says so for each it does not apply); a new design takes a
new --out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lnbench.check.args import Args, CheckError, check_out, sweep_dir
from lnbench.claims.judge import DESIGN_FILE, DesignDamaged, read_design_record


def check_design(args: Args) -> None:
    """--out must be writable, and each preset's judging.json there, where it has one, the record lnbench check
    wrote (a damaged one is refused: its looks are unknown)."""
    check_out(args.out)
    for preset in args.presets:
        declared(sweep_dir(args, preset) / DESIGN_FILE)


def declared(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    try:
        return read_design_record(path, "Restore it, or give another --out")
    except DesignDamaged as e:
        raise CheckError(str(e)) from None


def kept_design(args: Args) -> list[str]:
    """A line per option of this invocation that a preset's declared design overrides: looks by hand over a plan
    per claim or other looks (--judging-seeds, --max-seeds), --max-seeds under a plan, --widen."""
    out = []
    for preset in args.presets:
        path = sweep_dir(args, preset) / DESIGN_FILE
        raw = declared(path)
        if raw is None:
            continue
        looks, options = raw.get("looks"), raw.get("options") or {}
        planned = bool(raw.get("planned", "claims" in raw))
        given: dict[str, Any] = {"--widen": args.widen}
        if planned:
            if not args.planned:
                given["--judging-seeds"] = args.judging
            given["--max-seeds"] = args.max_seeds
        elif args.looks != looks:
            given["--judging-seeds"] = args.judging if args.judging is not None else "(none: a plan per claim)"
            given["--max-seeds"] = args.max_seeds
        for flag, value in given.items():
            key = flag.lstrip("-").replace("-", "_")
            if value is None or key in options and options[key] == value:
                continue
            if flag == "--widen":
                under = f"--widen {options[key]}" if key in options else "a --widen not recorded"
            elif flag == "--max-seeds" and planned and key in options:
                under = f"a plan per claim, --max-seeds {options[key] or '(the default)'}"
            else:
                under = "a plan per claim" if planned else f"looks of {looks} judging seeds"
            out.append(
                f"{flag} {value} is not applied to {preset}: its judging was declared under {under} ({path}), "
                f"which decides its verdicts (choosing another after seeing results would void their error rates); "
                f"give another --out to check it anew."
            )
    return out
