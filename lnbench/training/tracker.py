"""Where metrics go: metrics.jsonl and summary.json in the run directory always, the metric sinks the
logger config chooses (W&B, metrics.csv, ...: lnbench.training.sinks), and the console (a rich progress bar on a
TTY, plain log lines otherwise). Also what a W&B user sees a run as (name, group, tags) and the
terminal's end-of-run block.
"""

from __future__ import annotations

import logging
import re
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from hydra.types import RunMode
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from lnbench.errors import resume_command
from lnbench.runs import Summary, job_axes, write_summary
from lnbench.training.progress import Pace, in_sweep
from lnbench.training.sinks import RunInfo, Sink
from lnbench.training.sinks.jsonl import KEY as RECORD_KEY
from lnbench.training.sinks.jsonl import MetricsJsonl

log = logging.getLogger("lnbench")


class Console:
    """A rich progress bar with the live loss on a TTY, val lines kept above it; log lines otherwise.

    While the bar is live, rich routes sys.stdout/sys.stderr through itself so that printed lines land
    above the bar. Logging handlers hold the streams they were made with, so their lines would tear the
    bar: their streams are pointed at rich's for as long as the bar is live (rich's own RichHandler
    would replace Hydra's log format and its train.log handler, which is why it is not used).
    """

    def __init__(self, total: int, enabled: bool | None, start: int = 0):
        # a sweep's jobs share the terminal: their bars would overwrite each other's lines (its process shows the
        # sweep's progress: lnbench.launch.sweep.progress)
        self.enabled = sys.stdout.isatty() and not in_sweep() if enabled is None else enabled
        self.progress, self._swapped = None, []
        self.pace = Pace(total, start, lines=not self.enabled)  # a line every 30 s where no bar is drawn
        if self.enabled:
            from rich.progress import (  # noqa: PLC0415 (rich's bar: on a terminal only)
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self.progress = Progress(
                TextColumn("[bold]train"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[info]}"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
            )
            out, err = sys.stdout, sys.stderr
            self.progress.start()
            self.task = self.progress.add_task("train", total=total, completed=start, info="")
            # rich redirects only when the console is a terminal
            redirected = {id(old): new for old, new in ((out, sys.stdout), (err, sys.stderr)) if new is not old}
            for h in {*logging.getLogger().handlers, *log.handlers}:
                if type(h) is logging.StreamHandler and id(h.stream) in redirected:
                    self._swapped.append((h, h.setStream(redirected[id(h.stream)])))

    def update(self, step: int, text: str, line: bool) -> None:
        """line: also a log line (val results), kept in the terminal and in train.log."""
        if self.progress is not None:
            self.progress.update(self.task, completed=step, info=text)
        if not line:
            self.pace.note(text)
        if line:
            log.info("step %d  %s", step, text)

    def close(self) -> None:
        if self.progress is not None:
            for h, stream in self._swapped:
                h.setStream(stream)
            self._swapped = []
            self.progress.stop()
            self.progress = None


class Tracker:
    """Hands each logged record to every metric sink, shows progress on the console, writes summary.json.

    The sinks are metrics.jsonl, always, and one per entry of the logger config (`logger.wandb`,
    `logger.csv`, ...: conf/logger/), each built from its own subtree (lnbench.training.sinks). A resumed run
    passes `resume`, the sinks' states its checkpoint kept (`state()`, sink_state_from_checkpoint), the
    time already spent and the step (for the progress bar).
    """

    def __init__(
        self,
        logger_cfg: Any,
        run_dir: Path,
        *,
        name: str,
        group: str | None,
        tags: list[str],
        run_config: dict[str, Any],
        steps: int,
        progress: bool | None,
        resume: dict[str, Any] | None = None,
        elapsed: float = 0.0,
        step: int = 0,
    ):
        self.run_dir = Path(run_dir)
        run = RunInfo(self.run_dir, name, group, list(tags), run_config)
        chosen = build_sinks(logger_cfg, run, resume)
        # metrics.jsonl is the run's record, not a choice: `lnbench report`, resume and `lnbench check` read
        # it, so it is written whatever the logger (logger=none included), first, and its failures are the
        # run's own. The chosen sinks are guests (_each): one that raises is turned off, the run goes on.
        self.sinks: dict[str, Sink] = {
            RECORD_KEY: MetricsJsonl(run=run, resume=None if resume is None else resume.get(RECORD_KEY, {})),
            **chosen,
        }
        self._states: dict[str, dict[str, Any]] = {}
        self.console = Console(steps, progress, step)
        self.start = time.perf_counter() - elapsed

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def log(self, split: str, step: int, values: dict[str, float], **extra: Any) -> None:
        record = {"step": step, "split": split, **extra, **values, "time": round(self.elapsed(), 4)}
        self._each("log", record, when=f"at step {step}")

    def show(self, step: int, text: str, line: bool = False) -> None:
        self.console.update(step, text, line)

    def tick(self, step: int) -> None:
        """After every step: the pace's line and its warning when due (lnbench.training.progress)."""
        self.console.pace.tick(step)

    def close_console(self) -> None:
        """Before the last log lines, so they go under the finished bar, not over it."""
        self.console.close()

    def state(self) -> dict[str, dict[str, Any]]:
        """What the checkpoint keeps to resume every sink: {sink name: its state()}. A sink turned off
        keeps the state of the last checkpoint it was in, so a resume continues it from there."""
        self._states = {**self._states, **self._each("state", when="at a checkpoint")}
        return dict(self._states)

    def where(self, key: str) -> str | None:
        """Where sink `key` (`wandb`, `csv`, ...) stores things; None if it is not on."""
        sink = self.sinks.get(key)
        return None if sink is None else getattr(sink, "where", None)

    def finish(self, summary: Summary) -> None:
        self.console.close()
        write_summary(self.run_dir, summary)
        self._each("finish", summary.as_dict(), when="at the end")

    def _each(self, method: str, *args: Any, when: str) -> dict[str, Any]:
        """{key: what `method` returned} over the sinks. metrics.jsonl's errors are the run's own; a chosen
        sink is a guest: one that raises is turned off, and the run goes on."""
        out = {}
        for key, sink in list(self.sinks.items()):
            if key == RECORD_KEY:
                out[key] = getattr(sink, method)(*args)
                continue
            try:
                out[key] = getattr(sink, method)(*args)
            except Exception as e:  # noqa: BLE001 (a failing sink is dropped, not the run)
                del self.sinks[key]
                log.warning(
                    "the metric sink logger.%s failed %s (%s: %s) and is turned off; the run goes on, "
                    "metrics.jsonl keeps every step.",
                    key,
                    when,
                    type(e).__name__,
                    " ".join(str(e).split())[:300],
                )
        return out


def build_sinks(logger_cfg: Any, run: RunInfo, resume: dict[str, Any] | None) -> dict[str, Sink]:
    """One sink per entry of the logger config with a `_target_`, made by Hydra's instantiate from that entry
    alone. Its keys were checked before the run (lnbench.config.validate.validate_logger); a sink that raises as it
    starts (a file it cannot write, a service it cannot reach) is a guest like any other: it is turned off with
    one warning, and the run goes on."""
    sinks: dict[str, Sink] = {}
    for key, node in (logger_cfg or {}).items():  # each entry a sink's config (lnbench.config.validate.validate_logger)
        try:
            make = instantiate(node, _partial_=True, _convert_="all")
            sinks[str(key)] = make(run=run, resume=None if resume is None else resume.get(key, {}))
        except Exception as e:  # noqa: BLE001 - a guest's failure, said once (README: "Where metrics go")
            e = e.__cause__ or e  # the sink's own error, not Hydra's "Error in call to target" around it
            log.warning(
                "the metric sink logger.%s could not start (%s: %s) and is turned off; the run goes on, "
                "metrics.jsonl keeps every step.",
                key,
                type(e).__name__,
                " ".join(str(e).split())[:300],
            )
    return sinks


# ---- what a W&B user sees a run as: its name, group and tags ----------------------------------
# Overrides that say where or how a run goes, not what it computes: they stay out of its name.
NOT_IN_NAME = ("hydra", "logger", "resume", "threads", "progress", "device", "model=", "+experiment", "experiment")


def run_name(model: str, overrides: list[str], swept: set[str] | None = None) -> str:
    """'ln_lstm · seq_len=50 · seed=1': the model, then each override (only the swept ones, in a sweep)
    by its last key part. The same on resume, which adds only resume= and hydra.run.dir= to the first
    overrides (and a sweep resumed in its own directory has the same axes)."""
    parts = [model]
    for o in overrides:
        key, _, value = o.lstrip("+~").partition("=")
        if not o.lstrip("+~").startswith(NOT_IN_NAME) and (swept is None or key in swept):
            parts.append(f"{key.rsplit('.', 1)[-1]}={value}")
    return " · ".join(parts)


def job_name(hydra_cfg: DictConfig) -> str:
    """run_name of a Hydra job, from its HydraConfig."""

    swept = None
    if hydra_cfg.mode == RunMode.MULTIRUN:
        swept = job_axes(hydra_cfg.sweep.dir, OmegaConf.select(hydra_cfg, "sweeper.params"))
    return run_name(hydra_cfg.runtime.choices.get("model", "run"), list(hydra_cfg.overrides.task), swept)


def run_group(experiment: str | None, sweep_dir: str) -> str:
    """'seq_len_sweep 2026-11-22 13:05:01': the experiment preset and the sweep's start, read from its
    directory (outputs/multirun/<date>/<time>), which every job of the sweep shares. A directory of another
    name is the group's name, with the preset before it unless the name holds it already (lnbench check's
    outputs/check/fig6_mnist is `fig6_mnist`, not `fig6_mnist fig6_mnist`)."""
    path = Path(sweep_dir)
    stamp = re.fullmatch(r"(\d\d)-(\d\d)-(\d\d)(-\d+)?", path.name)
    what = (experiment or "sweep").strip("[]").replace(",", "+")
    if stamp and re.fullmatch(r"\d{4}-\d\d-\d\d", path.parent.name):
        return f"{what} {path.parent.name} {stamp[1]}:{stamp[2]}:{stamp[3]}"
    return path.name if what in path.name else f"{what} {path.name}"


def sweep_group(hydra_cfg: DictConfig) -> str:
    """run_group of a Hydra sweep, from its HydraConfig. A list of presets (+experiment=[a,smoke]) is not
    among Hydra's recorded choices: it is read from the overrides."""
    experiment = hydra_cfg.runtime.choices.get("experiment")
    for o in hydra_cfg.overrides.task if experiment is None else ():
        key, _, value = o.lstrip("+~").partition("=")
        experiment = value if key == "experiment" else experiment
    return run_group(experiment, hydra_cfg.sweep.dir)


def run_tags(choices: dict[str, Any], cfg: DictConfig) -> list[str]:
    """What to filter a W&B project by: the model and dataset presets and the normalizer."""
    tags = [f"{group}={choices[group]}" for group in ("model", "dataset") if choices.get(group)]
    if (kind := OmegaConf.select(cfg, "model.norm.kind", default=None)) is not None:
        tags.append(f"norm={getattr(kind, 'value', kind)}")
    return tags


# ---- the terminal's end-of-run block ----------------------------------------------------------
def end_of_run_block(summary: dict[str, Any], run_dir: Path, primary: str) -> str:
    """What a person wants to read when a run ends: how it went, where its files are, what to run next."""

    def fmt(values: dict[str, float] | None) -> str:
        return "  ".join(f"{k} {v:.4g}" for k, v in (values or {}).items() if isinstance(v, (int, float))) or "-"

    ms = summary.get("time_per_step")
    flagged = " (flagged: its numbers are suspect)" if summary.get("flags") else ""
    lines = [
        f"run {summary.get('status')}{flagged}: {summary.get('steps')} steps in {summary.get('wall_time', 0):.1f} s"
        + (f", {ms * 1000:.3g} ms/step" if ms else ""),
    ]
    lines += [f"  flagged    {flag}" for flag in summary.get("flags") or ()]
    if summary.get("error"):
        lines.append(f"  error      {summary['error']}")
    if summary.get("diverged_at_step"):
        lines.append(f"  diverged   at step {summary['diverged_at_step']}")
    final, best = summary.get("final_val") or {}, summary.get("best_val") or {}
    if primary in final:
        lines.append(f"  val {primary:<6} final {final[primary]:.4g}  best {best.get(primary, float('nan')):.4g}")
    if summary.get("test"):
        lines.append(f"  test       {fmt(summary['test'])}")
    for n, values in (summary.get("test_at_len") or {}).items():
        lines.append(f"  test @ {n:<4}{fmt(values)}")
    lines.append(f"  files      {run_dir}  (metrics.jsonl, summary.json, train.log)")
    if summary.get("wandb"):
        lines.append(f"  W&B        {summary['wandb']}")
    # pasted into a shell: spaces and all
    again = resume_command(run_dir) if summary.get("status") == "interrupted" else None
    lines.append(f"  next       {again or shlex.join(['lnbench', 'report', str(run_dir)])}")
    return "\n".join(lines)
