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
    """One JSON object per line, flushed as written, so a killed run keeps every line but the last."""

    def __init__(self, path: Path):
        self.path = path
        self._f = open(path, "a", buffering=1)

    def write(self, record: dict[str, Any]) -> None:
        self._f.write(json.dumps(record) + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()


class WandbSink:
    def __init__(self, cfg: DictConfig, run_dir: Path, name: str, group: str | None, tags: list[str]):
        self.run = None
        self.mode = str(getattr(cfg.logger.mode, "value", cfg.logger.mode))
        if self.mode == "disabled":
            return
        try:
            import wandb

            self._wandb = wandb
            self.run = wandb.init(
                project=cfg.logger.project,
                entity=cfg.logger.entity,
                group=cfg.logger.group or group,
                tags=list(cfg.logger.tags) + tags,
                name=cfg.logger.name or name,
                dir=str(run_dir),
                config=OmegaConf.to_container(cfg, resolve=True, enum_to_str=True),
                mode=self.mode,
                settings=wandb.Settings(init_timeout=cfg.logger.init_timeout, console="off", silent=True),
            )
        except Exception as e:  # W&B must never cost a run: go on with local files only
            log.warning("W&B did not start (%s: %s); metrics are still in %s.", type(e).__name__, e, run_dir)
            self.run = None

    @property
    def where(self) -> str | None:
        if self.run is None:
            return None
        if self.mode == "offline":
            return f"{self.run.dir.rsplit('/files', 1)[0]} (offline; upload later with `wandb sync`)"
        return self.run.url

    def log(self, record: dict[str, Any], step: int) -> None:
        if self.run is None:
            return
        try:
            self.run.log({k: v for k, v in record.items() if k != "step"}, step=step)
        except Exception as e:
            log.warning("W&B failed mid-run (%s: %s); continuing with local metrics only.", type(e).__name__, e)
            self.run = None

    def finish(self, summary: dict[str, Any], exit_code: int) -> None:
        if self.run is None:
            return
        try:
            for k, v in summary.items():
                if isinstance(v, (int, float, str)):
                    self.run.summary[k] = v
            self.run.finish(exit_code=exit_code)
        except Exception as e:
            log.warning("W&B did not finish cleanly (%s: %s).", type(e).__name__, e)


class Console:
    """A rich progress bar with the live loss on a TTY; a log line per interval otherwise."""

    def __init__(self, total: int, enabled: bool | None):
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
            self.task = self.progress.add_task("train", total=total, info="")

    def update(self, step: int, text: str, line: bool) -> None:
        if self.progress is not None:
            self.progress.update(self.task, completed=step, info=text)
        elif line:
            log.info("step %d  %s", step, text)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()


class Tracker:
    def __init__(self, cfg: DictConfig, run_dir: Path, name: str, group: str | None, tags: list[str]):
        self.run_dir = run_dir
        self.metrics = MetricsFile(run_dir / "metrics.jsonl")
        self.wandb = WandbSink(cfg, run_dir, name, group, tags)
        self.console = Console(cfg.steps, cfg.progress)
        self.start = time.perf_counter()

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


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").lower() in ("1", "true", "yes")
