"""The page `lnbench check` writes, check.md and check.html: every claim's verdict, adjusted over its declared
family (lnbench/claims/family.py, the same adjustment as each preset's report, so the same runs read alike on
both), beside the unadjusted one, with the interval that decided at its level, the margin, the lines' means
and the trivial predictor's value, its seeds (tuning + judging), the hyperparameters each line was judged at,
and a link to its curves. Rendered by lnbench.report.render, like each preset's report."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from lnbench.atomic import write_files
from lnbench.claims import family as familylib
from lnbench.claims import verdicts as verdictlib
from lnbench.claims.decision import ClaimVerdict
from lnbench.config.choices import Stage
from lnbench.report import claims_text, render
from lnbench.report.render import Heading, Items, Link, Page, Table

COLUMNS = [
    "claim",
    "preset",
    "estimand",
    "verdict (adjusted)",
    "unadjusted",
    claims_text.EFFECT,
    "min_effect",
    claims_text.PAIRS,
    claims_text.MEAN_COLUMN,
    "means (units of the measure)",
    "seeds: tuning + judging",
    "chosen on validation (grid)",
    "curves",
]


def adjusted(outcomes: list, method: str) -> list[dict[str, Any]]:
    """Every claim of the page, adjusted over its declared family (claims of the family not on the page count
    as not run; a claim the presets do not declare in its family is adjusted apart), as its preset's report does."""
    pairs = [(o, ClaimVerdict.from_dict(d)) for o in outcomes for d in o.verdicts]
    familylib.adjust([v for _, v in pairs], method)
    return [{**v.as_dict(), "preset": o.preset, "report": o.directory} for o, v in pairs]


def table(outcomes: list, family: list[dict[str, Any]], base) -> Table:
    """A row per claim (a preset without verdicts: one row saying why), each linking to its preset's report."""
    rows, tones = [], []
    for o in outcomes:
        link = Link("report", os.path.relpath(o.directory / "report" / "report.html", base))
        if not o.verdicts:
            rows.append(
                ["—", o.preset, "—", "no verdict: " + (o.note or "no claims"), *["—"] * (len(COLUMNS) - 5), link]
            )
            tones.append("")
        for d in (d for d in family if d["preset"] == o.preset):
            rows.append(
                [
                    f"{d['id']}: {d['text']}",
                    o.preset,
                    claims_text.estimand_text(d),
                    claims_text.verdict_cell(d),
                    d["raw_verdict"],
                    claims_text.effect_text(d),
                    claims_text.margin_text(d),
                    claims_text.pairs_text(d),
                    claims_text.mean_text(d),
                    claims_text.lines_text(d),
                    claims_text.seeds_text(d),
                    claims_text.chosen_text(d),
                    link,
                ]
            )
            tones.append(d["verdict"])
    return Table(COLUMNS, rows, tones, claims_text.NOWRAP)


def header(outcomes: list, family: list[dict[str, Any]], args, seconds: float, extra: list[str]) -> list[str]:
    estimands = {e: sum(d.get("estimand", "median") == e for d in family) for e in ("median", "mean")}

    def count(key: str) -> str:
        order = (verdictlib.HELD, verdictlib.CONTRADICTED, verdictlib.EQUIVALENT, verdictlib.INCONCLUSIVE)
        return ", ".join(f"{v} {n}" for v in order if (n := sum(d[key] == v for d in family))) or "none"

    adjust = familylib.NAMES[args.adjust]
    lines = [
        f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}; scale={args.scale:g}; "
        f"overrides: {' '.join(args.overrides) or 'none'}",
        f"verdicts (adjusted: {adjust}) of the {len(family)} claims of this page: {count('verdict')}; "
        f"unadjusted: {count('raw_verdict')}; estimands: " + ", ".join(f"{n} {e}" for e, n in estimands.items() if n),
        f"time of this invocation: {seconds / 60:.1f} min on {os.cpu_count()} cores "
        "(jobs completed earlier were skipped); "
        "1-minute load average at the start and end of each preset: "
        + ", ".join(f"{o.preset} {o.seconds / 60:.1f} min, load {o.load[0]:.1f}→{o.load[1]:.1f}" for o in outcomes),
        *extra,
        "design: each line's hyperparameters chosen per panel on the final validation metric of the tuning seeds; "
        "a winner at the grid's edge widened past it (×3 or ÷3), and a line still at its edge makes its claims "
        "inconclusive (grid edge); judging seeds (1000, 1001, ...) at the chosen values, each look spending its "
        "declared share of alpha; more seeds only for claims still inconclusive after the adjustment; "
        + design_text(outcomes, args),
        "runs: " + ", ".join(f"{o.preset} " + "+".join(f"{o.added.get(s, 0)} {s}" for s in Stage) for o in outcomes),
        "statistics: " + familylib.describe_method(args.adjust) + "; effect > 0 supports the claim",
        "each preset's own report adjusts over the same declared families, so it reads the same verdicts"
        + ("" if args.adjust in ("bonferroni", "none") else " or stricter ones (claims not run count as p = 1)"),
    ]
    return lines + [f"{o.preset}: {o.note}" for o in outcomes if o.note]


def design_text(outcomes: list, args) -> str:
    """The design each preset was judged under, as its judging.json declares it (a rerun's options do not change
    it: lnbench.check.design.kept_design); presets of one design said once."""
    by_text: dict[str, list[str]] = {}
    for o in outcomes:
        by_text.setdefault(preset_design(o.design, args), []).append(o.preset)
    if len(by_text) == 1:
        return next(iter(by_text))
    return "; ".join(f"{', '.join(presets)}: {text}" for text, presets in by_text.items())


def preset_design(design: dict[str, Any], args) -> str:
    """'widened up to 3 value(s); judging seeds planned per claim ... (judging.json)' for one preset's design."""
    if not design:  # no judging seeds: --judging-seeds 0, or none declared yet
        return f"widened up to {args.widen} value(s); no judging seeds (judged on the tuning seeds)"
    widen = (design.get("options") or {}).get("widen")
    widened = f"widened up to {widen} value(s)" if widen is not None else "widened (how far was not recorded)"
    if design.get("planned", "claims" in design):  # a record from before `planned`: a plan per claim has claims
        cap = f", at most {design['cap']} each" if design.get("cap") else ""
        seeds = f"judging seeds planned per claim for its test's power at its family's level{cap}"
    else:
        seeds = f"judging seeds in looks of {', '.join(map(str, design.get('looks') or []))} for every claim"
    return f"{widened}; {seeds} (judging.json)"


def write_page(outcomes: list, args, seconds: float, extra: list[str] | None = None) -> str:
    """check.md, check.html and claims.json (the family, adjusted) in args.out, written together; returns the
    Markdown."""
    family = adjusted(outcomes, args.adjust)
    page = Page(
        "lnbench check",
        [
            Heading("lnbench check", 1),
            Items(header(outcomes, family, args, seconds, extra or [])),
            table(outcomes, family, args.out),
        ],
    )
    md = render.markdown(page)
    args.out.mkdir(parents=True, exist_ok=True)
    write_files(
        args.out,
        {
            "check.md": md.encode(),
            "check.html": render.html_page(page).encode(),
            "claims.json": (json.dumps(family, indent=2, default=str) + "\n").encode(),
        },
    )
    return md
