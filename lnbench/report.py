"""`lnbench report DIR`: a run or a whole sweep directory -> convergence plots (PNG) and a Markdown/HTML table.

Everything comes from the files each job leaves (`metrics.jsonl`, `summary.json`, `.hydra/*.yaml`), so a
report needs no network and no W&B account, and works on a sweep that is still running or was killed.

A sweep's axes are the keys whose value differs between its jobs (from each job's overrides, falling back
to its composed config). They take three roles: `seed` is averaged over (mean line, min-max band), one
axis gives the lines of every panel (the model, else the normalizer, else the last axis), and each value
of the remaining axes (batch size, seq_len, ...) gets its own panel. A tuned axis (`tune:` in the preset or
`--tune KEY`) is no panel: each line of each panel keeps its best value on validation (lnbench.tuning).

The claims the runs' configs declare are judged on the selected runs (lnbench.claims) and written to
report/claims.json and the top of report.md/report.html.
"""
from __future__ import annotations

import argparse
import base64
import difflib
import html
import io
import json
import math
import statistics
import sys
import textwrap
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from lnbench import claims as claimlib
from lnbench import judge
from lnbench.atomic import write_bytes
from lnbench.errors import UserError
from lnbench.runs import (ENDED, INTERPOLATION, OUT_DIR, SOURCE_KEY, Run, find_run_dirs, load_run, load_runs, parse_scalar,  # noqa: F401 (the report's API)
                          source_names, sweep_total)
from lnbench.tuning import Selection, select

SEED_KEYS = ("seed",)
# Which swept key draws the lines of a panel, in order of preference; otherwise the last swept key.
LINE_KEYS = ("model", "model.norm.kind", "model.cell")
# Keys that say where or how a run went, not what it computed: never an axis, even when runs differ in them.
NOT_AXES = ("resume", "progress", "checkpoint_every", "log_every", "eval_every", "logger", "dataset.data_dir", "dataset.download", "hydra",
            "stage", "cell")  # stage and cell: how lnbench check added a run (judging seeds, a widened grid)
X_AXES = {"step": "training steps", "epoch": "epochs", "time": "wall-clock seconds"}
# Metrics the paper plots on a log scale: losses span decades while a model learns.
LOG_METRICS = {"loss", "mse", "bpc"}
# Metrics in the units of the dataset's `baseline` (a trivial predictor's loss): bpc is in bits, not nats.
LOSS_METRICS = {"loss", "mse"}
# Panels side by side before the next row starts: a folder of many runs stays readable.
PANELS_PER_ROW = 4
# Characters per line of a legend entry; longer names wrap (the figure is at least one panel wide).
LEGEND_WRAP = 40


# ---- the sweep's axes -------------------------------------------------------------------------
@dataclass
class Layout:
    line: str | None  # the key whose values are the lines of every panel
    panels: list[str]  # keys whose value combinations are the panels
    seeds: list[str]  # keys averaged over
    fixed: dict[str, Any]  # overrides every run shares
    tuned: list[str] = field(default_factory=list)  # keys selected on validation per (panel, line)


def swept_keys(runs: list[Run]) -> list[str]:
    """Override keys (in command-line order) and config groups whose values differ between runs: a sweep's
    axes, or what a folder of single runs varied. Keys that say where or how a run went, not what it
    computed, are none (NOT_AXES); `dir` is one when runs of several directories would otherwise mix."""
    keys = dict.fromkeys(k for run in runs for k in (*run.overrides, *run.choices) if not _not_axis(k))
    axes = [k for k in keys if _varies(runs, k)]
    if _varies(runs, SOURCE_KEY) and _collide(runs, axes):
        axes.insert(0, SOURCE_KEY)
    return axes


def _not_axis(key: str) -> bool:
    return any(key == k or key.startswith(k + ".") for k in NOT_AXES)


def _varies(runs: list[Run], key: str) -> bool:
    return len({_sort_key(r.value(key)) for r in runs}) > 1


def _collide(runs: list[Run], axes: list[str]) -> bool:
    """Whether runs of different directories share every axis value (seed included): then only `dir` tells them apart."""
    where: dict[tuple, str | None] = {}
    for r in runs:
        cell = tuple(_sort_key(r.value(k)) for k in axes)
        if where.setdefault(cell, r.source) != r.source:
            return True
    return False


def layout(runs: list[Run], line: str | None = None, panels: list[str] | None = None, tune: list[str] | None = None) -> Layout:
    axes = swept_keys(runs)
    seeds = [k for k in axes if k in SEED_KEYS]
    tuned = [k for k in (tune if tune is not None else tune_keys(runs)) if k in axes]
    rest = [k for k in axes if k not in seeds and k not in tuned]
    if line is None:
        line = next((k for k in LINE_KEYS if k in rest and k not in (panels or ())), None)
        line = line or next((k for k in reversed(rest) if k not in (panels or ())), None)
    if panels is None:
        panels = [k for k in rest if k != line]
    shared = {k: v for k, v in runs[0].overrides.items() if k not in axes} if runs else {}
    # as typed (progress=false, not False), unless Hydra left an interpolation to resolve
    fixed = {k: runs[0].value(k) if INTERPOLATION in v else v for k, v in shared.items() if all(r.overrides.get(k) == v for r in runs)}
    return Layout(line, panels, seeds, fixed, tuned)


