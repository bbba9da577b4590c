"""Where metrics go: metrics.jsonl and summary.json in the run directory always, Weights & Biases when
enabled, and the console (a rich progress bar on a TTY, plain log lines otherwise).

W&B is a guest here: if it cannot start or fails mid-run, the run goes on with its local files and the
log says how to sync later. It is imported only when enabled (its import costs seconds).
"""
from __future__ import annotations

import json
import logging
import os
import re
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
    """The W&B run, resumed by id (`resume="allow"`), so a resumed lnbench run appends to the same one,
    under the same name.

    Nothing W&B does may stop or hang the run: init and finish are bounded by logger.init_timeout and
    logger.finish_timeout; an online run that cannot reach the server (no network, no key) logs offline
    instead, to be uploaded later with `wandb sync`; a failure mid-run turns W&B off and says so.
    """

    def __init__(self, cfg: DictConfig, run_dir: Path, name: str, group: str | None, tags: list[str], run_id: str):
        self.run, self.id, self.failed, self.run_dir = None, run_id, False, run_dir
        self.mode = str(getattr(cfg.logger.mode, "value", cfg.logger.mode))
        if self.mode == "disabled":
            return
        config = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
        config["run_dir"] = str(run_dir.resolve())  # where metrics.jsonl and the checkpoint are
        self.run, self.mode = start_wandb(cfg.logger, self.mode, dict(
            group=cfg.logger.group or group,
            tags=list(dict.fromkeys([*cfg.logger.tags, *tags])),
            name=cfg.logger.name or name,
            job_type="train",
            dir=str(run_dir),
            config=config,
            id=run_id,
            resume="allow",
        ), kept=f"metrics are still in {run_dir / 'metrics.jsonl'}")
        if self.run is not None:
            try:
                self._define_metrics()
            except Exception as e:  # charts against W&B's own _step then; the run goes on
                log.warning("W&B refused the metric definitions (%s: %s).", type(e).__name__, _one_line(e))

    def _define_metrics(self) -> None:
        """Charts against lnbench's own step (not W&B's _step), with epoch, samples and seconds as other
        x axes; a val metric's summary is its min (every lnbench metric is lower-is-better, lnbench.tasks)
        and its last value. Test values go into the summary as they are (finish), plain numbers."""
        r = self.run
        r.define_metric("step")
        for axis in ("epoch", "samples", "time"):
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
        return f"wandb sync {self.run_dir}/wandb/offline-run-*-{self.id}*"

    def log(self, record: dict[str, Any], step: int) -> None:
        if self.run is None or self.failed:
            return
        try:
            self.run.log(record, step=step)
        except Exception as e:
            self.failed = True
            log.warning(
                "W&B failed at step %d (%s: %s); the run goes on and metrics.jsonl keeps every step. The W&B "
                "run has the steps before; its files are in %s (`wandb sync` uploads them).",
                step, type(e).__name__, _one_line(e), self.folder,
            )

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
        except Exception as e:
            log.warning("W&B did not finish cleanly (%s: %s); its files are in %s (`wandb sync` uploads them).", type(e).__name__, _one_line(e), self.folder)


def start_wandb(logger: DictConfig, mode: str, init: dict[str, Any], kept: str) -> tuple[Any, str]:
    """(run, mode it runs in): wandb.init with lnbench's timeouts, falling back from online to offline,
    and to (None, mode) -- local files only, which `kept` names for the log -- when W&B cannot start."""
    try:
        import wandb
    except Exception as e:
        log.warning("W&B cannot be imported (%s: %s); %s.", type(e).__name__, e, kept)
        return None, mode
    timeouts = dict(init_timeout=logger.init_timeout, login_timeout=logger.init_timeout, finish_timeout=logger.finish_timeout)
    try:
        return wandb.init(**init, mode=mode, settings=wandb.Settings(**timeouts, console="off", silent=True)), mode
    except Exception as e:  # W&B must never cost a run: go on offline, or with local files only
        reason = f"{type(e).__name__}: {_one_line(e)}"
    if mode == "online":
        try:
            wandb.teardown()  # forget the failed online attempt, which still holds the run id
            run = wandb.init(**init, mode="offline", settings=wandb.Settings(**timeouts, console="off", silent=True))
            folder = run.dir.rsplit("/files", 1)[0]
            log.warning("W&B could not go online (%s); logging offline instead: %s (upload later with `wandb sync %s`).", reason, folder, folder)
            return run, "offline"
        except Exception as e:
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


