"""`lnbench report DIR`: a run or a whole sweep directory -> convergence plots (PNG) and a Markdown/HTML table.

Everything comes from the files each job leaves (`metrics.jsonl`, `summary.json`, `.hydra/*.yaml`), so a
report needs no network and no W&B account, and works on a sweep that is still running or was killed.
The claims the runs' configs declare are judged on the selected runs (lnbench.claims.judge) and written to
report/claims.json and the top of report.md/report.html.

By layer: analysis (runs -> axes, groups, tuned values, numbers), tables, make (a Report: the analysis
with its tables, verdicts and figures), plots (matplotlib), page (a Report as a page, and its files),
render (Markdown, HTML and the terminal from one page of blocks; `lnbench check`'s page uses it too), cli.
The submodules import each other by name, never this package face: it only re-exports what tests and users
call (`main` for lnbench.cli), so importing it loads each submodule once, with no loop back.
"""

from lnbench.report.analysis import (
    X_AXES,
    Group,
    Layout,
    default_target,
    group_runs,
    layout,
    panel_title,
    tune_groups,
    varied_keys,
)
from lnbench.report.cli import ReportError, main, parse_targets
from lnbench.report.make import PRIMARY, Report, make_report
from lnbench.report.page import render_html, render_markdown, write_report
from lnbench.report.plots import PANELS_PER_ROW, curves_figure
from lnbench.runs import OUT_DIR, Run, load_run, load_runs

__all__ = [
    "X_AXES",
    "Group",
    "Layout",
    "default_target",
    "group_runs",
    "layout",
    "panel_title",
    "tune_groups",
    "varied_keys",
    "ReportError",
    "main",
    "parse_targets",
    "PRIMARY",
    "Report",
    "make_report",
    "render_html",
    "render_markdown",
    "write_report",
    "PANELS_PER_ROW",
    "curves_figure",
    "OUT_DIR",
    "Run",
    "load_run",
    "load_runs",
]
