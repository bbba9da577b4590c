"""A Report: the runs of one or more directories arranged, tuned and judged, with their tables and figures
(everything a page shows, before it is rendered)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from lnbench.claims import family, judge
from lnbench.config.choices import Stage
from lnbench.report.analysis import X_AXES, Group, Layout, arrange, panel_metrics, primary_metric, tune_groups
from lnbench.report.plots import claims_figure, figure_png, plot_curves
from lnbench.report.render import Table
from lnbench.report.tables import Provenance, build_table, provenance_of
from lnbench.runs import ENDED, Run, source_names, sweep_total

PRIMARY = "__primary__"  # a --target without a metric name, for whichever metric is primary


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
    adjust: str = family.DEFAULT_ADJUST  # the claims' family adjustment


def make_report(
    root: Path,
    runs: list[Run],
    targets: dict[str, float],
    line: str | None = None,
    panels: list[str] | None = None,
    x_axes: Iterable[str] = tuple(X_AXES),
    tune: list[str] | None = None,
    roots: list[Path] | None = None,
    adjust: str = family.DEFAULT_ADJUST,
) -> Report:
    """roots: the directories compared (their runs carry `source`); by default root alone. adjust: how the
    claims' verdicts are adjusted over their declared families (bonferroni, holm, bh or none)."""
    roots = roots or [root]
    lay, groups, aside = arrange(runs, line, panels, tune)
    metric = primary_metric(runs)
    panel_metrics(groups)
    tune_groups(groups, lay)
    design = judge.read_design(root) if len(roots) == 1 else None
    verdicts, claim_errors = judge.judge_claims(groups, lay, design, adjust)
    targets = {metric if k == PRIMARY else k: v for k, v in targets.items()}
    images = {f"curves_{x}.png": png for x in x_axes if (png := plot_curves(groups, lay, x)) is not None}
    if verdicts and tuple(x_axes) and (fig := claims_figure(verdicts)) is not None:
        images["claims.png"] = figure_png(fig)
    return Report(
        root,
        runs,
        lay,
        metric,
        targets,
        target_note(metric, targets),
        build_table(groups, lay, metric, targets),
        images,
        verdicts,
        claim_errors,
        groups,
        progress_lines(root, roots, runs),
        roots,
        provenance_of(runs),
        aside,
        adjust,
    )


def progress_lines(root: Path, roots: list[Path], runs: list[Run]) -> list[str]:
    """Per directory, its tuning sweep's progress; then the rounds lnbench check added, each a sweep of its own."""
    by_root = (
        [(r, [run for run in runs if run.source == name]) for r, name in zip(roots, source_names(roots))]
        if len(roots) > 1
        else [(root, runs)]
    )
    lines = [progress_line(str(r), [x for x in rs if x.stage == Stage.tune], sweep_total(r)) for r, rs in by_root]
    for role in (Stage.widen, Stage.judge):
        if added := [x for x in runs if x.stage == role]:
            lines.append(progress_line(f"{role} runs added by lnbench check", added, None))
    return lines


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


def target_note(metric: str, targets: dict[str, float]) -> str:
    notes = [f"{m} target {t:.4g} (--target)" for m, t in targets.items()]
    if metric not in targets:
        notes.insert(
            0,
            f"{metric} target: per panel, the best validation {metric} of its slowest-converging completed "
            f"run, so every completed run reaches it (set one with --target {metric}=VALUE)",
        )
    return "; ".join(notes)
