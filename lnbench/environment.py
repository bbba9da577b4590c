"""lnbench's environment variables, in one table: each one's meaning and the values it may take, checked as
flags are before any command runs (`check`, from lnbench.cli), and read through this module by every reader.

A bad value is one paragraph naming the variable, its value and what is allowed (exit 2), not a traceback where
a reader first meets it. Set empty, a variable is as if unset (its default), except LNBENCH_CONFIG_DIR, where empty
turns the folder of your own defaults off.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from pathlib import Path

from lnbench import CONF_DIR
from lnbench.atomic import unwritable
from lnbench.errors import ConfigError

SWITCH = ("0", "1")


@dataclass(frozen=True)
class Variable:
    name: str
    meaning: str
    kind: str  # "choice" (one of `choices`), "folder", "new folder" (made if missing), "file" (appended to), "signals"
    choices: tuple[str, ...] = ()


VARIABLES = {
    v.name: v
    for v in (
        Variable("LNBENCH_DATA_DIR", "the folder of the real datasets (MNIST, Tiny Shakespeare)", "folder"),
        Variable(
            "LNBENCH_CONFIG_DIR",
            "the folder of your own defaults (local/default.yaml in it), or empty for none",
            "folder",
        ),
        Variable("LNBENCH_CACHE", "where lnbench's C++ kernels are built (default ~/.cache/lnbench)", "new folder"),
        Variable("LNBENCH_PHASES", "a file each process appends the time of its phases to (benchmarks)", "file"),
        Variable(
            "LNBENCH_STOP_SIGNALS", "more signals that make a run checkpoint and stop, as SIGTERM does", "signals"
        ),
        Variable(
            "LNBENCH_NATIVE", "lnbench's C++ kernels on the CPU: 1 (the default) or 0 (torch's ops)", "choice", SWITCH
        ),
        Variable(
            "LNBENCH_TRITON",
            "the Triton LN-LSTM on a GPU: 1 (the default), 0 (off) or interpret (with TRITON_INTERPRET=1)",
            "choice",
            (*SWITCH, "interpret"),
        ),
        Variable(
            "LNBENCH_CUDA_GRAPHS", "the Triton LN-LSTM's steps as CUDA graphs: 1 (the default) or 0", "choice", SWITCH
        ),
    )
}
UNCATCHABLE = {signal.SIGKILL, signal.SIGSTOP}


def given(name: str) -> str | None:
    """The variable's value as set (None where it is not)."""
    if name not in VARIABLES:
        raise KeyError(f"{name} is not one of lnbench's environment variables (lnbench.environment.VARIABLES)")
    return os.environ.get(name)


def value(name: str, default: str = "") -> str:
    """The variable's value, `default` where it is unset or empty."""
    return given(name) or default


def path(name: str) -> Path | None:
    """The variable's path with `~` expanded (None where it is unset or empty)."""
    raw = value(name)
    return Path(raw).expanduser() if raw else None


def stop_signals() -> tuple[signal.Signals, ...]:
    """The signals LNBENCH_STOP_SIGNALS names (`USR2` or `SIGUSR2`, comma-separated)."""
    return tuple(_signal(n) for n in value("LNBENCH_STOP_SIGNALS").split(",") if n.strip())


def _signal(name: str) -> signal.Signals:
    name = name.strip().upper()
    return signal.Signals[name if name.startswith("SIG") else f"SIG{name}"]


ALLOWED = {
    "folder": "a folder (~ or ~user for a home folder)",
    "new folder": "a folder lnbench can make and write into",
    "file": "a file in a folder lnbench can write into",
    "signals": "names of signals a process can catch, comma-separated (USR1, SIGUSR2, ...)",
}


def check() -> None:
    """Every variable that is set holds a value of its domain; else one ConfigError for the first that does not."""
    for var in VARIABLES.values():
        raw = os.environ.get(var.name)
        why = _outside(var, raw) if raw else None
        if why:
            allowed = " or ".join(var.choices) if var.kind == "choice" else ALLOWED[var.kind]
            raise ConfigError(f"{var.name}={raw} is not allowed: {why}. It is {var.meaning}; give {allowed}.")


def _outside(var: Variable, raw: str) -> str | None:
    """Why `raw` is not a value of the variable (None where it is)."""
    if var.kind == "choice":
        return None if raw in var.choices else "it is none of the values it takes"
    if var.kind == "signals":
        return _bad_signals(raw)
    try:
        where = Path(raw).expanduser()
    except RuntimeError:  # `~nobody`: Python cannot expand it
        return f"{raw.split('/')[0]} names no user of this machine"
    if var.kind == "folder":
        return f"{where} is a file, not a folder" if where.exists() and not where.is_dir() else None
    if var.kind == "new folder":
        return unwritable(where)
    if where.is_dir():
        return f"{where} is a folder"
    return unwritable(where.parent) if where.parent.is_dir() else f"{where.parent} does not exist"


def _bad_signals(raw: str) -> str | None:
    for name in (n for n in raw.split(",") if n.strip()):
        try:
            sig = _signal(name)
        except KeyError:
            return f"{name.strip()} is not a signal's name"
        if sig in UNCATCHABLE:
            return f"{sig.name} cannot be caught by any process, so it could not stop a run cleanly"
    return None


def user_conf_dir() -> Path | None:
    """The folder of your own defaults and presets (docs/install.md), which Hydra searches after CONF_DIR
    (hydra_plugins/lnbench_user_config): $LNBENCH_CONFIG_DIR, else $XDG_CONFIG_HOME/lnbench, else ~/.config/lnbench;
    None where LNBENCH_CONFIG_DIR is set empty (for tests: a developer's defaults stay out)."""
    raw = given("LNBENCH_CONFIG_DIR")  # its ~user is checked by `check`
    if raw is not None:
        return Path(raw).expanduser() if raw else None
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config").expanduser() / "lnbench"


def conf_dirs() -> list[Path]:
    """Where Hydra finds lnbench's presets, in its order (the first holding a name wins): CONF_DIR, then yours."""
    mine = user_conf_dir()
    return [CONF_DIR] + ([mine] if mine is not None and mine.is_dir() else [])
