"""The files of a run directory, named once, and summary.json: one shape, one writer, one reader.

A run directory holds `.hydra/{overrides,config,hydra}.yaml` (Hydra's record of the job), `config.yaml` (the
config as the run resolved it), `metrics.jsonl`, `summary.json`, `checkpoint.pt`, `train.log`, `crash.log` and,
while it runs, `.lock`; a sweep directory holds Hydra's `multirun.yaml`. Every other module names these files
through the constants here.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable

import yaml

from lnbench.atomic import write_bytes, write_json

SUMMARY = "summary.json"  # how the run ended and its numbers (Summary); written when it ends, or fails to start
METRICS = "metrics.jsonl"  # every logged value, one JSON object per line (lnbench.training.sinks.jsonl)
CONFIG = "config.yaml"  # the config as the run resolved it when it started (environment variables as it saw them)
CHECKPOINT = "checkpoint.pt"  # what a resume continues from (lnbench.training.checkpoint)
CRASH_LOG = "crash.log"  # a bug's traceback, and the native one of a segfault
LOCK = ".lock"  # held by the process that runs it (lnbench.runs.lock.RunLock)
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
MULTIRUN = "multirun.yaml"  # Hydra's record of a sweep, in the sweep's directory (lnbench.runs.reader.recorded_sweep)
STOPPED = ".stopped"  # a sweep's stop mark, in the sweep's directory (lnbench.launch.sweep.stop)
CHECK_RECORD = ".check.json"  # lnbench check's record in its --out: its command, its process, how it ended
# Inside HYDRA:
OVERRIDES = f"{HYDRA}/overrides.yaml"
HYDRA_CONFIG = f"{HYDRA}/config.yaml"
HYDRA_RECORD = f"{HYDRA}/hydra.yaml"


class CheckpointKey:
    """The keys of the dict checkpoint.pt holds (lnbench.training.checkpoint writes and checks it; the recipe fills
    it). Plain strings, not an Enum: torch.load(weights_only=True) reads no class of ours."""

    STEP = "step"  # the steps done, which with the seed fix the data order
    MODEL, OPTIMIZER, SCHEDULER = "model", "optimizer", "scheduler"  # their state_dicts
    RNG = "rng"  # torch's, numpy's and python's generators (and CUDA's)
    BEST, VAL, WINDOW = "best", "val", "window"  # the loop's best and last val metrics, its unlogged steps
    SINKS = "sinks"  # each metric sink's state (lnbench.training.sinks)
    ELAPSED = "elapsed"  # the run's wall time so far
    RESUMED_AT = "resumed_at"  # the steps the run was resumed at
    CONFIG = "config"  # the resolved config, which a resume may not change
    KERNELS = "kernels"  # what ran the recurrence (lnbench.models.sequence), which decides the last bits
    THREADS = "threads"  # the thread count the run began with, which a resume keeps
    VERSION = "version"


def config_from_checkpoint(path: Path) -> dict[str, Any]:
    """The resolved config a checkpoint holds: the one record of it in run directories older than config.yaml."""
    if not path.is_file():
        return {}
    try:
        import torch  # noqa: PLC0415 (torch: old runs only; reports run without)

        # mmap: the weights are never read, only the small config beside them
        ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        return ckpt.get(CheckpointKey.CONFIG) or {}
    except Exception:  # noqa: BLE001 (a damaged or foreign file, whatever torch.load raises: nothing recorded)
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
    (lnbench.launch.failures) or a SLURM job that never answered (lnbench.launch.slurm.launcher) writes the few
    fields it knows. Keys this version does not know (a newer lnbench's) are kept in `extra`."""

    status: str  # running, completed, diverged, failed, interrupted
    steps: int = 0
    error: Any = UNSET  # "Type: message" of what ended a failed or interrupted run
    params: Any = UNSET
    device: Any = UNSET
    primary_metric: Any = UNSET  # what the run ranks by (primary_of)
    baseline: Any = UNSET  # a trivial predictor's loss
    threads: Any = UNSET  # the torch threads the run computed with (a resume keeps them)
    threads_followed: Any = UNSET  # where the count followed the free cores: steps per count, and when it changed
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
    where the file is not one, or a field of it has another type than Summary's writer gives it (summaries are
    written atomically, so it is a damaged or foreign file): its error names the file and what is wrong."""
    path = Path(run_dir) / SUMMARY
    if not path.exists():
        return {}
    data, problem = read_json_record(path, summary_problem)
    if problem:
        return {"status": "unreadable", "error": f"{path} {problem}: the run's outcome is unknown (run it again)"}
    return data


def read_json_record(path: Path, problem_of: Callable[[Any], str]) -> tuple[Any, str]:
    """A JSON record lnbench wrote, and what is wrong with it ("" where nothing is): it cannot be read, is empty,
    is no JSON (cut off), or `problem_of` finds a field of another type than its writer gives it."""
    text = ""
    try:
        text = path.read_text()
        data = json.loads(text)
    except OSError as e:
        return None, f"cannot be read ({e.strerror or e})"
    except ValueError as e:
        return None, "is empty" if not text.strip() else f"is not JSON, cut off or damaged ({e})"
    return data, problem_of(data)


def _number(v: Any) -> bool:
    return v is None or isinstance(v, (int, float)) and not isinstance(v, bool)


def _numbers(v: Any) -> bool:
    return v is None or isinstance(v, dict) and all(map(_number, v.values()))


# summary.json's fields that readers index, and what each holds (as Summary's writers give it)
SUMMARY_FIELDS: dict[str, tuple[Any, str]] = {
    "status": (lambda v: isinstance(v, str), "text"),
    "steps": (lambda v: isinstance(v, int) and not isinstance(v, bool), "a whole number"),
    **dict.fromkeys(
        ("baseline", "wall_time", "time_per_step", "eval_time", "checkpoint_time", "diverged_at_step", "params"),
        (_number, "a number"),
    ),
    **dict.fromkeys(("test", "final_val", "best_val"), (_numbers, "an object of numbers")),
    "test_at_len": (lambda v: v is None or isinstance(v, dict) and all(map(_numbers, v.values())), "an object"),
    **dict.fromkeys(("primary_metric", "device"), (lambda v: v is None or isinstance(v, str), "text")),
    **dict.fromkeys(("flags", "resumed_at"), (lambda v: v is None or isinstance(v, list), "a list")),
    "provenance": (lambda v: v is None or isinstance(v, dict), "an object"),
}


def summary_problem(data: Any) -> str:
    """What makes `data` no summary ("" where nothing does): not an object, or the first field of another type."""
    if not isinstance(data, dict):
        return f"holds {type(data).__name__}, not an object"
    for key, (ok, want) in SUMMARY_FIELDS.items():
        if key in data and not ok(data[key]):
            return f"has `{key}`: {json.dumps(data[key])[:60]}, not {want}"
    return ""


# ---- lnbench check's record in its --out: what `lnbench status` and a sweep's end say of the check ----------
def write_check_record(out: Path, record: dict[str, Any]) -> None:
    """{"command": the `lnbench check` arguments, "pid", "host", "state": running, stopped or finished}."""
    write_json(Path(out) / CHECK_RECORD, record)


def find_check_record(folder: Path) -> tuple[Path, dict[str, Any]] | None:
    """The check whose --out holds `folder` (its --out, a preset's sweep, a round's sweep or a job of either):
    its --out and record, or None (no check's, or a record that is not one: a check is then told by its rounds)."""
    folder = Path(folder).absolute()
    for out in [folder, *list(folder.parents)[:3]]:
        path = out / CHECK_RECORD
        if not path.is_file():
            continue
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        if not (isinstance(record, dict) and isinstance(record.get("command"), list)):
            return None
        presets = record.get("presets") or []
        mine = out == folder or isinstance(presets, list) and folder.relative_to(out).parts[0] in presets
        return (out, record) if mine and all(isinstance(a, str) for a in record["command"]) else None
    return None


def check_command(record: dict[str, Any]) -> str:
    """The command that continues the check: the same `lnbench check` as it was typed."""
    return shlex.join(["lnbench", "check", *record["command"]])
