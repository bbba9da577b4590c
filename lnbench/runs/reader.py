"""What a run directory says about its run (a Run: config, overrides, metrics, summary, whether it is still
running), read from files alone: a report needs no network and works on a sweep that is still running.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Iterable

import yaml

from lnbench.atomic import read_jsonl
from lnbench.config.choices import Stage
from lnbench.config.presets import Sweep
from lnbench.runs.files import (
    CHECKPOINT,
    CONFIG,
    HYDRA_CONFIG,
    HYDRA_RECORD,
    INTERPOLATION,
    LOCK,
    METRICS,
    MULTIRUN,
    NOT_RECORDED,
    OVERRIDES,
    SKIP_DIRS,
    SUMMARY,
    config_from_checkpoint,
    read_summary,
)
from lnbench.runs.lock import lock_state


@dataclass
class Run:
    path: Path
    name: str  # the directory relative to the report's root (a single run: its folder's name), prefixed by its source
    overrides: dict[str, str] = field(default_factory=dict)
    choices: dict[str, str] = field(default_factory=dict)  # config group -> chosen preset
    config: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    records: list[dict[str, Any]] = field(default_factory=list)
    unreadable: int = 0  # lines of metrics.jsonl that are no record (torn by a kill, or damaged): skipped
    source: str | None = None  # which of several report directories the run came from (the pseudo-key `dir`)
    running: bool = False  # a live process holds the run's lock
    lock_seen: bool = False  # whether `running` is known from its lock (not on another machine, not missing)

    @property
    def status(self) -> str:
        if self.running or self.summary.get("status") == "running":
            return "running"
        if "status" in self.summary:
            return str(self.summary["status"])
        return "incomplete" if self.records else "not started"  # killed, or never ran

    @property
    def stage(self) -> Stage:
        """Its part in a tuned comparison (the `stage` key): tune, widen or judge."""
        return Stage.of(self.value("stage"))

    @property
    def trained(self) -> bool:
        """Whether the run got as far as logging a metric (else it has nothing to draw)."""
        return bool(self.records)

    @property
    def primary(self) -> str:
        """The metric the run ranks by: its summary says; a running run has none yet, so the one rule
        (primary_of) is applied to the names it logged."""
        if self.summary.get("primary_metric"):
            return self.summary["primary_metric"]
        return primary_of(self.metrics("val") | self.metrics("train"))

    def value(self, key: str) -> Any:
        """The run's value of a config key: as overridden, else its group choice, else from its config.
        An interpolation (`${oc.env:...}`) is replaced by the value the run resolved (see `resolved`)."""
        if key == SOURCE_KEY:
            return self.source
        if key in self.overrides:
            value = parse_scalar(self.overrides[key])
        elif key in self.choices:
            value = self.choices[key]
        else:
            value = lookup(self.config, key)
        if isinstance(value, str) and INTERPOLATION in value:
            found = lookup(self.resolved, key)
            if found is None and "oc.env" not in value:  # ${seed}, ${lnbench.epochs:...}: the config alone fixes them
                found = self._resolve_here(key)
            return NOT_RECORDED if found is None or isinstance(found, dict) else found
        # a list or mapping as compact JSON text, as an override of it reads: hashable, so runs group by it
        return json.dumps(value, sort_keys=True, separators=(",", ":")) if isinstance(value, (dict, list)) else value

    def _resolve_here(self, key: str) -> Any:
        """A value resolved from the job's own config (Hydra's config.yaml, overrides applied), for
        interpolations that read nothing outside it (the caller leaves ${oc.env:...} alone: this process's
        environment is not the job's)."""
        try:
            from omegaconf import OmegaConf  # noqa: PLC0415 (Hydra: interpolations only)

            import lnbench.config.schema  # noqa: F401, PLC0415 (its resolvers; as above)

            return OmegaConf.select(OmegaConf.create(self.config), key)
        except Exception:  # noqa: BLE001 (a key the config lacks, a resolver this version does not have)
            return None

    def see_lock(self) -> None:
        """Looks at the run's lock again: a live process holds it (running), or is known not to."""
        state = lock_state(self.path / LOCK)
        self.running, self.lock_seen = state is True, state is not None

    def has(self, key: str) -> bool:
        return (
            key == SOURCE_KEY
            and self.source is not None
            or key in self.overrides
            or key in self.choices
            or lookup(self.config, key) is not None
        )

    @cached_property
    def resolved(self) -> dict[str, Any]:
        """The config as the run resolved it when it started (config.yaml; Hydra's `.hydra/config.yaml` keeps
        interpolations as written). Read only when an interpolation has to be shown."""
        written = _load_yaml(self.path / CONFIG)
        return written if isinstance(written, dict) else config_from_checkpoint(self.path / CHECKPOINT)

    def points(self, split: str, metric: str, x: str) -> dict[int, tuple[float, float]]:
        """step -> (x, metric) of every finite logged value of one split."""
        out = {}
        for r in self.records:
            if r.get("split") == split and _finite(r.get(metric)) and _finite(r.get(x)):
                out[int(r["step"])] = (float(r[x]), float(r[metric]))
        return out

    def final_val(self, metric: str) -> float | None:
        """The last logged validation value of `metric`, else the summary's (a run whose log was cut short)."""
        pts = self.points("val", metric, "step")
        if pts:
            return pts[max(pts)][1]
        return (self.summary.get("final_val") or {}).get(metric)

    def metrics(self, split: str = "val") -> set[str]:
        """The metric names the run logged for a split (and its summary's final values)."""
        names = {k for r in self.records if r.get("split") == split for k, v in r.items() if _finite(v)}
        names |= set((self.summary.get(f"final_{split}") or {}))
        return names - RECORD_AXES


# The pseudo-key naming the directory a run came from when a report compares several.
SOURCE_KEY = "dir"
# Fields of a metrics.jsonl record that are not metrics.
RECORD_AXES = {"step", "epoch", "samples", "time", "lr", "eval_seq_len"}


# The metric a run ranks by (lower is better) is the first of these its task computes: mse (regression), bound
# (a generative model's), bpc (characters), error (classes). The one rule, for a live run (lnbench.training.tasks)
# and for a run read from its files while it is still running (Run.primary), so the two never disagree.
PRIMARY_METRICS = ("mse", "bound", "bpc", "error")


def primary_of(metric_names: Iterable[str]) -> str:
    names = set(metric_names)
    return next((m for m in PRIMARY_METRICS if m in names), "loss")


def lookup(config: dict[str, Any], key: str) -> Any:
    node: Any = config
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def parse_scalar(text: str) -> Any:
    """'4' -> 4, '0.1' -> 0.1, '1e-3' -> 0.001 (as Hydra reads it; YAML 1.1 would keep it text), 'ln_mlp' ->
    'ln_mlp': so numeric axes sort as numbers and runs typed 1e-3 and 0.001 share a value."""
    if NUMBER.fullmatch(text.strip()):
        return float(text)
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    return value if isinstance(value, (int, float, str, bool)) else text


NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)[eE][+-]?\d+")  # exponent notation; other numbers YAML reads


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _load_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text()) if path.is_file() else None
    except (OSError, yaml.YAMLError):
        return None


