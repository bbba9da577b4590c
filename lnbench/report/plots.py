"""The report's figures (matplotlib, imported on first use): the curves of every panel, and every claim's
numbers as its verdict reads them."""

from __future__ import annotations

import io
import math
import textwrap
from typing import Any

from lnbench.report.analysis import X_AXES, Group, Layout, seed_band, trivial_value

# Metrics the paper plots on a log scale: losses span decades while a model learns.
LOG_METRICS = {"loss", "mse", "bpc"}
# Panels side by side before the next row starts: a folder of many runs stays readable.
PANELS_PER_ROW = 4
# Characters per line of a legend entry; longer names wrap (the figure is at least one panel wide).
LEGEND_WRAP = 40
TITLE_WRAP = 48  # characters per line of a panel's title: a long one would run into its neighbour's
ROWS = [("train", "loss"), ("val", None)]  # each panel: training loss above its own validation metric


def _pyplot():
    import matplotlib  # noqa: PLC0415 (matplotlib: only when a figure is drawn; a report's text needs none)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415 (after the Agg backend is chosen)

    return plt


def figure_png(fig) -> bytes:
    plt = _pyplot()

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def plot_curves(groups: list[Group], lay: Layout, x: str) -> bytes | None:
    """The curves as a PNG; None if x never varies."""
    fig = curves_figure(groups, lay, x)
    return None if fig is None else figure_png(fig)