class Console:
    """A rich progress bar with the live loss on a TTY, val lines kept above it; log lines otherwise.

    While the bar is live, rich routes sys.stdout/sys.stderr through itself so that printed lines land
    above the bar. Logging handlers hold the streams they were made with, so their lines would tear the
    bar: their streams are pointed at rich's for as long as the bar is live (rich's own RichHandler
    would replace Hydra's log format and its train.log handler, which is why it is not used).
    """

    def __init__(self, total: int, enabled: bool | None, start: int = 0):
        self.enabled = sys.stdout.isatty() if enabled is None else enabled
        self.progress, self._swapped = None, []
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
        # In W&B each split is a section of its own; a test at another length gets its own keys, since
        # values logged twice at one step overwrite each other.
        section = f"test_at_len/{extra['eval_seq_len']}" if "eval_seq_len" in extra else split
        axes = {k: v for k, v in record.items() if k in ("step", "epoch", "samples", "time")}
        extras = {f"{split}/{k}": v for k, v in extra.items() if k not in axes and k != "eval_seq_len"}
        self.wandb.log({**axes, **extras, **{f"{section}/{k}": v for k, v in values.items()}}, step=step)

    def show(self, step: int, text: str, line: bool = False) -> None:
        self.console.update(step, text, line)

    def finish(self, summary: dict[str, Any]) -> None:
        self.console.close()
        self.metrics.close()
        write_json(self.run_dir / "summary.json", summary)
        self.wandb.finish(summary)


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
    from hydra.types import RunMode

    swept = None
    if hydra_cfg.mode == RunMode.MULTIRUN:
        swept = swept_keys(hydra_cfg.sweep.dir, OmegaConf.select(hydra_cfg, "sweeper.params"))
    return run_name(hydra_cfg.runtime.choices.get("model", "run"), list(hydra_cfg.overrides.task), swept)


def swept_keys(sweep_dir: str, preset_axes: Any) -> set[str]:
    """The keys a sweep varies: its preset's axes (hydra.sweeper.params) unless the command line sets
    one to a single value, and the command line's sweeps (a,b / range() / choice()), read from the
    multirun.yaml Hydra writes when the sweep starts (a job sees only its own values), parsed by
    Hydra's own override parser."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    keys = set(preset_axes or {})
    try:
        given = OverridesParser.create().parse_overrides(list(OmegaConf.load(Path(sweep_dir) / "multirun.yaml").hydra.overrides.task))
    except Exception:  # no multirun.yaml (a launcher that writes none): the preset's axes only
        return keys
    return (keys - {o.key_or_group for o in given if not o.is_sweep_override()}) | {o.key_or_group for o in given if o.is_sweep_override()}


def run_group(experiment: str | None, sweep_dir: str) -> str:
    """'seq_len_sweep 2026-11-22 13:05:01': the experiment preset and the sweep's start, read from its
    directory (outputs/multirun/<date>/<time>), which every job of the sweep shares."""
    path = Path(sweep_dir)
    stamp = re.fullmatch(r"(\d\d)-(\d\d)-(\d\d)(-\d+)?", path.name)
    if stamp and re.fullmatch(r"\d{4}-\d\d-\d\d", path.parent.name):
        when = f"{path.parent.name} {stamp[1]}:{stamp[2]}:{stamp[3]}"
    else:
        when = path.name
    what = (experiment or "sweep").strip("[]").replace(",", "+")
    return f"{what} {when}"


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
    lines = [
        f"run {summary.get('status')}: {summary.get('steps')} steps in {summary.get('wall_time', 0):.1f} s"
        + (f", {ms * 1000:.3g} ms/step" if ms else ""),
    ]
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
    again = summary.get("status") == "interrupted"
    lines.append(f"  next       lnbench {f'train resume={run_dir}' if again else f'report {run_dir}'}")
    return "\n".join(lines)
