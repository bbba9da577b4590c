"""Whether a check may go on in its --out: a sweep judged under one design is never continued under another, since
choosing the looks after seeing the data would void the error rates they keep (lnbench/claims/plan.py)."""

from __future__ import annotations

import json

from lnbench.check.args import Args, CheckError, check_out, sweep_dir
from lnbench.claims.judge import DESIGN_FILE, DesignDamaged, read_design_record


def check_design(args: Args) -> None:
    """A sweep judged under one design is never continued under another: choosing the looks after seeing the data
    would void the error rates they keep (lnbench/claims/plan.py). A plan per claim, once in judging.json, is kept
    by every rerun (whatever --budget says now); looks given by hand must be given again. And --out must be
    writable."""
    check_out(args.out)
    for preset in args.presets:
        path = sweep_dir(args, preset) / DESIGN_FILE
        if not path.exists():
            continue
        try:
            raw = read_design_record(path, "Restore it, or give another --out")
        except DesignDamaged as e:
            raise CheckError(str(e)) from None
        had, planned = raw.get("looks"), bool(raw.get("planned", "claims" in raw))
        where = f"{sweep_dir(args, preset)} was judged"
        if planned and not args.planned:
            raise CheckError(
                f"{where} under a plan per claim ({path}); --judging-seeds {args.judging} asks for "
                f"{args.looks or 'no judging seeds'}. Changing the design after seeing results would void its error "
                "rates: give no --judging-seeds (a rerun keeps the plan), or another --out."
            )
        if not planned and had != args.looks:
            again = f"--judging-seeds {had[0]} --max-seeds {had[-1]}" if isinstance(had, list) and had else ""
            raise CheckError(
                f"{where} in looks of {had} judging seeds ({path}); "
                + (
                    f"--judging-seeds {args.judging} asks for {args.looks or 'none'}"
                    if args.judging is not None
                    else "a plan per claim (the default) would judge it in others"
                )
                + ". Changing the looks after seeing results would void their error rates: "
                + (f"continue it with {again}, or give another --out." if again else "give another --out.")
            )


def kept_design(args: Args) -> list[str]:
    """A line per option a rerun gives that its preset's declared design overrides: --widen, and --max-seeds under a
    plan per claim (looks by hand that differ are refused above). The rerun goes on under the declared design, as
    a rerun of the same command would: a changed option applies to a new --out."""
    out = []
    for preset in args.presets:
        path = sweep_dir(args, preset) / DESIGN_FILE
        try:
            raw = json.loads(path.read_text()) if path.is_file() else None
        except (OSError, ValueError):
            raw = None  # check_design refused it
        if not isinstance(raw, dict):
            continue
        options = raw.get("options") if isinstance(raw.get("options"), dict) else {}
        given = {"--widen": args.widen} | ({"--max-seeds": args.max_seeds} if args.planned else {})
        for flag, value in given.items():
            key = flag.lstrip("-").replace("-", "_")
            if value is None or options.get(key, value) == value and key in options:
                continue
            under = f"under {flag} {options[key]}" if key in options else f"before its {flag} was recorded"
            out.append(
                f"{flag} {value} is not applied to {preset}: its judging was declared {under} ({path}), which "
                f"decides its verdicts; give another --out to check it anew with {flag} {value}."
            )
    return out
