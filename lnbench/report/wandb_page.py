"""A sweep's report and a check's pages as W&B runs (`logger.wandb.report=true`): one run of job_type `report` in
the sweep's group holding the report's tables and plots, and one of job_type `check` holding the check's pages.
Called by the sweep's closing callback (lnbench.launch.sweep.end) and by `lnbench check`.
"""

from __future__ import annotations

import json
import logging
import re
import shlex
import tempfile
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from lnbench import CONF_DIR
from lnbench.config.schema import register_configs
from lnbench.report.render import Detail
from lnbench.runs import OUT_DIR, load_runs
from lnbench.training.sinks.wandb_run import finish_page_run, start_page_run
from lnbench.training.tracker import sweep_group

log = logging.getLogger("lnbench")


def wants_report(config: DictConfig) -> bool:
    mode = OmegaConf.select(config, "logger.wandb.mode", default="disabled")
    return (
        bool(OmegaConf.select(config, "logger.wandb.report", default=False))
        and str(getattr(mode, "value", mode)) != "disabled"
    )


def log_report(config: DictConfig, sweep_dir: Path) -> str | None:
    """One W&B run (job_type `report`) in the sweep's group: the report's table(s) as wandb.Table, the
    claims table (report/claims.json) when there is one, the plots as images. Returns where it is."""
    wb = config.logger.wandb
    try:
        tables, images, rep = report_contents(sweep_dir)
    except Exception as e:  # noqa: BLE001 (a report that cannot be made must not hide the sweep's own results)
        log.warning(
            "the report for W&B could not be made (%s: %s); `lnbench report %s` says more.",
            type(e).__name__,
            e,
            sweep_dir,
        )
        return None
    try:
        import wandb  # noqa: PLC0415 (optional: only when W&B is on)

        wandb.teardown()  # at exit, W&B's own exit hook may have stopped its service already: start afresh
    except Exception:  # noqa: BLE001 (start_wandb says why W&B cannot start)
        pass
    group = wb.group or sweep_group(config.hydra)
    run, mode = start_page_run(
        wb,
        group=group,
        job_type="report",
        name=f"report · {group}",
        folder=sweep_dir,
        config={"sweep_dir": str(sweep_dir.resolve())},
        kept=f"the report is still there: `lnbench report {shlex.quote(str(sweep_dir))}`",
    )
    if run is None:
        return None
    try:
        import wandb  # noqa: PLC0415 (optional: only when W&B is on)

        payload: dict[str, Any] = {
            f"report/{name}": wandb.Table(columns=cols, data=rows) for name, (cols, rows) in tables.items()
        }
        # From files of our own: at exit W&B's own temp folder (where it would write image bytes) is gone.
        with tempfile.TemporaryDirectory() as tmp:
            for name, png in images.items():
                (Path(tmp) / name).write_bytes(png)
                payload[f"report/{Path(name).stem}"] = wandb.Image(str(Path(tmp) / name), caption=name)
            run.log(payload)
        log_pages(run, rep, group)
        return finish_page_run(run, mode)
    except Exception as e:  # noqa: BLE001 (W&B must never cost the sweep its result)
        log.warning("the W&B report run failed (%s: %s); the sweep's runs are unaffected.", type(e).__name__, e)
        return None


def log_pages(run, rep, group: str) -> None:
    """The report's files as `lnbench report` writes them (its pages, tables, plots, claims.json), an artifact of
    type report. Written apart: <sweep>/report/ may hold a fuller report (lnbench check's, with verdicts)."""
    import wandb  # noqa: PLC0415 (optional: only when W&B is on)

    from lnbench.report.page import write_report  # noqa: PLC0415 (matplotlib: only when a report is made)

    with tempfile.TemporaryDirectory() as tmp:
        write_report(rep, Path(tmp))
        artifact = wandb.Artifact(re.sub(r"[^\w.-]+", "-", f"report-{group}").strip("-"), type="report")
        artifact.add_dir(tmp)  # copied into W&B's staging area here, before the folder goes
        run.log_artifact(artifact)


def log_check_pages(out: Path, overrides: list[str]) -> str | None:
    """`lnbench check ... logger.wandb.report=true`: its pages (check.md, check.html, claims.json in --out) as an
    artifact of type check, in a W&B run of job_type check. W&B's settings are the sweeps': the check's logger
    overrides over your own defaults, composed as a run's are. Returns where it is (None: not asked, or W&B failed)."""
    from hydra import compose, initialize_config_dir  # noqa: PLC0415 (Hydra's app: only when a check logs to W&B)

    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("train", overrides=[o for o in overrides if o.lstrip("+~").startswith("logger")])
    if not wants_report(cfg):
        return None
    wb = cfg.logger.wandb
    run, mode = start_page_run(
        wb,
        group=wb.group or "check",
        job_type="check",
        name=f"check · {out.name}",
        folder=out,
        config={"out": str(out.resolve())},
        kept=f"the pages are in {out}",
    )
    if run is None:
        return None
    try:
        import wandb  # noqa: PLC0415 (optional: only when W&B is on)

        artifact = wandb.Artifact("check", type="check")
        for name in ("check.md", "check.html", "claims.json"):
            if (out / name).is_file():
                artifact.add_file(str(out / name))
        run.log_artifact(artifact)
        return finish_page_run(run, mode)
    except Exception as e:  # noqa: BLE001 (W&B must never cost the check its pages)
        log.warning("the W&B check run failed (%s: %s); the pages are in %s.", type(e).__name__, e, out)
        return None


def report_contents(sweep_dir: Path) -> tuple[dict[str, tuple[list[str], list[list[Any]]]], dict[str, bytes], Any]:
    """({table name: (columns, rows)}, {png name: bytes}, the Report) from lnbench.report. Only load_runs,
    make_report, write_report (log_pages) and the Report's `table` (or `tables`), `verdicts` (what claims.json
    holds) and `images` are relied on: lnbench/report/ changes often. Without verdicts, report/claims.json if an
    earlier report wrote one."""
    from lnbench.report.make import make_report  # noqa: PLC0415 (matplotlib: only when a report is made)

    rep = make_report(sweep_dir, load_runs(sweep_dir), {})
    found = getattr(rep, "tables", None) or {"table": rep.table}
    tables = {
        name: (list(t.columns), [[str(c) if isinstance(c, Detail) else c for c in r] for r in t.rows])
        for name, t in found.items()
    }
    claims, saved = getattr(rep, "verdicts", None), sweep_dir / OUT_DIR / "claims.json"
    if not claims and saved.is_file():
        claims = json.loads(saved.read_text())
    if claims:
        tables["claims"] = json_table(claims)
    return tables, dict(rep.images), rep


def json_table(data: Any) -> tuple[list[str], list[list[Any]]]:
    """A list of objects (or an object of objects, or one object holding such a list) as columns and rows;
    nested values as JSON text, since a W&B Table cell holds a scalar."""
    if isinstance(data, dict):
        lists = [v for v in data.values() if isinstance(v, list) and all(isinstance(x, dict) for x in v)]
        if lists:
            data = lists[0]
        elif all(isinstance(v, dict) for v in data.values()):
            data = [{"name": k, **v} for k, v in data.items()]
        else:
            data = [data]
    rows_in = [r if isinstance(r, dict) else {"value": r} for r in data]
    columns = list(dict.fromkeys(k for r in rows_in for k in r))

    def cell(v: Any) -> Any:
        return v if v is None or isinstance(v, (str, int, float, bool)) else json.dumps(v)

    return columns, [[cell(r.get(c)) for c in columns] for r in rows_in]