def _override_pairs(lines: Iterable[str]) -> dict[str, str]:
    """Hydra's override strings as key -> value, without hydra.* keys and without +/++/~ prefixes."""
    pairs = {}
    for line in lines or ():
        key, sep, value = str(line).partition("=")
        key = key.lstrip("+~")
        if sep and not key.startswith("hydra"):
            pairs[key] = value
    return pairs


def find_run_dirs(root: Path) -> list[Path]:
    """Every directory under root (root included) that a job wrote into."""
    markers = (SUMMARY, METRICS, OVERRIDES)
    found = set()
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS]
        if any((here / m).is_file() for m in markers):
            found.add(here)
    return sorted(found, key=lambda p: run_order(p, root))


def run_order(path: Path, root: Path) -> list[tuple]:
    """The order runs are listed in: by their folders' names, numbers as numbers (2 before 10) and before names
    (a check's tuning jobs 0, 1, ... before its rounds widen-1, judge-1: never a number compared with a name)."""
    return [(0, int(s), "") if s.isdigit() else (1, 0, s) for s in Path(path).relative_to(root).parts]


def hydra_records(path: Path) -> tuple[dict[str, Any], list[str], dict[str, Any], str]:
    """A job's `.hydra/` record: its hydra.yaml, overrides and config ({} and [] where Hydra wrote none yet), and
    what is wrong with the first that is not what Hydra writes ("" where none is): never read as if absent."""
    read: dict[str, Any] = {}
    for name, kind in ((HYDRA_RECORD, dict), (OVERRIDES, list), (HYDRA_CONFIG, dict)):
        file = path / name
        try:
            text = file.read_text() if file.exists() else None
            value = kind() if text is None else yaml.safe_load(text)
        except (OSError, yaml.YAMLError, UnicodeDecodeError) as e:
            return {}, [], {}, f"{file} cannot be read as YAML, cut off or damaged ({' '.join(str(e).split())[:80]})"
        if text is not None and not text.endswith("\n"):  # Hydra ends each with a newline: YAML cut mid-line may parse
            return {}, [], {}, f"{file} is {'empty' if not text.strip() else 'cut off (no final newline)'}"
        choices = lookup(value, "hydra.runtime.choices") if isinstance(value, dict) else {}
        if (
            not isinstance(value, kind)
            or not isinstance(choices or {}, dict)
            or kind is list
            and not all(isinstance(o, str) and ("=" in o or o.startswith("~")) for o in value)
        ):
            want = "a mapping" if kind is dict else "a list of key=value overrides"
            shown = json.dumps(value, default=str)[:60]
            return {}, [], {}, f"{file} holds {shown}, not {want} as Hydra writes it"
        read[name] = value
    return read[HYDRA_RECORD], read[OVERRIDES], read[HYDRA_CONFIG], ""


