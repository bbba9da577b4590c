"""Whether a check may go on in its --out: a sweep judged under one design is never continued under another, since
choosing the looks after seeing the data would void the error rates they keep (lnbench/claims/plan.py)."""

from __future__ import annotations

import json

from lnbench.check.args import Args, CheckError, check_out, sweep_dir
from lnbench.claims.judge import DESIGN_FILE


def check_design(args: Args) -> None:
    """A sweep judged under one design is never continued under another: choosing the looks after seeing the data
    would void the error rates they keep (lnbench/claims/plan.py). A plan per claim, once in judging.json, is kept
    by every rerun (--budget never changes it; a --max-seeds other than its cap is refused); looks given by hand
    must be given again. And --out must be
    writable."""
    check_out(args.out)
    for preset in args.presets:
        path = sweep_dir(args, preset) / DESIGN_FILE
        if not path.is_file():
            continue
        try:
            raw = json.loads(path.read_text())
            had, planned = raw.get("looks"), bool(raw.get("planned", "claims" in raw))
        except (OSError, ValueError, AttributeError):
            raise CheckError(
                f"{path} is not the design lnbench check wrote (a JSON object with `looks`): the looks this sweep "
                "was judged in are unknown. Restore it, or give another --out."
            ) from None
        where = f"{sweep_dir(args, preset)} was judged"
        cap = raw.get("cap")
        if planned and args.planned and args.max_seeds is not None and cap is not None and args.max_seeds != cap:
            raise CheckError(
                f"{where} under a plan capped at {cap} judging seeds ({path}); --max-seeds {args.max_seeds} asks "
                f"for another. Changing the plan after seeing results would void its error rates: give no "
                f"--max-seeds (a rerun keeps the plan), or another --out."
            )
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
