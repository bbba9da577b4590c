"""The Weights & Biases sink: a W&B run per lnbench run, resumed with it.

W&B is a guest here: if it cannot start or fails mid-run, the run goes on with its local files and the
log says how to sync later. It is imported only when enabled (its import costs seconds).
"""

from __future__ import annotations

import logging
import secrets
import shlex
import string
from pathlib import Path
from typing import Any, Optional

from lnbench.runs import METRICS
from lnbench.training.sinks import RunInfo

log = logging.getLogger("lnbench")


def new_run_id() -> str:
    """A W&B run id (8 lowercase letters and digits) that draws on no RNG the run is seeded with."""
    alphabet = string.ascii_lowercase + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(8))


class WandbSink:
    """The W&B run, resumed by id (`resume="allow"`), so a resumed lnbench run appends to the same one,
    under the same name.

    Nothing W&B does may stop or hang the run: init and finish are bounded by init_timeout and
    finish_timeout; an online run that cannot reach the server (no network, no key) logs offline
    instead, to be uploaded later with `wandb sync`; a failure mid-run turns W&B off and says so.
    """

    def __init__(
        self,
        *,
        run: RunInfo,
        resume: dict[str, Any] | None,
        mode: Any,
        project: str,
        entity: Optional[str],
        group: Optional[str],
        tags: list[str],
        name: Optional[str],
        init_timeout: float,
        finish_timeout: float,
        report: bool,
        job_type: str,
        console: Any,
    ):
        # The defaults are WandbConfig's (lnbench.config.schema), the one copy.
        # `report` is for lnbench.launch.sweep.end.
        self.run, self.failed, self.run_dir = None, False, run.run_dir
        self.id = (resume or {}).get("id") or new_run_id()
        self.mode = str(getattr(mode, "value", mode))
        if self.mode == "disabled":
            return
        config = {**run.config, "run_dir": str(run.run_dir.resolve())}  # where metrics.jsonl and the checkpoint are
        self.run, self.mode = start_wandb(
            self.mode,
            dict(
                project=project,
                entity=entity,
                group=group or run.group,
                tags=list(dict.fromkeys([*tags, *run.tags])),
                name=name or run.name,
                job_type=job_type,
                dir=str(run.run_dir),
                config=config,
                id=self.id,
                resume="allow",
            ),
            kept=f"metrics are still in {run.run_dir / METRICS}",
            init_timeout=init_timeout,
            finish_timeout=finish_timeout,
            console=str(getattr(console, "value", console)),
        )
        if self.run is not None:
            try:
                self._define_metrics()
            except Exception as e:  # noqa: BLE001 (charts against W&B's own _step then; the run goes on)
                log.warning("W&B refused the metric definitions (%s: %s).", type(e).__name__, _one_line(e))

    def _define_metrics(self) -> None:
        """Charts against lnbench's own step (not W&B's _step), with epoch, samples and seconds as other
        x axes; a val metric's summary is its min (every lnbench metric is lower-is-better, lnbench.training.tasks)
        and its last value. Test values go into the summary as they are (finish), plain numbers."""
        r = self.run
        r.define_metric("step")
        for axis in AXES[1:]:
            r.define_metric(axis, step_metric="step", hidden=True)
        r.define_metric("train/*", step_metric="step")
        r.define_metric("val/*", step_metric="step", summary="min,last")
        for section in ("test/*", "test_at_len/*"):
            r.define_metric(section, step_metric="step", summary="none")

    @property
    def folder(self) -> str | None:
        return None if self.run is None else self.run.dir.rsplit("/files", 1)[0]

    @property
    def where(self) -> str | None:
        if self.run is None:
            return None
        if self.mode == "offline":
            return f"{self.folder} (offline; upload later with `{self.sync_command}`)"
        return self.run.url

    @property
    def sync_command(self) -> str:
        """Uploads every offline folder of this run (a resumed run has one per segment, suffixed -1, -2, ...
        when two start in the same second), oldest first."""
        return f"wandb sync {shlex.quote(str(self.run_dir))}/wandb/offline-run-*-{self.id}*"

    def log(self, record: dict[str, Any]) -> None:
        if self.run is None or self.failed:
            return
        step = record["step"]
        try:
            self.run.log(sections(record), step=step)
        except Exception as e:  # noqa: BLE001 (W&B must never cost a run)
            self.failed = True
            log.warning(
                "W&B failed at step %d (%s: %s); the run goes on and metrics.jsonl keeps every step. The W&B "
                "run has the steps before; its files are in %s (`wandb sync` uploads them).",
                step,
                type(e).__name__,
                _one_line(e),
                self.folder,
            )

    def state(self) -> dict[str, Any]:
        return {"id": self.id}

    def finish(self, summary: dict[str, Any]) -> None:
        """The summary as flat keys (test_at_len/80/mse, provenance/torch_version, ...). An interrupted run
        is marked preempting, not failed: it continues as the same W&B run, and its last segment's
        status is the one W&B keeps."""
        if self.run is None:
            return
        status = summary.get("status")
        try:
            if not self.failed:
                self.run.summary.update(wandb_summary(summary))
                if status == "interrupted":
                    self.run.mark_preempting()
            self.run.finish(exit_code=0 if status == "completed" else 1)
        except Exception as e:  # noqa: BLE001 (W&B must never cost a run)
            log.warning(
                "W&B did not finish cleanly (%s: %s); its files are in %s (`wandb sync` uploads them).",
                type(e).__name__,
                _one_line(e),
                self.folder,
            )