# ---- the curves -----------------------------------------------------------------------------------
def curves_figure(groups: list[Group], lay: Layout, x: str):
    """Panels in rows of at most PANELS_PER_ROW; each panel is two plots, the training loss above the
    validation metric; one legend above all. Only the panels whose runs' x varies (no epochs for a task that
    draws fresh batches every step); None if none does."""
    # a line keeps its colour in every figure, also where some of its panels are left out
    # (a refused line draws nothing)
    order = list(dict.fromkeys(g.line for g in groups if any(r.trained for r in g.runs)))
    groups = [g for g in groups if _varies(g, x)]
    if not groups:
        return None
    plt = _pyplot()
    panels = list(dict.fromkeys(g.panel for g in groups))
    colors = {line: plt.cm.tab10(order.index(line) % 10) for line in order if any(g.line == line for g in groups)}
    ncols = min(len(panels), PANELS_PER_ROW)
    nrows = math.ceil(len(panels) / ncols)
    metric = {g.panel: g.metric for g in groups}
    # One scale across panels only where they plot the same metric of one dataset (one trivial predictor): a
    # folder of runs on several datasets gets a scale per panel (DRAW's ~200 nats beside the adding task's 0.001).
    kinds = {(metric[p], _trivial([g for g in groups if g.panel == p], "loss")) for p in panels}
    shared = {"train": len({k[1] for k in kinds}) == 1, "val": len(kinds) == 1}
    # constrained layout leaves room for the legend outside the axes, however many rows it takes
    fig, axes = plt.subplots(
        len(ROWS) * nrows, ncols, figsize=(4.6 * ncols, 3.4 * len(ROWS) * nrows), squeeze=False, layout="constrained"
    )

    def ax_of(i: int, r: int):
        return axes[len(ROWS) * (i // ncols) + r][i % ncols]

    drew_trivial = False
    for i, panel in enumerate(panels):
        cell = [g for g in groups if g.panel == panel and g.line in colors]
        for r, (split, m) in enumerate(ROWS):
            if i and shared[split]:  # one metric, one scale: the panels of a metric can be compared at a glance
                ax_of(i, r).sharey(axes[r][0])
            if r:  # under its training plot, on the same steps: a single evaluation sits where it was made
                ax_of(i, r).sharex(ax_of(i, 0))
            drew_trivial |= _draw_panel(
                ax_of(i, r), cell, colors, (split, m or metric[panel], x), i % ncols == 0 or not shared[split]
            )
        ax_of(i, 0).set_title(textwrap.fill(lay.title(panel), TITLE_WRAP), fontsize=10)
    for i in range(len(panels), ncols * nrows):  # the unused places of the last row
        for r in range(len(ROWS)):
            ax_of(i, r).set_visible(False)
    for i, panel in enumerate(panels):  # once every panel of a shared axis has drawn
        for r, (split, m) in enumerate(ROWS):
            if (m or metric[panel]) in LOG_METRICS and (i == 0 or not shared[split]):
                _log_y(ax_of(i, r))
    _legend(fig, groups, lay, colors, drew_trivial)
    return fig


def _varies(group: Group, x: str) -> bool:
    return any(len({p[0] for p in r.points("train", "loss", x).values()}) > 1 for r in group.runs)


def _trivial(cell: list[Group], metric: str) -> float | None:
    return trivial_value([r for g in cell for r in g.runs], metric)


def _draw_panel(ax, cell: list[Group], colors: dict, what: tuple[str, str, str], ylabel: bool) -> bool:
    """One plot of a panel; returns whether it drew the trivial predictor."""
    split, metric, x = what
    for g in cell:
        _draw_band(ax, g, split, metric, x, colors[g.line])
    trivial = _trivial(cell, metric)
    if trivial is not None:  # a dataset's trivial predictor, in this metric's units (lnbench.report.analysis)
        ax.axhline(trivial, color="grey", ls="--", lw=1)
    ax.set_xlabel(X_AXES[x])
    if ylabel:  # a shared y axis is labelled once, at the left of its row
        ax.set_ylabel(f"{split} {metric}")
    ax.grid(True, which="major", alpha=0.3)
    return trivial is not None


def _legend(fig, groups: list[Group], lay: Layout, colors: dict, trivial: bool) -> None:
    """One legend for every panel; the trivial predictor in it only where some panel drew it."""
    plt = _pyplot()

    handles = [plt.Line2D([], [], color=color, lw=2) for color in colors.values()]
    labels = [line_label(groups, line) for line in colors]
    if trivial:
        handles.append(plt.Line2D([], [], color="grey", ls="--", lw=1))
        labels.append("trivial predictor")
    band = " (line: mean over seeds, band: min–max)" if lay.seeds else ""
    add_legend(fig, handles, [textwrap.fill(t, LEGEND_WRAP) for t in labels], (lay.line or "run") + band)


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
    from matplotlib.ticker import FuncFormatter  # noqa: PLC0415 (matplotlib: only when a figure is drawn)

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
    if len(xs) == 1:  # a single evaluation (eval_every >= steps): a dot, its seeds' range as a bar
        ax.errorbar(xs, mean, yerr=[[mean[0] - lo[0]], [hi[0] - mean[0]]], color=color, fmt="o", capsize=3)
        return
    ax.plot(xs, mean, color=color, lw=1.6)
    if len(group.runs) > 1:
        ax.fill_between(xs, lo, hi, color=color, alpha=0.2, lw=0)


# ---- the claims -----------------------------------------------------------------------------------
def claims_figure(entries: list[dict[str, Any]]):
    """Every claim's numbers as the verdict reads them: per panel, each seed's value of the two lines, joined by
    seed (a diverged run at the top edge, marked x). None if no claim has numbers."""
    shown = [
        (d, p) for d in entries for p in d["panels"] if any(p.get("values", {}).get(k) for k in ("better", "than"))
    ]
    if not shown:
        return None
    plt = _pyplot()
    ncols = min(4, len(shown))
    nrows = math.ceil(len(shown) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.6 * ncols, 3.0 * nrows), squeeze=False, layout="constrained")
    for ax, (d, p) in zip(axes.flat, shown):
        _draw_pairs(ax, d, p)
    for ax in list(axes.flat)[len(shown) :]:
        ax.set_visible(False)
    return fig


def _draw_pairs(ax, d: dict[str, Any], p: dict[str, Any]) -> None:
    vals = p["values"]
    finite = [v for k in ("better", "than") for v in vals.get(k, {}).values() if v != "diverged"]
    top = max(finite) * 1.05 if finite else 1.0
    seeds = sorted(set(vals.get("better", {})) | set(vals.get("than", {})), key=str)
    for s in seeds:
        ys = [vals.get(k, {}).get(s) for k in ("better", "than")]
        pts = [(i, top if y == "diverged" else y) for i, y in enumerate(ys) if y is not None]
        ax.plot(*zip(*pts), color="grey", lw=0.8, alpha=0.7)
        for i, y in pts:
            ax.plot(i, y, "x" if ys[i] == "diverged" else "o", color=("C0", "C3")[i], ms=4)
    ax.set_xticks([0, 1], [f"better: {d['better']}", f"than: {d['than']}"])
    ax.set_xlim(-0.4, 1.4)
    ax.set_title(f"{d['id']}\n{p['panel']}: {d['verdict']}", fontsize=8)
    ax.set_ylabel(d["measure"], fontsize=8)
    ax.tick_params(labelsize=7)