def tune_keys(runs: list[Run]) -> list[str]:
    """The keys the runs' configs declare `tune:` (the preset's), in order."""
    keys: list[str] = []
    for run in runs:
        keys += [str(k) for k in run.config.get("tune") or () if str(k) not in keys]
    return keys


def _sort_key(v: Any, seen: dict | None = None) -> tuple:
    """Numbers by value (batch 4 before 128); names in the order the sweep ran them (`seen`), else by name."""
    if isinstance(v, bool) or v is None:
        return (2, 0, str(v))
    if isinstance(v, (int, float)):
        return (0, v, "")
    return (1, (seen or {}).get(v, 0), str(v))


@dataclass
class Group:
    """The runs of one (panel, line) cell: several when seeds are swept."""

    panel: tuple
    line: Any
    runs: list[Run]  # the selected runs when a key is tuned
    selection: Selection | None = None
    best: bool = False  # the best line of its panel (mean final validation metric)
    metric: str = "loss"  # what its panel ranks by: the primary metric of the panel's runs
    judging: list[Run] = field(default_factory=list)  # stage=judge runs at the chosen value (also in runs)
    stale: list[Run] = field(default_factory=list)  # stage=judge runs at a value the tuning no longer chooses


def group_runs(runs: list[Run], lay: Layout) -> list[Group]:
    cells: dict[tuple, list[Run]] = {}
    for run in runs:
        panel = tuple(run.value(k) for k in lay.panels)
        line = run.value(lay.line) if lay.line else run.choices.get("model", run.name)
        cells.setdefault((panel, line), []).append(run)
    seen = {v: i for i, v in enumerate(dict.fromkeys(v for panel, line in cells for v in (*panel, line)))}
    order = sorted(cells, key=lambda pl: ([_sort_key(v, seen) for v in pl[0]], _sort_key(pl[1], seen)))
    return [Group(panel, line, cells[(panel, line)]) for panel, line in order]


def tune_groups(groups: list[Group], lay: Layout, metric: str | None = None) -> None:
    """Keep each group's runs at its best tuned value (final validation metric of the tuning runs, never test,
    never a judging run), with the judging runs at that value; mark the best line of each panel by the same
    validation number: each group's own metric (see panel_metrics), or `metric` for all of them."""
    for g in groups if metric is not None else ():
        g.metric = metric
    for g in groups:
        tuning = [r for r in g.runs if judge.stage(r) != "judge"]
        judging = [r for r in g.runs if judge.stage(r) == "judge"]
        if lay.tuned and tuning:
            g.selection = select(tuning, lay.tuned, Run.value, lambda r, m=g.metric: scored_val(r, m))
            g.selection.widened = len({tuple(r.value(k) for k in lay.tuned) for r in tuning if judge.stage(r) == "widen"})
            at = [r for r in judging if all(claimlib.same(r.value(k), v) for k, v in zip(lay.tuned, g.selection.chosen))]
            g.judging, g.stale = at, [r for r in judging if r not in at]
            g.runs = g.selection.runs + at
        else:
            g.judging = judging
    for panel in dict.fromkeys(g.panel for g in groups):
        scored = [(m, g) for g in groups if g.panel == panel and (m := mean_of([scored_val(r, g.metric) for r in g.runs])) is not None]
        if len(scored) > 1:
            min(scored, key=lambda mg: mg[0])[1].best = True


def scored_val(run: Run, metric: str) -> float | None:
    """The final validation metric of a run that completed; None otherwise (a run that diverged, failed or was
    killed has a last finite value from before it stopped, which must not make its value or line win)."""
    return final_val(run, metric) if run.status == "completed" else None


def panel_metrics(groups: list[Group]) -> None:
    """Each panel ranks by the primary metric of its runs: a folder of runs on MNIST and on the adding
    problem compares error in one panel and mse in the other."""
    for panel in dict.fromkeys(g.panel for g in groups):
        cell = [g for g in groups if g.panel == panel]
        for g in cell:
            g.metric = primary_metric([r for h in cell for r in h.runs])


def mean_of(values: list[float | None]) -> float | None:
    """The mean when every run has a finite value, else None (a diverged seed disqualifies its line)."""
    if not values or any(v is None or not math.isfinite(v) for v in values):
        return None
    return statistics.fmean(values)


def panel_title(keys: list[str], panel: tuple) -> str:
    # None: a key the panel's runs do not have (no seq_len for MNIST beside the adding problem)
    return ", ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in zip(keys, panel) if v is not None) or "all runs"