AXES = ("step", "epoch", "samples", "time")


def sections(record: dict[str, Any]) -> dict[str, Any]:
    """A metrics.jsonl record as W&B history: each split a section of its own (train/loss, val/mse), the
    x axes as they are, numbers only. A test at another length gets its own keys (test_at_len/80/mse),
    since values logged twice at one step overwrite each other."""
    n = record.get("eval_seq_len")
    section = f"test_at_len/{n}" if n is not None else record["split"]
    return {k if k in AXES else f"{section}/{k}": v for k, v in record.items() if k not in ("split", "eval_seq_len")}


def start_wandb(
    mode: str, init: dict[str, Any], kept: str, init_timeout: float, finish_timeout: float, console: str = "off"
) -> tuple[Any, str]:
    """(run, mode it runs in): wandb.init with lnbench's timeouts, falling back from online to offline,
    and to (None, mode) -- local files only, which `kept` names for the log -- when W&B cannot start.

    console: what the Logs tab gets. "wrap" copies what the process writes through sys.stdout/sys.stderr (the
    log lines, the end-of-run block), offline too (files/output.log); "redirect" (dup'ed file descriptors, which
    forked sweep workers inherit) is not offered: lnbench.config.schema.WandbConsole (docs/logging.md)."""
    try:
        import wandb  # noqa: PLC0415 (W&B: only where its sink runs)
    except Exception as e:  # noqa: BLE001 (a broken install raises anything: W&B must never cost a run)
        log.warning("W&B cannot be imported (%s: %s); %s.", type(e).__name__, e, kept)
        return None, mode
    timeouts = dict(init_timeout=init_timeout, login_timeout=init_timeout, finish_timeout=finish_timeout)
    timeouts["console"] = console
    try:
        return wandb.init(**init, mode=mode, settings=wandb.Settings(**timeouts, silent=True)), mode
    except Exception as e:  # noqa: BLE001 (W&B must never cost a run: go on offline, or with local files only)
        reason = f"{type(e).__name__}: {_one_line(e)}"
    if mode == "online":
        try:
            wandb.teardown()  # forget the failed online attempt, which still holds the run id
            run = wandb.init(**init, mode="offline", settings=wandb.Settings(**timeouts, silent=True))
            folder = run.dir.rsplit("/files", 1)[0]
            log.warning(
                "W&B could not go online (%s); logging offline instead: %s (upload later with `wandb sync %s`).",
                reason,
                folder,
                folder,
            )
            return run, "offline"
        except Exception as e:  # noqa: BLE001 (as above)
            reason += f"; offline: {type(e).__name__}: {_one_line(e)}"
    log.warning("W&B did not start (%s); %s.", reason, kept)
    return None, mode


def wandb_summary(summary: dict[str, Any]) -> dict[str, Any]:
    """summary.json flattened with '/' (W&B's own separator for metric sections), ms/step added; where
    the W&B run is stored is left out (it is the run itself)."""
    flat: dict[str, Any] = {}

    def put(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                put(f"{prefix}/{k}" if prefix else str(k), v)
        elif value is not None:
            flat[prefix] = value

    put("", {k: v for k, v in summary.items() if k != "wandb"})
    if isinstance(summary.get("time_per_step"), (int, float)):
        flat["ms_per_step"] = round(summary["time_per_step"] * 1000, 3)
    return flat


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())[:300]


def start_page_run(
    wb: Any, *, group: str, job_type: str, name: str, folder: Path, config: dict, kept: str
) -> tuple[Any, str]:
    """A W&B run that carries pages (a sweep's report, `lnbench check`'s pages), with the logger config `wb`
    (logger.wandb) of the runs it reports on; `kept` says where the pages stay if W&B cannot start."""
    init = dict(
        project=wb.project,
        entity=wb.entity,
        group=group,
        job_type=job_type,
        name=name,
        tags=list(wb.tags),
        dir=str(folder),
        config=config,
    )
    mode = str(getattr(wb.mode, "value", wb.mode))
    return start_wandb(mode, init, kept=kept, init_timeout=wb.init_timeout, finish_timeout=wb.finish_timeout)


def finish_page_run(run: Any, mode: str) -> str:
    """Ends a page run and W&B's core with it (the sweep or check is over: everything written, then stopped);
    returns where the run is: its URL, or its folder when offline."""
    import wandb  # noqa: PLC0415 (W&B: only where its sink runs)

    where = run.url if mode != "offline" else f"{run.dir.rsplit('/files', 1)[0]} (offline)"
    run.finish()
    wandb.teardown()
    return where
