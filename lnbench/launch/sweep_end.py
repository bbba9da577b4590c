"""A sweep as a person follows it in the terminal, and as a W&B group: a Hydra callback (conf/train.yaml).

- start: the sweep directory, printed (Hydra's basic launcher never says where it writes);
- each job: its console log lines prefixed with its number and name, so parallel jobs can be told apart
  (its own train.log stays unprefixed);
- end: a block with the sweep directory, how many jobs completed, failed and diverged, how to upload the
  W&B runs and the report command; with logger.wandb.report=true, one more W&B run in the sweep's group
  (job_type `report`) holding the report's tables and plots.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import re
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from lnbench import phases
from lnbench.launch.sweep_progress import SweepProgress
from lnbench.runs import lock_held, read_summary

log = logging.getLogger("lnbench")
IN_USE = "in use"


class SweepEnd(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        phases.record("sweep: Hydra's start-up (the sweep's config, the sweeper)", phases.marked("hydra"))
        print(f"sweep: {config.hydra.sweep.dir}", flush=True)
        self.config, self.done, self.pid = config, False, os.getpid()
        self.progress = SweepProgress(Path(str(config.hydra.sweep.dir)))  # job starts and ends, and a total
        self.progress.start()
        if wants_report(config):
            try:  # now: at exit it is too late to import (it registers exit hooks of its own)
                import wandb  # noqa: F401
            except Exception:
                pass  # start_wandb says why, at the end
        # Hydra skips on_multirun_end when a job failed (the sweeper re-raises the first failure once
        # every job has run) or a signal stopped the sweep: the block then comes at exit, after the error.
        atexit.register(self.end)

    def __getstate__(self) -> dict[str, Any]:
        # Hydra's joblib launcher pickles the callbacks with each job: the progress (a thread) stays here
        return {k: v for k, v in self.__dict__.items() if k != "progress"}

    def on_job_end(self, config: DictConfig, **kwargs: Any) -> None:
        # Exit hooks run last-registered first: keep ours ahead of those W&B registered during a job run
        # in this process (they clear the temp folder W&B writes tables and images through).
        if getattr(self, "pid", None) == os.getpid():
            atexit.unregister(self.end)
            atexit.register(self.end)

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        if HydraConfig.get().mode != RunMode.MULTIRUN:
            return
        from lnbench.training.tracker import job_name

        prefix = f"[#{config.hydra.job.num} {job_name(config.hydra)}] "
        for h in logging.getLogger().handlers:
            if type(h) is logging.StreamHandler:  # the console, not train.log
                h.setFormatter(Prefixed(prefix, h.formatter))

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self.end()

    def end(self) -> None:
        if getattr(self, "done", True):
            return
        self.done = True
        with phases.phase("sweep: the end-of-sweep block"):
            if getattr(self, "progress", None) is not None:
                self.progress.stop()
            sweep_dir = Path(str(self.config.hydra.sweep.dir))
            jobs = job_statuses(sweep_dir)
            report_run = log_report(self.config, sweep_dir) if wants_report(self.config) and jobs else None
            print(end_of_sweep_block(sweep_dir, jobs, report_run), flush=True)


class Prefixed(logging.Formatter):
    def __init__(self, prefix: str, inner: logging.Formatter | None):
        super().__init__()
        self.prefix, self.inner = prefix, inner or logging.Formatter()

    def format(self, record: logging.LogRecord) -> str:
        return "\n".join(self.prefix + line for line in self.inner.format(record).split("\n"))


# ---- the end-of-sweep block -------------------------------------------------------------------
def job_statuses(sweep_dir: Path) -> dict[str, dict[str, Any]]:
    """Job directory (relative) -> its summary.json ({} for a job that left none: killed or never ran). A job
    whose directory another process still holds (this sweep's jobs have all let go by now) is `in use`: this
    sweep did not run it, and failed it, whatever the other process's summary says."""
    found = {}
    for overrides in sorted(sweep_dir.glob("**/.hydra/overrides.yaml")):
        job = overrides.parent.parent
        summary = read_summary(job)
        if lock_held(job / ".lock"):
            summary = {
                **summary,
                "status": IN_USE,
                "error": "its directory is in use by another lnbench process: "
                "this sweep did not run it (wait for that process, then run the sweep again)",
            }
        found[str(job.relative_to(sweep_dir))] = summary
    return dict(sorted(found.items(), key=lambda kv: [int(p) if p.isdigit() else p for p in Path(kv[0]).parts]))


def end_of_sweep_block(sweep_dir: Path, jobs: dict[str, dict[str, Any]], report_run: str | None = None) -> str:
    counts = Counter(s.get("status", "no summary") for s in jobs.values())
    order = ["completed", "failed", "diverged", "interrupted"]
    shown = [f"{counts.get(s, 0)} {s}" for s in order] + [f"{n} {s}" for s, n in counts.items() if s not in order]
    lines = [f"sweep done: {sweep_dir}", f"  jobs       {len(jobs)}: " + ", ".join(shown)]
    for job, s in jobs.items():
        if s.get("status") in ("failed", "diverged", IN_USE):
            why = s.get("error") or f"loss not finite at step {s.get('diverged_at_step')}"
            lines.append(f"  {s['status']:<10} {job}: {_short(why)}")
        for flag in s.get("flags") or ():  # completed, but its numbers are suspect (lnbench.training.flags.suspect)
            lines.append(f"  flagged    {job}: {_short(flag)}")
    offline = sorted(sweep_dir.glob("*/wandb/offline-run-*"))
    if offline:
        extra = f" {sweep_dir}/wandb/offline-run-*" if any(sweep_dir.glob("wandb/offline-run-*")) else ""
        lines.append(
            f"  W&B        {len(offline)} offline run folder(s); "
            f"upload all with `wandb sync {sweep_dir}/*/wandb/offline-run-*{extra}`"
        )
    if report_run:
        lines.append(f"  W&B report {report_run}")
    if counts.get("interrupted") or counts.get("no summary"):
        lines.append(
            f"  continue   the same command with hydra.sweep.dir={sweep_dir}: each job goes on from its checkpoint"
        )
    lines.append(f"  next       lnbench report {sweep_dir}")
    return "\n".join(lines)


def _short(text: str, width: int = 160) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


# ---- the report as a W&B run ------------------------------------------------------------------
def wants_report(config: DictConfig) -> bool:
    mode = OmegaConf.select(config, "logger.wandb.mode", default="disabled")
    return (
        bool(OmegaConf.select(config, "logger.wandb.report", default=False))
        and str(getattr(mode, "value", mode)) != "disabled"
    )


def log_report(config: DictConfig, sweep_dir: Path) -> str | None:
    """One W&B run (job_type `report`) in the sweep's group: the report's table(s) as wandb.Table, the
    claims table (report/claims.json) when there is one, the plots as images. Returns where it is."""
    from lnbench.training.sinks.wandb_run import finish_page_run, start_page_run
    from lnbench.training.tracker import sweep_group

    wb = config.logger.wandb
    try:
        tables, images, rep = report_contents(sweep_dir)
    except Exception as e:  # a report that cannot be made must not hide the sweep's own results
        log.warning(
            "the report for W&B could not be made (%s: %s); `lnbench report %s` says more.",
            type(e).__name__,
            e,
            sweep_dir,
        )
        return None
    try:
        import wandb

        wandb.teardown()  # at exit, W&B's own exit hook may have stopped its service already: start afresh
    except Exception:
        pass  # start_wandb says why W&B cannot start
    group = wb.group or sweep_group(config.hydra)
    run, mode = start_page_run(
        wb,
        group=group,
        job_type="report",
        name=f"report · {group}",
        folder=sweep_dir,
        config={"sweep_dir": str(sweep_dir.resolve())},
        kept=f"the report is still there: `lnbench report {sweep_dir}`",
    )
    if run is None:
        return None
    try:
        import wandb

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
    except Exception as e:
        log.warning("the W&B report run failed (%s: %s); the sweep's runs are unaffected.", type(e).__name__, e)
        return None


def log_pages(run, rep, group: str) -> None:
    """The report's files as `lnbench report` writes them (its pages, tables, plots, claims.json), an artifact of
    type report. Written apart: <sweep>/report/ may hold a fuller report (lnbench check's, with verdicts)."""
    import wandb

    from lnbench import report

    with tempfile.TemporaryDirectory() as tmp:
        report.write_report(rep, Path(tmp))
        artifact = wandb.Artifact(re.sub(r"[^\w.-]+", "-", f"report-{group}").strip("-"), type="report")
        artifact.add_dir(tmp)  # copied into W&B's staging area here, before the folder goes
        run.log_artifact(artifact)


def log_check_pages(out: Path, overrides: list[str]) -> str | None:
    """`lnbench check ... logger.wandb.report=true`: its pages (check.md, check.html, claims.json in --out) as an
    artifact of type check, in a W&B run of job_type check. W&B's settings are the sweeps': the check's logger
    overrides over your own defaults, composed as a run's are. Returns where it is (None: not asked, or W&B failed)."""
    from hydra import compose, initialize_config_dir

    from lnbench import CONF_DIR
    from lnbench.config.schema import register_configs
    from lnbench.training.sinks.wandb_run import finish_page_run, start_page_run

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
        import wandb

        artifact = wandb.Artifact("check", type="check")
        for name in ("check.md", "check.html", "claims.json"):
            if (out / name).is_file():
                artifact.add_file(str(out / name))
        run.log_artifact(artifact)
        return finish_page_run(run, mode)
    except Exception as e:
        log.warning("the W&B check run failed (%s: %s); the pages are in %s.", type(e).__name__, e, out)
        return None


def report_contents(sweep_dir: Path) -> tuple[dict[str, tuple[list[str], list[list[Any]]]], dict[str, bytes], Any]:
    """({table name: (columns, rows)}, {png name: bytes}, the Report) from lnbench.report. Only load_runs,
    make_report, write_report (log_pages) and the Report's `table` (or `tables`), `verdicts` (what claims.json
    holds) and `images` are relied on: lnbench/report/ changes often. Without verdicts, report/claims.json if an
    earlier report wrote one."""
    from lnbench import report

    rep = report.make_report(sweep_dir, report.load_runs(sweep_dir), {})
    found = getattr(rep, "tables", None) or {"table": rep.table}
    tables = {name: (list(t.columns), [list(r) for r in t.rows]) for name, t in found.items()}
    claims, saved = getattr(rep, "verdicts", None), sweep_dir / "report" / "claims.json"
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