# ---- numbers ----------------------------------------------------------------------------------
def seed_band(runs: list[Run], split: str, metric: str, x: str):
    """Mean and min-max over the runs at each logged step; x is the runs' mean at that step."""
    per_run = [r.points(split, metric, x) for r in runs]
    steps = sorted(set().union(*per_run))
    xs, mean, lo, hi = [], [], [], []
    for s in steps:
        pts = [p[s] for p in per_run if s in p]
        ys = [y for _, y in pts]
        xs.append(statistics.fmean(xv for xv, _ in pts))
        mean.append(statistics.fmean(ys))
        lo.append(min(ys))
        hi.append(max(ys))
    return xs, mean, lo, hi


def best_val(run: Run, metric: str) -> float | None:
    values = [y for _, y in run.points("val", metric, "step").values()]
    if values:
        return min(values)
    return (run.summary.get("best_val") or {}).get(metric)


def final_val(run: Run, metric: str) -> float | None:
    pts = run.points("val", metric, "step")
    if pts:
        return pts[max(pts)][1]
    return (run.summary.get("final_val") or {}).get(metric)


def default_target(runs: list[Run], metric: str) -> float | None:
    """The best value the slowest-converging completed run reaches, so every completed run reaches it."""
    bests = [b for r in runs if r.status == "completed" and (b := best_val(r, metric)) is not None]
    return max(bests) if bests else None


def reach(run: Run, metric: str, target: float) -> tuple[int, float] | None:
    """(step, seconds) of the first validation at or below the target; None if never."""
    pts = run.points("val", metric, "time")
    for step in sorted(pts):
        if pts[step][1] <= target:
            return step, pts[step][0]
    return None


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


def run_problem(run: Run) -> str:
    s = run.summary
    if run.status == "diverged":
        return f"loss not finite at step {s.get('diverged_at_step', '?')}"
    if run.status == "running":
        return "still running"
    if run.status in ("incomplete", "not started"):
        return "no summary.json and no live process: the job was killed, or never started"
    return str(s.get("error", ""))


# ---- the table --------------------------------------------------------------------------------
@dataclass
class Table:
    columns: list[str]
    rows: list[list[str]]


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
    panel_targets = {g.panel: default_target([r for h in groups if h.panel == g.panel for r in h.runs], g.metric) for g in groups}
    rows = []
    for g in groups:
        runs, m = g.runs, g.metric
        row = ["—" if v is None else str(v) for v in g.panel] + [str(g.line) + (" ★" if g.best else ""), _runs_text(runs, lay), status_text(runs)]
        row += [g.selection.text()] if g.selection else []
        row += [] if common else [m]
        row += [fmt_agg([final_val(r, m) for r in runs]), fmt_agg([best_val(r, m) for r in runs])]
        row.append(fmt_agg([(r.summary.get("test") or {}).get(m) for r in runs]))
        for tm, t in [(m, targets.get(m, panel_targets[g.panel])), *((o, targets[o]) for o in others)]:
            hits = [reach(r, tm, t) if t is not None else None for r in runs]
            row += [fmt_agg([t]), fmt_agg([h[0] if h else None for h in hits], digits=5), fmt_agg([h[1] if h else None for h in hits], digits=3)]
        row += [fmt_agg([r.summary.get("test_at_len", {}).get(str(n), {}).get(m) for r in runs]) for n in lengths]
        row.append(fmt_agg([_ms(r) for r in runs], digits=3))
        rows.append(row)
    return Table(columns, rows)


def _runs_text(runs: list[Run], lay: Layout) -> str:
    if len(runs) == 1 or not lay.seeds:
        return str(len(runs))
    parts = []
    for role, rs in (("chose", [r for r in runs if judge.stage(r) != "judge"]), ("judged", [r for r in runs if judge.stage(r) == "judge"])):
        seeds = sorted({r.value(lay.seeds[0]) for r in rs}, key=_sort_key)
        parts += [f"{role}: {lay.seeds[0]} {','.join(map(str, seeds))}"] if seeds else []
    return f"{len(runs)} ({'; '.join(parts) if len(parts) > 1 else parts[0].split(': ', 1)[1]})"


def _ms(run: Run) -> float | None:
    t = run.summary.get("time_per_step")
    return t * 1000 if isinstance(t, (int, float)) and run.summary.get("steps") else None


def markdown_table(table: Table) -> str:
    def cells(values: list[str]) -> str:
        return "| " + " | ".join(v.replace("|", "\\|").replace("\n", " ") for v in values) + " |"

    return "\n".join([cells(table.columns), cells(["---"] * len(table.columns)), *map(cells, table.rows)])


def html_table(table: Table) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in table.columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in row) + "</tr>" for row in table.rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


# ---- the plots --------------------------------------------------------------------------------
def plot_curves(groups: list[Group], lay: Layout, x: str) -> bytes | None:
    """The curves as a PNG; None if x never varies."""
    fig = curves_figure(groups, lay, x)
    return None if fig is None else figure_png(fig)


