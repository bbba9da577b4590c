"""What lets a killed, preempted or interrupted run continue where it was.

A checkpoint (`<run dir>/checkpoint.pt`, written atomically) holds everything the next step depends
on: model, optimizer and scheduler state, the RNG states of torch, numpy and python, the step (which
with the seed fixes the data order: a training batch is a pure function of (seed, step), see
lnbench.data.base), the loop's running values (best and last val, the unlogged window), each metric
sink's state (the bytes of metrics.jsonl that belong to it, later lines being cut off on resume; the W&B
run id; ...: lnbench.training.sinks) and the resolved config (a resume may not change what the run computes);
its keys are lnbench.runs.CheckpointKey. The rules of a resume are here: what the config may change
(`MAY_CHANGE`, `check_same_config`) and the thread count it keeps (`resumed_runtime`).

`StopSignals` turns SIGTERM (SLURM, `kill`) and SIGINT (Ctrl-C) into a request the loop answers at the
end of the step with a checkpoint; a second signal stops at once. (The run lock: lnbench.runs.lock.)
"""

from __future__ import annotations

import io
import json
import logging
import random
import signal
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lnbench import environment
from lnbench.atomic import write_bytes
from lnbench.config.renamed import RENAMED
from lnbench.config.runtime import Runtime
from lnbench.errors import ConfigError, DataError, Interrupted, resume_command
from lnbench.runs import CHECKPOINT, read_summary
from lnbench.runs import CheckpointKey as Key

FILE = CHECKPOINT
# Keys a resume may change: they decide where and how fast the run goes, not what it computes. `threads` is
# accepted and has no effect: a resume keeps the thread count its run began with (the checkpoint's "threads").
MAY_CHANGE = (
    "resume",
    "device",
    "threads",
    "threads_follow",  # only where no number depends on the thread count (lnbench.training.free_cores)
    "progress",
    "checkpoint_every",
    "logger",
    "dataset.data_dir",
    "dataset.download",
    "site",  # where the data is, who you are on W&B and SLURM (your own defaults)
    "claims",
    "tune",
    "stage",  # these three: read by `lnbench report` only, never by training
    "imports",
)  # where the user's modules are found (older checkpoints have no such key)
log = logging.getLogger("lnbench")


# ---- save and load ----------------------------------------------------------------------------
def save(run_dir: Path, state: dict[str, Any]) -> None:
    """`state` plus the RNG states, written to a temp file and renamed over the last checkpoint."""
    data = io.BytesIO()  # written by Python, not torch: a full disk is its OSError (ENOSPC), not a bare RuntimeError
    torch.save({**state, Key.RNG: rng_state(), Key.VERSION: 1}, data)
    write_bytes(run_dir / FILE, data.getbuffer())


def load(run_dir: Path, config: dict[str, Any]) -> dict[str, Any] | None:
    """The run directory's checkpoint (None if there is none), checked against the config of this attempt."""
    path = run_dir / FILE
    if not path.exists():
        return None
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 (whatever torch.load raises on a file that is not a checkpoint)
        raise DataError(
            f"{path} cannot be read as an lnbench checkpoint ({type(e).__name__}): it is damaged or not "
            f"one. Move it away to start this run from step 0, or train in a new run directory."
        ) from None
    missing = [k for k in (Key.CONFIG, Key.STEP, Key.MODEL) if not isinstance(ckpt, dict) or k not in ckpt]
    if missing or not isinstance(ckpt[Key.CONFIG], dict) or not isinstance(ckpt[Key.STEP], int):
        raise DataError(
            f"{path} is not an lnbench checkpoint: it holds {type(ckpt).__name__}"
            + (f" without {', '.join(missing)}" if isinstance(ckpt, dict) and missing else "")
            + (" whose config or step has another type" if not missing else "")
            + ". Move it away to start this run from step 0, or train in a new run directory."
        )
    check_same_config(ckpt[Key.CONFIG], config, run_dir)
    return ckpt


def restore_rng(state: dict[str, Any]) -> None:
    random.setstate((state["python"][0], tuple(state["python"][1]), state["python"][2]))
    np.random.set_state(("MT19937", np.array(state["numpy"]["key"], dtype=np.uint32), *state["numpy"]["rest"]))
    torch.set_rng_state(state["torch"])
    if state.get("cuda") and torch.cuda.is_available():
        for i, gpu in enumerate(state["cuda"][: torch.cuda.device_count()]):  # a machine with fewer GPUs: theirs
            torch.cuda.set_rng_state(gpu, i)


def rng_state() -> dict[str, Any]:
    # Plain lists and tensors only, so the checkpoint loads with torch.load(weights_only=True).
    _, key, *rest = np.random.get_state()
    return {
        "python": random.getstate(),
        "numpy": {"key": key.tolist(), "rest": [int(rest[0]), int(rest[1]), float(rest[2])]},
        "torch": torch.get_rng_state(),
        # Only where this process has used CUDA: asking an unused GPU would start a CUDA context (hundreds of MB
        # of its memory, a second or so) in every CPU run on a GPU machine; its generator is then as seeded.
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else [],
    }


