"""The run directory: the names of its files, summary.json written and read in one place, and a Run, what a
directory says about its run (config, overrides, metrics, summary, whether it is still running).

Read from files alone (a report needs no network and works on a sweep that is still running): each job's
`.hydra/{overrides,config,hydra}.yaml`, `config.yaml` (the config as the run resolved it), `metrics.jsonl`,
`summary.json` and `.lock`, and a sweep's `multirun.yaml` for how many jobs it has in all.
"""

from __future__ import annotations

import json
import math
import os
import re
import socket
from dataclasses import dataclass, field, fields
from functools import cached_property
from pathlib import Path
from typing import Any, Iterable

import yaml

from lnbench.atomic import read_jsonl, write_bytes, write_json
from lnbench.config.presets import Sweep

# ---- the files of a run directory -------------------------------------------------------------
SUMMARY = "summary.json"  # how the run ended and its numbers (Summary); written when it ends, or fails to start
METRICS = "metrics.jsonl"  # every logged value, one JSON object per line (lnbench.training.sinks.jsonl)
CONFIG = "config.yaml"  # the config as the run resolved it when it started (environment variables as it saw them)
CHECKPOINT = "checkpoint.pt"  # what a resume continues from (lnbench.training.checkpoint)
CRASH_LOG = "crash.log"  # a bug's traceback, and the native one of a segfault
LOCK = ".lock"  # held by the process that runs it (lnbench.training.checkpoint.RunLock)
TRAIN_LOG = "train.log"  # Hydra's log of the job
HYDRA = ".hydra"  # Hydra's record of the job: overrides.yaml, config.yaml (as written), hydra.yaml

OUT_DIR = "report"
# Directories inside a run that hold no runs of their own.
SKIP_DIRS = {OUT_DIR, "wandb", ".submitit", HYDRA}
# Statuses of a job that has ended, whatever the outcome.
ENDED = ("completed", "diverged", "failed", "interrupted", "unreadable")
# What Hydra leaves for a value it resolves only when the job runs (${oc.env:...}, ${lnbench.epochs:...}).
INTERPOLATION = "${"
NOT_RECORDED = "(not recorded)"


@dataclass
class Run:
    path: Path
    name: str  # the directory relative to the report's root ("." for a single run), prefixed by its source
    overrides: dict[str, str] = field(default_factory=dict)
    choices: dict[str, str] = field(default_factory=dict)  # config group -> chosen preset
    config: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    records: list[dict[str, Any]] = field(default_factory=list)
    torn: bool = False
    source: str | None = None  # which of several report directories the run came from (the pseudo-key `dir`)
    running: bool = False  # a live process holds the run's lock

    @property
    def status(self) -> str:
        if self.running or self.summary.get("status") == "running":
            return "running"
        if "status" in self.summary:
            return str(self.summary["status"])
        return "incomplete" if self.records else "not started"  # killed, or never ran

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
            from omegaconf import OmegaConf

            import lnbench.config.schema  # noqa: F401 (registers the lnbench.* resolvers)

            return OmegaConf.select(OmegaConf.create(self.config), key)
        except Exception:  # a reference to a key the config lacks, a resolver this version does not have
            return None

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


def config_from_checkpoint(path: Path) -> dict[str, Any]:
    """The resolved config a checkpoint holds: the one record of it in run directories older than config.yaml."""
    if not path.is_file():
        return {}
    try:
        import torch  # only for such old runs: a report never imports torch otherwise

        # mmap: the weights are never read, only the small config beside them
        ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        return ckpt.get("config") or {}
    except Exception:  # a damaged or foreign file: nothing recorded
        return {}


def write_config(run_dir: Path, config: dict[str, Any]) -> None:
    """config.yaml: the resolved config, written when the run starts (the report reads it, never the checkpoint)."""
    write_bytes(Path(run_dir) / CONFIG, yaml.safe_dump(config, sort_keys=False).encode())


# ---- summary.json: one shape, one writer, one reader ------------------------------------------
class _Unset:
    def __repr__(self) -> str:
        return "UNSET"

    def __bool__(self) -> bool:
        return False


UNSET: Any = _Unset()  # a field the writer never set stays out of the file (None is written as null)


