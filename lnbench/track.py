"""Where metrics go: metrics.jsonl and summary.json in the run directory always, Weights & Biases when
enabled, and the console (a rich progress bar on a TTY, plain log lines otherwise).

W&B is a guest here: if it cannot start or fails mid-run, the run goes on with its local files and the
log says how to sync later. It is imported only when enabled (its import costs seconds).
"""
from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from lnbench.atomic import write_json

log = logging.getLogger("lnbench")


class MetricsFile:
    """One JSON object per line, flushed as written, so a killed run keeps every line but the last.

    `keep_bytes` (a resumed run) first cuts the file to the size it had at the checkpoint: the lines
    logged after it (and a line torn by the kill) are dropped, since the resumed run logs those steps again.
    """

    def __init__(self, path: Path, keep_bytes: int | None = None):
        self.path = path
        if keep_bytes is not None:
            size = path.stat().st_size if path.exists() else 0
            if size < keep_bytes:
                log.warning("%s has %d bytes, fewer than the %d it had at the checkpoint: lines are missing.", path, size, keep_bytes)
            elif size > keep_bytes:
                os.truncate(path, keep_bytes)
        self._f = open(path, "ab")

    def write(self, record: dict[str, Any]) -> None:
        self._f.write((json.dumps(record) + "\n").encode())  # one write per line
        self._f.flush()

    def size(self) -> int:
        """Bytes written so far: where a resume from a checkpoint taken now cuts the file."""
        return self._f.tell()

    def close(self) -> None:
        self._f.close()


def new_run_id() -> str:
    """A W&B run id (8 lowercase letters and digits) that draws on no RNG the run is seeded with."""
    import secrets
    import string

    alphabet = string.ascii_lowercase + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(8))


class WandbSink:
    """The W&B run, resumed by id (`resume="allow"`), so a resumed lnbench run appends to the same one.

    Nothing W&B does may stop or hang the run: init and finish are bounded by logger.init_timeout and
    logger.finish_timeout; an online run that cannot reach the server (no network, no key) logs offline
    instead, to be uploaded later with `wandb sync`; a failure mid-run turns W&B off and says so.
    """

    def __init__(self, cfg: DictConfig, run_dir: Path, name: str, group: str | None, tags: list[str], run_id: str):
        self.run, self.id, self.failed = None, run_id, False
        self.mode = str(getattr(cfg.logger.mode, "value", cfg.logger.mode))
        if self.mode == "disabled":
            return
        try:
            import wandb
        except Exception as e:
            log.warning("W&B cannot be imported (%s: %s); metrics are still in %s.", type(e).__name__, e, run_dir)
            return
        init = dict(
            project=cfg.logger.project,
            entity=cfg.logger.entity,
            group=cfg.logger.group or group,
            tags=list(cfg.logger.tags) + tags,
            name=cfg.logger.name or name,
            dir=str(run_dir),
            config=OmegaConf.to_container(cfg, resolve=True, enum_to_str=True),
            id=run_id,
            resume="allow",
        )
        timeouts = dict(init_timeout=cfg.logger.init_timeout, login_timeout=cfg.logger.init_timeout, finish_timeout=cfg.logger.finish_timeout)
        try:
            self.run = wandb.init(**init, mode=self.mode, settings=wandb.Settings(**timeouts, console="off", silent=True))
            return
        except Exception as e:  # W&B must never cost a run: go on offline, or with local files only
            reason = f"{type(e).__name__}: {_one_line(e)}"
        if self.mode == "online":
            try:
                wandb.teardown()  # forget the failed online attempt, which still holds the run id
                self.run = wandb.init(**init, mode="offline", settings=wandb.Settings(**timeouts, console="off", silent=True))
                self.mode = "offline"
                log.warning("W&B could not go online (%s); logging offline instead: %s.", reason, self.where)
                return
            except Exception as e:
                reason += f"; offline: {type(e).__name__}: {_one_line(e)}"
        log.warning("W&B did not start (%s); metrics are still in %s.", reason, run_dir / "metrics.jsonl")

    @property
    def folder(self) -> str | None:
        return None if self.run is None else self.run.dir.rsplit("/files", 1)[0]

    @property
    def where(self) -> str | None:
        if self.run is None:
            return None
        if self.mode == "offline":
            return f"{self.folder} (offline; upload later with `wandb sync {self.folder}`)"
        return self.run.url

    def log(self, record: dict[str, Any], step: int) -> None:
        if self.run is None or self.failed:
            return
        try:
            self.run.log({k: v for k, v in record.items() if k != "step"}, step=step)
        except Exception as e:
            self.failed = True
            log.warning(
                "W&B failed at step %d (%s: %s); the run goes on and metrics.jsonl keeps every step. The W&B "
                "run has the steps before; its files are in %s (`wandb sync` uploads them).",
                step, type(e).__name__, _one_line(e), self.folder,
            )

    def finish(self, summary: dict[str, Any], exit_code: int) -> None:
        if self.run is None:
            return
        try:
            if not self.failed:
                for k, v in summary.items():
                    if isinstance(v, (int, float, str)):
                        self.run.summary[k] = v
            self.run.finish(exit_code=exit_code)
        except Exception as e:
            log.warning("W&B did not finish cleanly (%s: %s); its files are in %s (`wandb sync` uploads them).", type(e).__name__, _one_line(e), self.folder)


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())[:300]


class Console:
    """A rich progress bar with the live loss on a TTY; a log line per interval otherwise."""

    def __init__(self, total: int, enabled: bool | None, start: int = 0):
        self.enabled = sys.stdout.isatty() if enabled is None else enabled
        self.progress = None
        if self.enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

            self.progress = Progress(
                TextColumn("[bold]train"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[info]}"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
            )
            self.progress.start()
            self.task = self.progress.add_task("train", total=total, completed=start, info="")

    def update(self, step: int, text: str, line: bool) -> None:
        if self.progress is not None:
            self.progress.update(self.task, completed=step, info=text)
        elif line:
            log.info("step %d  %s", step, text)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


class Tracker:
    """A resumed run passes where its checkpoint left off: the metrics file's size, the W&B run id,
    the time already spent and the step (for the progress bar)."""

    def __init__(self, cfg: DictConfig, run_dir: Path, name: str, group: str | None, tags: list[str],
                 keep_bytes: int | None = None, run_id: str | None = None, elapsed: float = 0.0, step: int = 0):
        self.run_dir = run_dir
        self.metrics = MetricsFile(run_dir / "metrics.jsonl", keep_bytes)
        self.wandb = WandbSink(cfg, run_dir, name, group, tags, run_id or new_run_id())
        self.console = Console(cfg.steps, cfg.progress, step)
        self.start = time.perf_counter() - elapsed

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def log(self, split: str, step: int, values: dict[str, float], **extra: Any) -> None:
        record = {"step": step, "split": split, **extra, **values, "time": round(self.elapsed(), 4)}
        self.metrics.write(record)
        self.wandb.log({f"{split}/{k}" if k in values else k: v for k, v in record.items()}, step=step)

    def show(self, step: int, text: str, line: bool = False) -> None:
        self.console.update(step, text, line)

    def finish(self, summary: dict[str, Any]) -> None:
        self.console.close()
        self.metrics.close()
        write_json(self.run_dir / "summary.json", summary)
        self.wandb.finish(summary, 0 if summary.get("status") == "completed" else 1)


def run_name(overrides: list[str]) -> str:
    """A W&B run name from the command line's overrides, e.g. 'model=ln_lstm,dataset.seq_len=200'."""
    keep = [o for o in overrides if not o.startswith(("hydra", "logger."))]
    return ",".join(keep) or "default"
