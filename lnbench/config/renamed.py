"""Keys that moved, and where to. What users typed before still works: `lnbench train` rewrites the old
key to the new one before Hydra sees it, and says so once per key on stderr.

An old key maps to a new key (`a.b=1` -> `c.d=1`), or to a config group (`optim.schedule=cosine` ->
`schedule=cosine`), since Hydra selects a group with the same `key=value` syntax.
"""

from __future__ import annotations

import sys

RENAMED: dict[str, str] = {
    # The optimizer group holds the optimizer's own arguments only; how the loop schedules and clips moved out.
    "optim.schedule": "schedule",  # a group of torch schedulers now: constant, cosine, linear
    "optim.warmup_steps": "schedule.warmup_steps",
    "optim.clip_grad_norm": "clip_grad_norm",
}


def rewrite(overrides: list[str], renamed: dict[str, str] | None = None) -> tuple[list[str], list[str]]:
    """(the overrides with each old key replaced by its new one, one note per replaced key). The prefixes
    `+`, `++` and `~` and sweeps (`a=1,2`) pass through unchanged."""
    renamed = RENAMED if renamed is None else renamed
    out, notes = [], []
    for o in overrides:
        prefix = o[: len(o) - len(o.lstrip("+~"))]
        key, eq, value = o[len(prefix) :].partition("=")
        new = renamed.get(key)
        if new is None:
            out.append(o)
            continue
        out.append(f"{prefix}{new}{eq}{value}")
        note = f"{key} is now {new}; the old name still works"
        if note not in notes:
            notes.append(note)
    return out, notes


def rewrite_and_say(overrides: list[str]) -> list[str]:
    """rewrite, with the notes on stderr (Hydra has not set up logging yet)."""
    new, notes = rewrite(overrides)
    for note in notes:
        print(f"lnbench: note: {note}.", file=sys.stderr)
    return new


# logger: one entry per metric sink (lnbench.training.sinks, conf/logger/); W&B's keys moved under logger.wandb.
RENAMED.update(
    {
        f"logger.{key}": f"logger.wandb.{key}"
        for key in ("mode", "project", "entity", "group", "tags", "name", "init_timeout", "finish_timeout", "report")
    }
)
