"""`lnbench report DIR`: a run or a whole sweep directory -> convergence plots (PNG) and a Markdown/HTML table.

Everything comes from the files each job leaves (`metrics.jsonl`, `summary.json`, `.hydra/*.yaml`), so a
report needs no network and no W&B account, and works on a sweep that is still running or was killed.
The claims the runs' configs declare are judged on the selected runs (lnbench.claims.judge) and written to
report/claims.json and the top of report.md/report.html.

By layer: analysis (runs -> axes, groups, tuned values, numbers), tables, make (a Report: the analysis
with its tables, verdicts and figures), plots (matplotlib), page (a Report as a page, and its files),
render (Markdown, HTML and the terminal from one page of blocks; `lnbench check`'s page uses it too), cli.
The submodules import each other by name, never this package face: it re-exports only what other modules
call (`main` for lnbench.cli, a preset's report for lnbench check), so importing it loads each submodule once,
with no loop back. Tests import each name from its own module.
"""

from lnbench.report.analysis import X_AXES
from lnbench.report.cli import main
from lnbench.report.make import make_report
from lnbench.report.page import write_report
from lnbench.runs import OUT_DIR, load_runs

__all__ = ["X_AXES", "main", "make_report", "write_report", "OUT_DIR", "load_runs"]