def load_run(path: Path, root: Path, source: str | None = None) -> Run:
    hydra_cfg, overrides, config, damaged = hydra_records(path)
    choices = lookup(hydra_cfg, "hydra.runtime.choices") or {}
    rel = str(path.relative_to(root))
    rel = path.absolute().name if rel == "." else rel  # a single run: `14-02-11-123456`, never "."
    summary = read_summary(path)
    if damaged and summary.get("status") != "unreadable":
        summary = {"status": "unreadable", "error": f"{damaged}: which config the run ran is unknown"}
    run = Run(
        path=path,
        name=rel if source is None else source if path == root else f"{source}/{rel}",
        overrides=_override_pairs(overrides),
        choices={k: str(v) for k, v in choices.items() if not k.startswith("hydra")},
        config=config,
        summary=summary,
        source=source,
    )
    run.see_lock()
    if (path / METRICS).is_file():
        try:
            records, run.unreadable = read_jsonl(path / METRICS)
        except OSError:  # unreadable as a whole (permissions, a folder of that name): no metrics
            records, run.unreadable = [], 1
        run.records = [r for r in records if _is_record(r)]
        run.unreadable += len(records) - len(run.records)
    return run


def unreadable_text(lines: int) -> str:
    """What a report or `lnbench status` says of a run's metrics.jsonl lines that are no record."""
    return (
        f"{lines} line{'s' * (lines != 1)} of metrics.jsonl could not be read (cut off by a kill, or damaged) and "
        f"{'were' if lines != 1 else 'was'} skipped; the other lines are used"
    )


def _is_record(record: dict[str, Any]) -> bool:
    """A line as lnbench.training.sinks.jsonl writes it: an integer step and a split (what every reader indexes)."""
    step = record.get("step")
    return isinstance(step, int) and not isinstance(step, bool) and isinstance(record.get("split"), str)


def load_runs(root: Path, source: str | None = None) -> list[Run]:
    return [load_run(p, root, source) for p in find_run_dirs(root)]


def source_names(roots: list[Path]) -> list[str]:
    """The shortest trailing parts of each directory's path that tell them apart: a run of several
    reports is named `<that>/<job>` (sweeps of one day differ in their time, 10-02-11 vs 11-40-05)."""
    parts = [Path(os.path.abspath(r)).parts for r in roots]
    for n in range(1, max(len(p) for p in parts) + 1):
        names = ["/".join(p[-n:]) for p in parts]
        if len(set(names)) == len(names):
            return names
    return [str(r) for r in roots]  # the same directory twice


_RECORDED: dict[tuple[str, int, int], Sweep] = {}  # recorded_sweep's file read, by (path, mtime, size)


def recorded_sweep(sweep_dir: Path | str) -> Sweep:
    """The sweep as Hydra recorded it when it started (multirun.yaml: a job sees only its own values).
    Raises OSError or ValueError where there is no such record. Read once per process and file version:
    every job of a sweep names itself from it, twice (its log prefix, its run name)."""
    path = Path(sweep_dir) / MULTIRUN
    st = path.stat()
    key = (str(path.absolute()), st.st_mtime_ns, st.st_size)
    if key not in _RECORDED:
        sweep = Sweep.from_record(yaml.safe_load(path.read_text()))
        if sweep is None:
            raise ValueError(f"{path} is not Hydra's record of a sweep")
        _RECORDED.clear()  # one sweep's record kept: a process runs one sweep's jobs at a time
        _RECORDED[key] = sweep
    return _RECORDED[key]


def sweep_record_problem(sweep_dir: Path | str) -> str:
    """What is wrong with a sweep's multirun.yaml ("" where it is Hydra's record, or there is none), naming it:
    without it a sweep's jobs not started yet cannot be counted."""
    path = Path(sweep_dir) / MULTIRUN
    try:
        text = path.read_text() if path.exists() else None
        record = None if text is None else yaml.safe_load(text)
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return f"{path} cannot be read as YAML, cut off or damaged: its pending jobs are not counted"
    if text is None:
        return ""
    uncounted = "its pending jobs are not counted"
    if not text.endswith("\n"):  # as Hydra's .hydra/ files (hydra_records)
        return f"{path} is {'empty' if not text.strip() else 'cut off (no final newline)'}: {uncounted}"
    if Sweep.from_record(record) is None:
        return f"{path} holds no `hydra:` mapping, as Hydra's record of a sweep does: {uncounted}"
    return ""


def job_axes(sweep_dir: Path | str, params: Any) -> set[str]:
    """The keys a job's sweep varies, from the job's own preset axes and the command line's sweeps that
    multirun.yaml recorded (without one, as some launchers leave: the preset's axes only)."""
    own = {str(k): str(v) for k, v in (params or {}).items()}
    try:
        return Sweep(own, recorded_sweep(sweep_dir).task).swept()
    except Exception:  # noqa: BLE001 (no multirun.yaml, or one this parser cannot read: the preset's axes only)
        return set(own)


def sweep_total(root: Path) -> int | None:
    """How many jobs the sweep in `root` launches (lnbench.config.presets.Sweep, as multirun.yaml records it).
    None if there is no multirun.yaml or it cannot be expanded."""
    try:
        return len(recorded_sweep(root).jobs())
    except Exception:  # noqa: BLE001 (no record, or a sweep this parser cannot expand without the config)
        return None