def figure_png(fig) -> bytes:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def curves_figure(groups: list[Group], lay: Layout, x: str):
    """Panels in rows of at most PANELS_PER_ROW; each panel is two plots, the training loss above the
    validation metric; one legend above all. None if x never varies."""
    if not any(len({p[0] for p in r.points("train", "loss", x).values()}) > 1 for g in groups for r in g.runs):
        return None  # e.g. epochs of a synthetic task that draws fresh batches every step
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = list(dict.fromkeys(g.panel for g in groups))
    lines = list(dict.fromkeys(g.line for g in groups if any(r.trained for r in g.runs)))  # a refused line draws nothing
    colors = {line: plt.cm.tab10(i % 10) for i, line in enumerate(lines)}
    ncols = min(len(panels), PANELS_PER_ROW)
    nrows = math.ceil(len(panels) / ncols)
    rows = [("train", "loss"), ("val", None)]  # val: each panel's own metric
    panel_metric = {g.panel: g.metric for g in groups}
    shared = {"train": True, "val": len(set(panel_metric.values())) == 1}
    # constrained layout leaves room for the legend outside the axes, however many rows it takes
    fig, axes = plt.subplots(len(rows) * nrows, ncols, figsize=(4.6 * ncols, 3.4 * len(rows) * nrows), squeeze=False,
                             layout="constrained")
    for i, panel in enumerate(panels):
        col = i % ncols
        for r, (split, m) in enumerate(rows):
            m = m or panel_metric[panel]
            ax = axes[len(rows) * (i // ncols) + r][col]
            if i and shared[split]:  # one metric, one scale: the panels of a metric can be compared at a glance
                ax.sharey(axes[r][0])
            for g in (g for g in groups if g.panel == panel and g.line in colors):
                _draw_band(ax, g, split, m, x, colors[g.line])
            _baseline(ax, groups, m)
            ax.set_xlabel(X_AXES[x])
            if col == 0 or not shared[split]:
                ax.set_ylabel(f"{split} {m}")
            ax.grid(True, which="major", alpha=0.3)
            if r == 0:
                ax.set_title(panel_title(lay.panels, panel))
    for i in range(len(panels), ncols * nrows):  # the unused places of the last row
        for r in range(len(rows)):
            axes[len(rows) * (i // ncols) + r][i % ncols].set_visible(False)
    for i, panel in enumerate(panels):  # once every panel of a shared axis has drawn
        for r, (split, m) in enumerate(rows):
            if (m or panel_metric[panel]) in LOG_METRICS and (i == 0 or not shared[split]):
                _log_y(axes[len(rows) * (i // ncols) + r][i % ncols])
    handles = [plt.Line2D([], [], color=colors[line], lw=2) for line in lines]
    labels = [line_label(groups, line) for line in lines]
    if any(r.summary.get("baseline") is not None for g in groups for r in g.runs):
        handles.append(plt.Line2D([], [], color="grey", ls="--", lw=1))
        labels.append("trivial predictor")
    title = lay.line or "run"
    band = " (line: mean over seeds, band: min–max)" if lay.seeds else ""
    add_legend(fig, handles, [textwrap.fill(t, LEGEND_WRAP) for t in labels], title + band)
    return fig


def add_legend(fig, handles: list, labels: list[str], title: str):
    """A legend above the plots with as many entries per row as fit the figure's width, measured as drawn
    (a guess from the labels' lengths clips with wide characters and long names)."""
    renderer = fig.canvas.get_renderer()
    width = fig.bbox.width
    for ncol in range(min(len(labels), 8), 0, -1):
        legend = fig.legend(handles, labels, title=title, loc="outside upper center", ncol=ncol, frameon=False)
        box = legend.get_window_extent(renderer)
        if box.width <= width or ncol == 1:
            fig.set_figheight(fig.get_figheight() + box.height / fig.dpi)  # the plots keep their height
            return legend
        legend.remove()


def line_label(groups: list[Group], line: Any) -> str:
    """The line's name, with its tuned value when every panel chose the same one."""
    picks = {g.selection.text() for g in groups if g.line == line and g.selection}
    if not picks:
        return str(line)
    return f"{line}, {picks.pop()}" if len(picks) == 1 else f"{line}, tuned per panel"


def _log_y(ax) -> None:
    from matplotlib.ticker import FuncFormatter

    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))  # 0.3, not 3 x 10^-1
    # Label as many minor ticks as fit: all within a decade, 2s and 5s within two, none beyond.
    low, high = ax.get_ylim()
    keep = range(1, 10) if high < 10 * low else (2, 5) if high < 100 * low else ()
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}" if _leading_digit(v) in keep else ""))


def _leading_digit(v: float) -> int:
    return round(v / 10 ** math.floor(math.log10(v))) if v > 0 else 0


def _draw_band(ax, group: Group, split: str, metric: str, x: str, color) -> None:
    xs, mean, lo, hi = seed_band(group.runs, split, metric, x)
    if not xs:
        return
    ax.plot(xs, mean, color=color, lw=1.6, marker="o" if len(xs) == 1 else None)
    if len(group.runs) > 1:
        ax.fill_between(xs, lo, hi, color=color, alpha=0.2, lw=0)


def _baseline(ax, groups: list[Group], metric: str) -> None:
    """The loss of a trivial predictor (the dataset's baseline), on panels that plot a loss."""
    if metric not in LOSS_METRICS:
        return
    values = {r.summary.get("baseline") for g in groups for r in g.runs}
    values.discard(None)
    if len(values) == 1:
        ax.axhline(values.pop(), color="grey", ls="--", lw=1)


# ---- writing ----------------------------------------------------------------------------------
@dataclass
class Report:
    root: Path
    runs: list[Run]
    lay: Layout
    metric: str
    targets: dict[str, float]
    target_note: str
    table: Table
    images: dict[str, bytes]  # file name -> PNG
    verdicts: list[dict[str, Any]] = field(default_factory=list)  # claims.json
    claim_errors: list[str] = field(default_factory=list)
    groups: list[Group] = field(default_factory=list)
    progress: list[str] = field(default_factory=list)  # per directory: jobs done out of the total
    roots: list[Path] = field(default_factory=list)
    provenance: Provenance | None = None
    aside: list[Run] = field(default_factory=list)  # runs with nothing to draw in a panel of their own
    adjust: str = "holm"  # the claims' family adjustment


def make_report(root: Path, runs: list[Run], targets: dict[str, float], line: str | None = None,
                panels: list[str] | None = None, x_axes: Iterable[str] = tuple(X_AXES), tune: list[str] | None = None,
                roots: list[Path] | None = None, adjust: str = "holm") -> Report:
    """roots: the directories compared (their runs carry `source`); by default root alone. adjust: how the
    claims' verdicts are adjusted for their number (holm, bh or none)."""
    roots = roots or [root]
    lay, groups, aside = arrange(runs, line, panels, tune)
    metric = primary_metric(runs)
    panel_metrics(groups)
    tune_groups(groups, lay)
    design = judge.read_design(root) if len(roots) == 1 else None
    verdicts, claim_errors = judge.judge_claims(groups, lay, design, adjust)
    targets = {metric if k == PRIMARY else k: v for k, v in targets.items()}
    images = {}
    for x in x_axes:
        png = plot_curves(groups, lay, x)
        if png is not None:
            images[f"curves_{x}.png"] = png
    if verdicts and tuple(x_axes) and (fig := judge.claims_figure(verdicts)) is not None:
        images["claims.png"] = figure_png(fig)
    by_root = [(r, [run for run in runs if run.source == name]) for r, name in zip(roots, source_names(roots))] if len(roots) > 1 else [(root, runs)]
    progress = [progress_line(str(r), [x for x in rs if judge.stage(x) == "tune"], sweep_total(r)) for r, rs in by_root]
    for role in ("widen", "judge"):  # the runs lnbench check added, each round a sweep of its own
        if added := [x for x in runs if judge.stage(x) == role]:
            progress.append(progress_line(f"{role} runs added by lnbench check", added, None))
    return Report(root, runs, lay, metric, targets, target_note(metric, targets), build_table(groups, lay, metric, targets), images,
                  verdicts, claim_errors, groups, progress, roots, provenance_of(runs), aside, adjust)


def arrange(runs: list[Run], line: str | None, panels: list[str] | None, tune: list[str] | None) -> tuple[Layout, list[Group], list[Run]]:
    """The layout and its groups, and the runs set aside: those that never logged a metric (refused before
    training, killed at start) in a panel where no run trained. They keep their row beside the runs that
    trained (BN refused at batch 1 next to LN at batch 1), but get no empty panel of their own; and the axes
    are found again without them, so that a key only they varied (a typo'd batch size) makes no panels."""
    lay = layout(runs, line, panels, tune)
    groups = group_runs(runs, lay)
    empty = {g.panel for g in groups} - {g.panel for g in groups if any(r.trained for r in g.runs)}
    aside = [r for g in groups if g.panel in empty for r in g.runs]
    if aside:
        kept = [r for r in runs if r not in aside]
        lay = layout(kept, line, panels, tune)
        groups = group_runs(kept, lay)
    return lay, groups, aside


def progress_line(where: str, runs: list[Run], total: int | None) -> str:
    """`12 of 27 jobs done (11 completed, 1 failed), 2 running, 13 not started yet`: total from the sweep's
    multirun.yaml, else the job directories found."""
    ended = Counter(r.status for r in runs if r.status in ENDED)
    done = sum(ended.values())
    running = sum(r.status == "running" for r in runs)
    killed = len(runs) - done - running
    text = f"{where}: {done} of {total if total is not None else len(runs)} job(s) done"
    text += f" ({', '.join(f'{n} {s}' for s, n in ended.items())})" if ended else ""
    text += f", {running} running" if running else ""
    text += f", {killed} stopped without a summary (killed?)" if killed else ""
    if total is not None and total > len(runs):
        text += f", {total - len(runs)} not started yet"
    return text


# ---- provenance -------------------------------------------------------------------------------
@dataclass
class Provenance:
    shared: dict[str, Any]  # what every run that recorded provenance has in common
    differs: Table | None  # one row per combination of the keys that differ, naming its runs
    missing: list[str]  # runs whose summary.json holds none


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
        table = Table(["runs", *differ], [[_names(names), *combo] for combo, names in combos.items()])
    return Provenance(shared, table, [r.name for r in runs if r not in have])


def _prov_text(key: str, value: Any) -> str:
    if value is None:
        return "—"
    if key == "git_dirty":
        return "dirty" if value else "clean"
    if key == "git_commit":
        return str(value)[:10]
    return str(value)


def _names(names: list[str], shown: int = 4) -> str:
    text = ", ".join(names[:shown])
    return text + (f", … ({len(names)} runs)" if len(names) > shown else "")


def provenance_lines(rep: Report) -> list[str]:
    prov = rep.provenance
    if prov is None:
        return []
    if not prov.shared and not prov.differs:
        return ["provenance: not recorded by these runs (made before lnbench recorded it in summary.json)"]
    label = "provenance of every run" if not prov.missing else "provenance shared by the runs that recorded it"
    lines = [f"{label}: " + ", ".join(f"{k}={v}" for k, v in prov.shared.items())]
    if prov.differs:
        lines.append("provenance that differs between runs: " + ", ".join(prov.differs.columns[1:]) + " (see the table below)")
    if prov.missing:
        lines.append("no provenance recorded (made before lnbench recorded it): " + _names([f"`{n}`" for n in prov.missing], 6))
    return lines


def claims_table(rep: Report) -> Table:
    return Table(judge.COLUMNS, judge.table_rows(rep.verdicts))


def target_note(metric: str, targets: dict[str, float]) -> str:
    notes = [f"{m} target {t:.4g} (--target)" for m, t in targets.items()]
    if metric not in targets:
        notes.insert(0, f"{metric} target: per panel, the best validation {metric} of its slowest-converging completed "
                        f"run, so every completed run reaches it (set one with --target {metric}=VALUE)")
    return "; ".join(notes)


def primary_metric(runs: list[Run]) -> str:
    """The metric most runs rank by (their summary says which); loss if no run got that far."""
    named = Counter(r.primary for r in runs if r.summary.get("primary_metric") or r.records)
    return named.most_common(1)[0][0] if named else "loss"


def problems(rep: Report) -> list[str]:
    return [f"`{r.name}`: **{r.status}**: {run_problem(r) or 'no error recorded'}" for r in rep.runs
            if r not in rep.aside and r.status not in ("completed", "running")]


def untrained(rep: Report) -> list[str]:
    """The runs set aside (see arrange), with what they were asked to do and why they stopped."""
    return [f"`{r.name}` ({' '.join(f'{k}={v}' for k, v in r.overrides.items() if not _not_axis(k)) or 'defaults'}): **{r.status}**"
            + (f": {why}" if (why := run_problem(r)) else "") for r in rep.aside if r.status != "running"]


def running(rep: Report) -> list[str]:
    return [f"`{r.name}`: at step {max((int(x['step']) for x in r.records), default=0)}" + (f" of {r.value('steps')}" if isinstance(r.value("steps"), int) else "")
            for r in rep.runs if r.status == "running"]


def torn_runs(rep: Report) -> list[str]:
    return [f"`{r.name}`: the last line of metrics.jsonl was cut off (the run was killed mid-write) and was skipped"
            for r in rep.runs if r.torn and r.status != "running"]


def header_lines(rep: Report) -> list[str]:
    lay = rep.lay
    counts = Counter(r.status for r in rep.runs)
    lines = [f"{len(rep.runs)} run(s): " + ", ".join(f"{n} {s}" for s, n in counts.items())]
    lines += [f"progress of {p}" for p in rep.progress]
    lines += provenance_lines(rep)
    axes = [k for k in [*lay.panels, lay.line, *lay.seeds] if k]
    lines.append("swept: " + (", ".join(f"`{k}`" for k in axes) or "nothing (a single configuration)"))
    lines.append(f"panels: {', '.join(lay.panels) or '—'}; lines: {lay.line or '—'}; averaged over: {', '.join(lay.seeds) or '—'}")
    if lay.fixed:
        lines.append("fixed: " + ", ".join(f"`{k}={v}`" for k, v in lay.fixed.items()))
    if lay.tuned:
        picks = [g for g in rep.groups if g.selection]
        edges = [f"{g.line} ({panel_title(lay.panels, g.panel)})" for g in picks if g.selection.edge]
        lines.append(f"tuned on validation (final val {rep.metric} of the tuning runs, mean over seeds; test and judging runs never "
                     "read; a value with a run that did not complete never wins over one whose runs all did): "
                     + ", ".join(f"`{k}`" for k in lay.tuned) + "; the table, curves and claims use each line's winner"
                     + (f"; **winner at the edge of the grid** for {', '.join(edges)}: widen the grid (`lnbench check` does)" if edges else ""))
    lines.append("★: the best line of its panel by mean final validation " + rep.metric + "; cells: mean ± standard deviation over seeds")
    lines.append(rep.target_note)
    lines.append("seconds are wall-clock time of each job, evaluations included: compare them only between jobs that "
                 "ran under the same conditions (launcher, machine load)")
    return lines


def _sections(rep: Report) -> list[tuple[str, list[str]]]:
    return [(title, items) for title, items in (("Running", running(rep)), ("Failures", problems(rep)),
                                                 ("Not trained (no metrics: refused or stopped before the first log)", untrained(rep)),
                                                 ("Torn metrics", torn_runs(rep)), ("Judging runs not used", stale_runs(rep))) if items]


def stale_runs(rep: Report) -> list[str]:
    return [f"`{r.name}`: judging seed at {', '.join(f'{k}={r.value(k)}' for k in rep.lay.tuned)}, but the tuning now chooses "
            f"{g.selection.text()}" for g in rep.groups for r in g.stale]


def claims_lines(rep: Report) -> list[str]:
    lines = [f"claim error: {e}" for e in rep.claim_errors]
    if rep.verdicts:
        lines += judge.lines(rep.verdicts, rep.adjust) + ["details (every panel, look and p-value) in claims.json; claims.png draws each claim's numbers"]
    return lines


PROVENANCE_TITLE = "Provenance that differs between runs"


def title(rep: Report) -> str:
    return " vs ".join(map(str, rep.roots or [rep.root]))


def render_markdown(rep: Report) -> str:
    out = [f"# lnbench report: {title(rep)}", ""]
    if rep.verdicts or rep.claim_errors:
        out += ["## Claims", "", *[f"- {line}" for line in claims_lines(rep)], ""]
        out += [markdown_table(claims_table(rep)), "", "## Runs", ""] if rep.verdicts else []
    out += [*[f"- {line}" for line in header_lines(rep)], ""]
    out += [markdown_table(rep.table), ""]
    if rep.provenance and rep.provenance.differs:
        out += [f"## {PROVENANCE_TITLE}", "", markdown_table(rep.provenance.differs), ""]
    for head, items in _sections(rep):
        out += [f"## {head}", "", *[f"- {item}" for item in items], ""]
    for name in rep.images:
        out += [f"![{name}]({name})", ""]
    return "\n".join(out)


STYLE = ("body{font-family:sans-serif;margin:2em;max-width:110em}table{border-collapse:collapse;font-size:.9em}"
         "td,th{border:1px solid #ccc;padding:.3em .6em;text-align:right}th{background:#f3f3f3}"
         "td:nth-child(-n+3){text-align:left}img{max-width:100%;margin:1em 0}code{background:#f3f3f3}")


def render_html(rep: Report) -> str:
    def li(text: str) -> str:
        # the Markdown items use `code` and **bold**; keep just the words
        return "<li>" + html.escape(text.replace("`", "").replace("**", "")) + "</li>"

    parts = [f"<!doctype html><meta charset='utf-8'><title>lnbench report</title><style>{STYLE}</style>",
             f"<h1>lnbench report: {html.escape(title(rep))}</h1>"]
    if rep.verdicts or rep.claim_errors:
        parts += ["<h2>Claims</h2><ul>", *map(li, claims_lines(rep)), "</ul>"]
        parts += [html_table(claims_table(rep)), "<h2>Runs</h2>"] if rep.verdicts else []
    parts += ["<ul>", *map(li, header_lines(rep)), "</ul>", html_table(rep.table)]
    if rep.provenance and rep.provenance.differs:
        parts += [f"<h2>{PROVENANCE_TITLE}</h2>", html_table(rep.provenance.differs)]
    for head, items in _sections(rep):
        parts += [f"<h2>{head}</h2><ul>", *map(li, items), "</ul>"]
    for name, png in rep.images.items():
        parts.append(f"<img alt='{name}' src='data:image/png;base64,{base64.b64encode(png).decode()}'>")
    return "\n".join(parts)


def write_report(rep: Report, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    files: dict[str, bytes] = dict(rep.images)
    files["report.md"] = render_markdown(rep).encode()
    files["report.html"] = render_html(rep).encode()
    files["claims.json"] = (json.dumps(rep.verdicts, indent=2) + "\n").encode()
    for name, data in files.items():
        write_bytes(out / name, data)
    return [out / name for name in files]


# ---- command line -----------------------------------------------------------------------------
PRIMARY = "__primary__"  # a --target without a metric name, for whichever metric is primary


class ReportError(UserError):
    """A report option that names no key or metric of the runs; the message says which ones there are."""


def parse_targets(items: list[str]) -> dict[str, float]:
    """`--target error=0.05` per metric; a bare number is for the primary metric."""
    targets = {}
    for item in items:
        metric, _, value = item.rpartition("=")
        try:
            targets[metric or PRIMARY] = float(value)
        except ValueError:
            raise ReportError(f"--target {item!r} is not METRIC=NUMBER (e.g. --target error=0.05).") from None
    return targets


def check_options(runs: list[Run], line: str | None, panels: list[str] | None, tune: list[str] | None, targets: dict[str, float]) -> None:
    """Refuse a --lines/--panels/--tune key no run has and a --target metric no run logged, naming those that
    exist: a misspelt key would otherwise give one panel of everything, silently."""
    axes = swept_keys([r for r in runs if r.trained] or runs)
    for option, keys in (("--lines", [line] if line else []), ("--panels", panels or []), ("--tune", tune or [])):
        for key in keys:
            if not any(r.has(key) for r in runs):
                near = difflib.get_close_matches(key, sorted(config_keys(runs)), n=3)
                raise ReportError(
                    f"{option} {key!r} is no config key of these runs. Keys that vary between them: "
                    f"{', '.join(axes) or 'none'}" + (f"; did you mean {' or '.join(near)}?" if near else "")
                    + " (any key of the runs' .hydra/config.yaml is allowed, e.g. dataset.batch_size).")
    if line and panels and line in panels:
        raise ReportError(f"--lines {line!r} is also in --panels: a key draws either the lines or the panels.")
    logged = set().union(*(r.metrics("val") for r in runs))
    for metric in targets:
        if metric != PRIMARY and metric not in logged:
            raise ReportError(f"--target {metric!r}: no run logged a validation {metric}. Metrics they logged: "
                              f"{', '.join(sorted(logged)) or 'none yet'} (e.g. --target {next(iter(sorted(logged)), 'loss')}=0.1).")


def config_keys(runs: list[Run]) -> set[str]:
    keys: set[str] = set()
    for r in runs:
        keys |= {*r.overrides, *r.choices, *_flat(r.config)}
    return keys


def _flat(d: dict[str, Any], prefix: str = "") -> list[str]:
    return [k for key, v in d.items() for k in (_flat(v, f"{prefix}{key}.") if isinstance(v, dict) else [f"{prefix}{key}"])]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lnbench report", description=__doc__.split("\n\n")[0])
    p.add_argument("dirs", type=Path, nargs="+", metavar="DIR",
                   help="run or sweep directories (outputs/multirun/<date>/<time>, or a folder of runs such as "
                        "outputs/runs/<date>); several are compared in one report")
    p.add_argument("--target", action="append", default=[], metavar="METRIC=VALUE",
                   help="count steps and seconds until val METRIC <= VALUE (repeatable; default: the primary "
                        "metric's best value of the slowest-converging completed run)")
    p.add_argument("--lines", metavar="KEY", help="the swept key drawn as lines (default: model)")
    p.add_argument("--panels", metavar="KEY[,KEY]", help="the swept keys drawn as panels (default: the other swept keys)")
    p.add_argument("--tune", metavar="KEY[,KEY]",
                   help="swept keys to select per line and panel on validation (default: the preset's `tune:`)")
    p.add_argument("--out", type=Path, help=f"where to write (default: DIR/{OUT_DIR}; required with several DIRs)")
    p.add_argument("--adjust", choices=("holm", "bh", "none"), default="holm",
                   help="the claims' adjustment for their number: holm (family-wise error, the default), bh "
                        "(Benjamini-Hochberg false discovery rate) or none; the unadjusted verdict is always shown")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return report_command(args)
    except UserError as e:
        print(f"lnbench report: {e}", file=sys.stderr)
        return 2


def report_command(args: argparse.Namespace) -> int:
    roots: list[Path] = args.dirs
    for root in roots:
        if not root.is_dir():
            raise ReportError(f"{root} is not a directory.")
    if len(roots) > 1 and args.out is None:
        # each DIR/report is that directory's own report (lnbench check links to it): a comparison goes elsewhere
        raise ReportError(f"{len(roots)} directories are compared: say where the report goes with --out DIR "
                          f"(each DIR/{OUT_DIR} is kept for that directory's own report).")
    if len(roots) > 1:
        runs = [run for root, name in zip(roots, source_names(roots)) for run in load_runs(root, name)]
    else:
        runs = load_runs(roots[0])
    if not runs:
        raise ReportError(f"no runs under {', '.join(map(str, roots))} (no summary.json, metrics.jsonl or .hydra/overrides.yaml).")
    panels = args.panels.split(",") if args.panels else None
    tune = args.tune.split(",") if args.tune else None
    targets = parse_targets(args.target)
    check_options(runs, args.lines, panels, tune, targets)
    rep = make_report(roots[0], runs, targets, args.lines, panels, tune=tune, roots=roots, adjust=args.adjust)
    for path in write_report(rep, args.out or roots[0] / OUT_DIR):
        print(path)
    print()
    if rep.verdicts:
        print(markdown_table(claims_table(rep)))
        print()
    for e in rep.claim_errors:
        print(f"claim error: {e}")
    print(markdown_table(rep.table))
    for head, items in _sections(rep):
        print(f"\n{head}:")
        for item in items:
            print(f"  - {item.replace('`', '').replace('**', '')}")
    return 0