@dataclass
class Summary:
    """What summary.json holds. The train loop fills it as the run goes; a run that failed before its loop
    (lnbench.launch.failures) or a SLURM job that never answered (lnbench.launch.slurm) writes the few
    fields it knows. Keys this version does not know (a newer lnbench's) are kept in `extra`."""

    status: str  # running, completed, diverged, failed, interrupted
    steps: int = 0
    error: Any = UNSET  # "Type: message" of what ended a failed or interrupted run
    params: Any = UNSET
    device: Any = UNSET
    primary_metric: Any = UNSET  # what the run ranks by (primary_of)
    baseline: Any = UNSET  # a trivial predictor's loss
    threads: Any = UNSET  # the torch threads the run computed with (a resume keeps them)
    threads_followed: Any = UNSET  # threads_follow=true: steps per thread count, and when it changed
    provenance: Any = UNSET  # lnbench.training.provenance.collect
    test: Any = UNSET
    final_val: Any = UNSET
    best_val: Any = UNSET
    test_at_len: Any = UNSET  # {sequence length: test metrics}
    flags: Any = UNSET  # why a completed run's numbers are suspect
    diverged_at_step: Any = UNSET
    wall_time: Any = UNSET
    time_per_step: Any = UNSET
    eval_time: Any = UNSET
    checkpoint_time: Any = UNSET
    resumed_at: Any = UNSET  # the steps the run was resumed at
    wandb: Any = UNSET  # where its W&B run is (None: no W&B)
    slurm_job: Any = UNSET
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        return {**self.extra, **{k: v for k, v in out.items() if v is not UNSET}}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Summary":
        known = {f.name for f in fields(cls)} - {"extra"}
        return cls(
            **{k: v for k, v in data.items() if k in known and k != "extra"},
            extra={k: v for k, v in data.items() if k not in known},
        )


def write_summary(run_dir: Path, summary: Summary) -> None:
    """summary.json, written atomically (a killed writer leaves the last one whole)."""
    write_json(Path(run_dir) / SUMMARY, summary.as_dict())


def read_summary(run_dir: Path) -> dict[str, Any]:
    """A run's summary.json as a dict: {} where it left none (killed, never started), status `unreadable`
    where the file is not one (summaries are written atomically, so it is a foreign file)."""
    path = Path(run_dir) / SUMMARY
    try:
        return json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError) as e:
        return {"status": "unreadable", "error": f"{path.name}: {e}"}


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
    markers = (SUMMARY, METRICS, f"{HYDRA}/overrides.yaml")
    found = set()
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS]
        if any((here / m).is_file() for m in markers):
            found.add(here)
    return sorted(found, key=lambda p: [_natural(s) for s in p.relative_to(root).parts])


def _natural(part: str) -> tuple:
    return (0, int(part), "") if part.isdigit() else (1, 0, part)


def load_run(path: Path, root: Path, source: str | None = None) -> Run:
    hydra_dir = path / HYDRA
    hydra_cfg = _load_yaml(hydra_dir / "hydra.yaml") or {}
    choices = ((hydra_cfg.get("hydra") or {}).get("runtime") or {}).get("choices") or {}
    rel = str(path.relative_to(root))
    run = Run(
        path=path,
        name=rel if source is None else source if rel == "." else f"{source}/{rel}",
        overrides=_override_pairs(_load_yaml(hydra_dir / "overrides.yaml")),
        choices={k: str(v) for k, v in choices.items() if not k.startswith("hydra")},
        config=_load_yaml(hydra_dir / "config.yaml") or {},
        summary=read_summary(path),
        source=source,
        running=lock_held(path / LOCK),
    )
    if (path / METRICS).is_file():
        run.records, run.torn = read_jsonl(path / METRICS)
    return run


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


# ---- is it still running? ---------------------------------------------------------------------
def lock_held(path: Path) -> bool:
    """Whether a live process holds the run's lock (lnbench.training.checkpoint.RunLock flocks `<run>/.lock` for the
    run's life; the file stays after it ends). Read without taking the lock: even a moment's hold could make
    a job starting just then believe its directory is in use."""
    try:
        st = path.stat()
    except OSError:
        return False
    held = _flock_holders(st)
    if held is not None:
        return held
    return _pid_alive(path)  # no /proc/locks (not Linux): the pid the lock file names, on this host


def _flock_holders(st: os.stat_result) -> bool | None:
    """Linux: /proc/locks lists every flock with its file's device and inode; None where it cannot be read."""
    try:
        text = Path("/proc/locks").read_text()
    except OSError:
        return None
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    return any(len(f := line.split()) > 5 and f[1] == "FLOCK" and f[5] == dev for line in text.splitlines())


def _pid_alive(path: Path) -> bool:
    try:
        _, pid, _, host = path.read_text().split()  # "pid 123 on host"
        if host != socket.gethostname().split(".")[0] and host != os.uname().nodename:
            return False
        os.kill(int(pid), 0)
        return True
    except (OSError, ValueError):
        return False


def sweep_total(root: Path) -> int | None:
    """How many jobs the sweep in `root` launches (lnbench.config.presets.Sweep, as multirun.yaml records it).
    None if there is no multirun.yaml or it cannot be expanded."""
    try:
        return len(Sweep.recorded(root).jobs())
    except (
        Exception
    ):  # no record, or a sweep this parser cannot expand without the config (glob choices, other sweepers)
        return None