def completed_summary(run_dir: Path, ckpt: dict[str, Any], steps: int) -> dict[str, Any] | None:
    """The summary of a run that already completed all its steps (so re-running a sweep skips it)."""
    summary = read_summary(run_dir)
    done = ckpt[Key.STEP] == steps and summary.get("status") == "completed" and summary.get("steps") == steps
    return summary if done else None


def resumed_runtime(runtime: Runtime, ckpt: dict[str, Any] | None, torch_count: int) -> Runtime:
    """The runtime of this attempt: a resumed run keeps the thread count it began with (its checkpoint's record;
    its config's, from versions that wrote it there), since torch's reductions round differently on other
    counts and the resumed steps must compute what the uninterrupted run would have. `torch_count`: torch's count
    as it stands, which a runtime that chose none runs on."""
    began = None if ckpt is None else ckpt.get(Key.THREADS) or ckpt[Key.CONFIG].get("threads")
    now = runtime.threads or torch_count
    if not began or began == now:
        return runtime
    log.warning(
        "threads: %d, as this run began (not %s): a resume keeps the thread count, since torch's "
        "sums round differently on another",
        began,
        now,
    )
    return runtime.with_threads(began, f"as this run began (not {now}: a resume keeps its thread count)")


def runtime_in_effect(runtime: Runtime, ckpt: dict[str, Any] | None) -> Runtime:
    """`runtime` with the count a resume keeps, set on torch; where nothing chose a count, torch's own, asked once
    here: from then on the run's count is a value, passed down (the recipe's, a packed replica's)."""
    torch_count = torch.get_num_threads()
    runtime = resumed_runtime(runtime, ckpt, torch_count)
    if not runtime.threads:
        return runtime.with_threads(torch_count)
    torch.set_num_threads(runtime.threads)
    return runtime


def check_same_config(saved: dict[str, Any], current: dict[str, Any], run_dir: Path) -> None:
    a, b = _flatten(saved), _flatten(current)
    diff = [k for k in sorted(a.keys() | b.keys()) if a.get(k, "<unset>") != b.get(k, "<unset>") and not _may_change(k)]
    if moved := [k for k in diff if k in RENAMED and k in a]:
        raise ConfigError(
            f"{run_dir} holds a checkpoint written by an older lnbench, whose config has keys that have moved "
            f"since ({', '.join(f'{k} -> {RENAMED[k]}' for k in moved)}): this version cannot continue it. "
            f"Start the run again in a new directory (the same overrides work: old keys are rewritten)."
        )
    if diff:
        shown = "; ".join(f"{k}={_show(a.get(k, '<unset>'))} there, {_show(b.get(k, '<unset>'))} now" for k in diff[:6])
        more = f" (and {len(diff) - 6} more)" if len(diff) > 6 else ""
        raise ConfigError(
            f"{run_dir} holds a run with another config: {shown}{more}. A resume continues a run exactly "
            f"as it was started: drop the differing overrides (`{resume_command(run_dir)}` reuses the "
            f"run's own), or start a new run in another directory."
        )


def _may_change(key: str) -> bool:
    return any(key == k or key.startswith(k + ".") for k in MAY_CHANGE)


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _show(v: Any) -> str:
    return json.dumps(v) if not isinstance(v, str) else v


# ---- signals ----------------------------------------------------------------------------------
class StopSignals:
    """While active, SIGTERM and SIGINT set `requested` (the signal number) instead of killing the process;
    the train loop checkpoints at the end of the step and raises Interrupted. A second signal raises at once.

    Signal handlers can only be set from the main thread; elsewhere (a launcher's worker thread) this
    does nothing and the signals keep their usual effect. A launcher may name more signals that mean "stop"
    in $LNBENCH_STOP_SIGNALS (e.g. `USR2`: lnbench.launch.slurm.launcher, for submitit's notice before a time limit).
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self, run_dir: Path):
        self.run_dir = run_dir
        self.requested: int | None = None
        self._first = 0.0
        self._previous: dict[int, Any] = {}

    # A second signal this soon after the first is the same request delivered twice (the terminal sends
    # Ctrl-C to the whole process group, and a launcher or SLURM passes it on as well), not a second ask.
    SAME_REQUEST_S = 1.0

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested is not None:  # asked twice: stop now, from the last periodic checkpoint
            if time.monotonic() - self._first < self.SAME_REQUEST_S:
                return
            raise Interrupted(signum, -1, self.run_dir)
        self.requested, self._first = signum, time.monotonic()
        log.warning(
            "%s received: writing a checkpoint at the end of this step, then stopping (send it again to stop at once).",
            signal.Signals(signum).name,
        )

    def __enter__(self) -> "StopSignals":
        if threading.current_thread() is threading.main_thread():
            for s in (*self.SIGNALS, *environment.stop_signals()):
                self._previous[s] = signal.signal(s, self._handle)
            # A sweep's job starts with them blocked (lnbench.launch.sweep.stop): one that came while it started
            # waited, and arrives now.
            self._mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, self._previous)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous:
            signal.pthread_sigmask(signal.SIG_SETMASK, self._mask)
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous.clear()
