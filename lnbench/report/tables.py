"""The report's tables: one row per (panel, line) with its numbers, the provenance that differs between
runs, and the claims' verdicts."""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from lnbench.config.choices import Stage
from lnbench.report import claims_text
from lnbench.report.analysis import Group, Layout, best_val, default_target, reach, run_problem, sort_key
from lnbench.report.render import Table
from lnbench.runs import Run


def build_table(groups: list[Group], lay: Layout, metric: str, targets: dict[str, float]) -> Table:
    """One row per (panel, line), seeds aggregated. The primary metric's target, unless given, is set per
    panel (batch 4 and batch 128 reach different values in the same number of steps). Panels of different
    datasets may rank by different metrics (error, mse, bpc): the columns then say `val metric`."""
    common = metric if len({g.metric for g in groups}) <= 1 else None
    named = (lambda text: f"{text} {common}") if common else (lambda text: text)
    others = [m for m in targets if m != common]  # --target of a metric besides the primary one
    columns = [*lay.panels, *([lay.line] if lay.line else ["run"]), "runs", "status"]
    columns += [f"tuned {', '.join(k.rsplit('.', 1)[-1] for k in lay.tuned)} (val)"] if lay.tuned else []
    columns += [] if common else ["val metric"]
    columns += [named("final val"), named("best val"), named("test")]
    for m in [common, *others]:
        target = f"{m} target" if m else "target"
        columns += [target, f"steps to {target}", f"seconds to {target}"]
    lengths = sorted({int(n) for g in groups for r in g.runs for n in r.summary.get("test_at_len", {})})
    columns += [f"{named('test')} @ len {n}" for n in lengths]
    columns.append("ms/step")
    panel_targets = {
        g.panel: default_target([r for h in groups if h.panel == g.panel for r in h.runs], g.metric) for g in groups
    }
    rows = [
        _row(
            g,
            lay,
            [(g.metric, targets.get(g.metric, panel_targets[g.panel])), *((o, targets[o]) for o in others)],
            lengths,
            common,
        )
        for g in groups
    ]
    return Table(columns, rows)


def _row(
    g: Group, lay: Layout, targets: list[tuple[str, float | None]], lengths: list[int], common: str | None
) -> list[str]:
    runs, m = g.runs, g.metric
    row = ["—" if v is None else str(v) for v in g.panel] + [
        str(g.line) + (" ★" if g.best else ""),
        _runs_text(runs, lay),
        status_text(runs),
    ]
    row += [g.selection.text()] if g.selection else []
    row += [] if common else [m]
    row += [fmt_agg([r.final_val(m) for r in runs]), fmt_agg([best_val(r, m) for r in runs])]
    row.append(fmt_agg([(r.summary.get("test") or {}).get(m) for r in runs]))
    for tm, t in targets:
        hits = [reach(r, tm, t) if t is not None else None for r in runs]
        row += [
            fmt_agg([t]),
            fmt_agg([h[0] if h else None for h in hits], digits=5),
            fmt_agg([h[1] if h else None for h in hits], digits=3),
        ]
    row += [fmt_agg([r.summary.get("test_at_len", {}).get(str(n), {}).get(m) for r in runs]) for n in lengths]
    row.append(fmt_agg([_ms(r) for r in runs], digits=3))
    return row


def _runs_text(runs: list[Run], lay: Layout) -> str:
    if len(runs) == 1 or not lay.seeds:
        return str(len(runs))
    parts = []
    for role, rs in (
        ("chose", [r for r in runs if r.stage != Stage.judge]),
        ("judged", [r for r in runs if r.stage == Stage.judge]),
    ):
        seeds = sorted({r.value(lay.seeds[0]) for r in rs}, key=sort_key)
        parts += [f"{role}: {lay.seeds[0]} {','.join(map(str, seeds))}"] if seeds else []
    return f"{len(runs)} ({'; '.join(parts) if len(parts) > 1 else parts[0].split(': ', 1)[1]})"


def _ms(run: Run) -> float | None:
    t = run.summary.get("time_per_step")
    return t * 1000 if isinstance(t, (int, float)) and run.summary.get("steps") else None


def fmt_agg(values: list[float | None], digits: int = 4, scale: float = 1.0) -> str:
    """One value as is; several (seeds) as mean ± standard deviation; runs without a value are counted."""
    have = [v * scale for v in values if v is not None]
    if not have:
        return "—"
    text = f"{statistics.fmean(have):.{digits}g}"
    if min(have) != max(have):
        text += f" ± {statistics.stdev(have):.2g}"
    if len(have) < len(values):
        text += f" [{len(have)}/{len(values)}]"
    return text


def status_text(runs: list[Run], width: int = 90) -> str:
    counts = Counter(r.status for r in runs)
    text = ", ".join(s if n == 1 and len(runs) == 1 else f"{s} ×{n}" for s, n in counts.items())
    problem = next((r for r in runs if r.status not in ("completed", "running")), None)
    if problem is not None:
        why = run_problem(problem)
        if why:
            text += ": " + (why if len(why) <= width else why[: width - 1] + "…")
    return text


def claims_table(verdicts: list[dict[str, Any]]) -> Table:
    """Each claim's row, its HTML row coloured by its (adjusted) verdict."""
    return Table(
        claims_text.COLUMNS, claims_text.table_rows(verdicts), [d["verdict"] for d in verdicts], claims_text.NOWRAP
    )


# ---- provenance -------------------------------------------------------------------------------
@dataclass
class Provenance:
    shared: dict[str, Any]  # what every run that recorded provenance has in common
    differs: Table | None  # one row per combination of the keys that differ, naming its runs
    missing: list[str]  # runs whose summary.json holds none
    running: list[str] = field(default_factory=list)  # runs still running: their summary.json comes at their end


def provenance_of(runs: list[Run]) -> Provenance:
    have = [r for r in runs if isinstance(r.summary.get("provenance"), dict)]
    keys = list(dict.fromkeys(k for r in have for k in r.summary["provenance"]))
    values = {k: [_prov_text(k, r.summary["provenance"].get(k)) for r in have] for k in keys}
    shared = {k: v[0] for k, v in values.items() if len(set(v)) == 1}
    differ = [k for k in keys if k not in shared]
    table = None
    if differ:
        combos: dict[tuple, list[str]] = {}
        for i, r in enumerate(have):
            combos.setdefault(tuple(values[k][i] for k in differ), []).append(r.name)
        table = Table(["runs", *differ], [[names_text(names), *combo] for combo, names in combos.items()])
    lacking = [r for r in runs if r not in have]
    return Provenance(
        shared,
        table,
        [r.name for r in lacking if r.status != "running"],
        [r.name for r in lacking if r.status == "running"],
    )


def _prov_text(key: str, value: Any) -> str:
    if value is None:
        return "—"
    if key == "git_dirty":
        return "dirty" if value else "clean"
    if key == "git_commit":
        return str(value)[:10]
    return str(value)


def names_text(names: list[str], shown: int = 4) -> str:
    return ", ".join(names[:shown]) + (f", … ({len(names)} runs)" if len(names) > shown else "")
