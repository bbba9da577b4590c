"""The page `lnbench check` writes, check.md and check.html: every claim's verdict, adjusted over all the
claims of the page, beside the unadjusted one, with its effect and interval, its seeds (tuning + judging),
the hyperparameters each line was judged at (and whether its grid was widened), and a link to its curves."""
from __future__ import annotations

import html
import json
import os
import time
from typing import Any

from lnbench import judge
from lnbench import verdicts as verdictlib
from lnbench.atomic import write_bytes

COLUMNS = ["claim", "preset", "verdict (adjusted)", "unadjusted", "effect [95% t CI]; d; bootstrap", "P(better<than)", "seeds: tuning + judging",
           "chosen on validation (grid)", "curves"]


def page_rows(outcomes: list, family: list[dict[str, Any]], base) -> list[list[str]]:
    rows = []
    by_preset = {}
    for d in family:
        by_preset.setdefault(d["preset"], []).append(d)
    for o in outcomes:
        link = os.path.relpath(o.directory / "report" / "report.html", base)
        if not o.verdicts:
            rows.append(["—", o.preset, "no verdict: " + (o.note or "no claims"), "—", "—", "—", "—", "—", link])
        for d in by_preset.get(o.preset, []):
            rows.append([f"{d['id']}: {d['text']}", o.preset, judge.verdict_text(d), d["raw_verdict"], judge.effect_text(d),
                         "—" if d.get("p_improve") is None else f"{d['p_improve']:.2f}", judge.seeds_text(d), judge.chosen_text(d), link])
    return rows


def header(outcomes: list, family: list[dict[str, Any]], args, seconds: float, extra: list[str]) -> list[str]:
    def count(key: str) -> str:
        order = (verdictlib.HELD, verdictlib.CONTRADICTED, verdictlib.EQUIVALENT, verdictlib.INCONCLUSIVE)
        return ", ".join(f"{v} {n}" for v in order if (n := sum(d[key] == v for d in family))) or "none"

    adjust = {"holm": "Holm-adjusted", "bh": "Benjamini-Hochberg-adjusted", "none": "unadjusted"}[args.adjust]
    looks = ", ".join(map(str, args.looks)) if args.looks else "none (judged on the tuning seeds)"
    lines = [
        f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}; scale={args.scale:g}; overrides: {' '.join(args.overrides) or 'none'}",
        f"verdicts ({adjust} over the {len(family)} claims of this page): {count('verdict')}; unadjusted: {count('raw_verdict')}",
        f"time of this invocation: {seconds / 60:.1f} min on {os.cpu_count()} cores (jobs completed earlier were skipped); "
        "1-minute load average at the start and end of each preset: "
        + ", ".join(f"{o.preset} {o.seconds / 60:.1f} min, load {o.load[0]:.1f}→{o.load[1]:.1f}" for o in outcomes),
        *extra,
        f"design: each line's hyperparameters chosen per panel on the final validation metric of the tuning seeds; a winner "
        f"at the grid's edge widened up to {args.widen} value(s) past it (×3 or ÷3); judging seeds (1000, 1001, ...) at the "
        f"chosen values, in looks of {looks} seeds, each look spending alpha in proportion to the seeds it adds; "
        "more seeds only for claims still inconclusive after the adjustment",
        "runs: " + ", ".join(f"{o.preset} " + "+".join(f"{o.added.get(s, 0)} {s}" for s in ("tune", "widen", "judge")) for o in outcomes),
        "statistics: " + verdictlib.describe_method(args.adjust) + "; effect > 0 supports the claim",
        "each preset's own report adjusts over its own claims only, so its verdicts can be less strict than this page's",
    ]
    lines += [f"{o.preset}: {o.note}" for o in outcomes if o.note]
    return lines


def _cells(values: list[str]) -> str:
    return "| " + " | ".join(v.replace("|", "\\|").replace("\n", " ") for v in values) + " |"


def render_markdown(rows: list[list[str]], head: list[str]) -> str:
    body = [_cells(r[:-1] + [f"[report]({r[-1]})"]) for r in rows]
    return "\n".join(["# lnbench check", "", *[f"- {line}" for line in head], "", _cells(COLUMNS), _cells(["---"] * len(COLUMNS)), *body, ""])


def render_html(rows: list[list[str]], head: list[str]) -> str:
    from lnbench.report import STYLE

    colors = {"held": "#d9f2d9", "contradicted": "#f7d4d4", "equivalent": "#dde6f7"}
    th = "".join(f"<th>{html.escape(c)}</th>" for c in COLUMNS)
    body = []
    for r in rows:
        bg = colors.get(r[2].split(" ", 1)[0], "#fff")
        tds = "".join(f"<td>{html.escape(v)}</td>" for v in r[:-1])
        body.append(f"<tr style='background:{bg}'>{tds}<td><a href='{html.escape(r[-1])}'>report</a></td></tr>")
    items = "".join(f"<li>{html.escape(line)}</li>" for line in head)
    return (f"<!doctype html><meta charset='utf-8'><title>lnbench check</title><style>{STYLE}</style>"
            f"<h1>lnbench check</h1><ul>{items}</ul><table><thead><tr>{th}</tr></thead><tbody>{''.join(body)}</tbody></table>")


def write_page(outcomes: list, args, seconds: float, extra: list[str] | None = None) -> str:
    from lnbench.check import adjusted

    args.out.mkdir(parents=True, exist_ok=True)
    family = adjusted(outcomes, args.adjust)
    rows, head = page_rows(outcomes, family, args.out), header(outcomes, family, args, seconds, extra or [])
    md = render_markdown(rows, head)
    write_bytes(args.out / "check.md", md.encode())
    write_bytes(args.out / "check.html", render_html(rows, head).encode())
    write_bytes(args.out / "claims.json", (json.dumps(family, indent=2, default=str) + "\n").encode())
    return md
