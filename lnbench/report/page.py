"""What the report says, as a page of blocks (lnbench.report.render), and the files it writes:
report.md, report.html, claims.json and the figures."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from lnbench.atomic import write_files
from lnbench.report import claims_text
from lnbench.report.analysis import not_axis, run_problem
from lnbench.report.make import Report
from lnbench.report.render import Block, Heading, Image, Items, Page, html_page, markdown, terminal
from lnbench.report.tables import claims_table, names_text
from lnbench.runs import unreadable_text

PROVENANCE_TITLE = "Provenance that differs between runs"


def report_page(rep: Report) -> Page:
    blocks: list[Block] = [Heading(f"lnbench report: {title(rep)}", 1)]
    if rep.verdicts or rep.claim_errors:
        blocks += [Heading("Claims"), Items(claims_lines(rep))]
        blocks += [claims_table(rep.verdicts), Heading("Runs")] if rep.verdicts else []
    blocks += [Items(header_lines(rep)), rep.table]
    if rep.provenance and rep.provenance.differs:
        blocks += [Heading(PROVENANCE_TITLE), rep.provenance.differs]
    for head, items in sections(rep):
        blocks += [Heading(head), Items(items)]
    blocks += [Image(name, png) for name, png in rep.images.items()]
    return Page("lnbench report", blocks)


def render_markdown(rep: Report) -> str:
    return markdown(report_page(rep))


def render_html(rep: Report) -> str:
    return html_page(report_page(rep))


def summary(rep: Report) -> str:
    """What `lnbench report` prints: the claims, the table and the lists of runs that need a look."""
    blocks: list[Block] = [claims_table(rep.verdicts)] if rep.verdicts else []
    blocks += [Items([f"claim error: {e}" for e in rep.claim_errors])] if rep.claim_errors else []
    blocks.append(rep.table)
    for head, items in sections(rep):
        blocks += [Heading(head), Items(items)]
    return terminal(blocks)


def write_report(rep: Report, out: Path) -> list[Path]:
    """Every file rendered first, then all written together (lnbench.atomic.write_files): a report is never
    half old, half new."""
    page = report_page(rep)
    files = {
        **rep.images,
        "report.md": markdown(page).encode(),
        "report.html": html_page(page).encode(),
        "claims.json": (json.dumps(rep.verdicts, indent=2) + "\n").encode(),
    }
    out.mkdir(parents=True, exist_ok=True)
    write_files(out, files)
    return [out / name for name in files]


def title(rep: Report) -> str:
    return " vs ".join(map(str, rep.roots or [rep.root]))


# ---- the lines of the page ------------------------------------------------------------------------
def claims_lines(rep: Report) -> list[str]:
    lines = [f"claim error: {e}" for e in rep.claim_errors]
    if rep.verdicts:
        lines += claims_text.lines(rep.verdicts, rep.adjust) + [
            "details (every panel, look and p-value) in claims.json; claims.png draws each claim's numbers"
        ]
    return lines


def header_lines(rep: Report) -> list[str]:
    lay = rep.lay
    counts = Counter(r.status for r in rep.runs)
    lines = [f"{len(rep.runs)} run(s): " + ", ".join(f"{n} {s}" for s, n in counts.items())]
    lines += [f"progress of {p}" for p in rep.progress]
    lines += provenance_lines(rep)
    axes = [k for k in [*lay.panels, lay.line, *lay.seeds] if k]
    lines.append("swept: " + (", ".join(f"`{k}`" for k in axes) or "nothing (a single configuration)"))
    lines.append(
        f"panels: {', '.join(lay.panels) or '—'}; lines: {lay.line or '—'}; "
        f"averaged over: {', '.join(lay.seeds) or '—'}"
    )
    if lay.fixed:
        lines.append("fixed: " + ", ".join(f"`{k}={v}`" for k, v in lay.fixed.items()))
    if lay.tuned:
        lines.append(tuned_line(rep))
    lines.append(
        "★: the best line of its panel by mean final validation "
        + rep.metric
        + "; cells: mean ± standard deviation over seeds"
    )
    lines.append(rep.target_note)
    lines.append(
        "seconds are wall-clock time of each job, evaluations included: compare them only between jobs that "
        "ran under the same conditions (launcher, machine load)"
    )
    return lines


def tuned_line(rep: Report) -> str:
    edges = [f"{g.line} ({rep.lay.title(g.panel)})" for g in rep.groups if g.selection and g.selection.edge]
    return (
        f"tuned on validation (final val {rep.metric} of the tuning runs, mean over seeds; test and judging runs never "
        "read; a value with a run that did not complete never wins over one whose runs all did): "
        + ", ".join(f"`{k}`" for k in rep.lay.tuned)
        + "; the table, curves and claims use each line's winner"
        + (
            f"; **winner at the edge of the grid** for {', '.join(edges)}: widen the grid (`lnbench check` does)"
            if edges
            else ""
        )
    )


def provenance_lines(rep: Report) -> list[str]:
    prov = rep.provenance
    if prov is None:
        return []
    still = (
        (
            f"not recorded yet by the {len(prov.running)} run(s) still running (each records it when it ends): "
            + names_text([f"`{n}`" for n in prov.running], 6)
        )
        if prov.running
        else ""
    )
    if not prov.shared and not prov.differs:
        return [
            f"provenance: {still}"
            if still and not prov.missing
            else "provenance: not recorded by these runs (made before lnbench recorded it in summary.json)"
        ]
    label = "provenance of every run" if not prov.missing else "provenance shared by the runs that recorded it"
    lines = [f"{label}: " + ", ".join(f"{k}={v}" for k, v in prov.shared.items())]
    if prov.differs:
        lines.append(
            "provenance that differs between runs: " + ", ".join(prov.differs.columns[1:]) + " (see the table below)"
        )
    if prov.missing:
        lines.append(
            "no provenance recorded (made before lnbench recorded it): "
            + names_text([f"`{n}`" for n in prov.missing], 6)
        )
    if still:
        lines.append(f"provenance {still}")
    return lines


def sections(rep: Report) -> list[tuple[str, list[str]]]:
    """The lists of runs that need a look, each under its heading; only those with something in them."""
    return [
        (head, items)
        for head, items in (
            ("Running", running(rep)),
            ("Failures", problems(rep)),
            ("Not trained (no metrics: refused or stopped before the first log)", untrained(rep)),
            ("Torn metrics", torn_runs(rep)),
            ("Judging runs not used", stale_runs(rep)),
        )
        if items
    ]


def running(rep: Report) -> list[str]:
    return [
        f"`{r.name}`: at step {max((int(x['step']) for x in r.records), default=0)}"
        + (f" of {r.value('steps')}" if isinstance(r.value("steps"), int) else "")
        for r in rep.runs
        if r.status == "running"
    ]


def problems(rep: Report) -> list[str]:
    return [
        f"`{r.name}`: **{r.status}**: {run_problem(r) or 'no error recorded'}"
        for r in rep.runs
        if r not in rep.aside and r.status not in ("completed", "running")
    ]


def untrained(rep: Report) -> list[str]:
    """The runs set aside (see analysis.arrange), with what they were asked to do and why they stopped."""
    return [
        f"`{r.name}` ({' '.join(f'{k}={v}' for k, v in r.overrides.items() if not not_axis(k)) or 'defaults'}): "
        f"**{r.status}**" + (f": {why}" if (why := run_problem(r)) else "")
        for r in rep.aside
        if r.status != "running"
    ]


def torn_runs(rep: Report) -> list[str]:
    return [f"`{r.name}`: {unreadable_text(r.unreadable)}" for r in rep.runs if r.unreadable and r.status != "running"]


def stale_runs(rep: Report) -> list[str]:
    return [
        f"`{r.name}`: judging seed at {', '.join(f'{k}={r.value(k)}' for k in rep.lay.tuned)}, "
        "but the tuning now chooses "
        f"{g.selection.text()}"
        for g in rep.groups
        for r in g.stale
    ]
