"""Where a run's metrics go: metric sinks behind one small protocol, each chosen by a file in conf/logger/.

The logger config is {sink name: its config}; each entry with a `_target_` is built with Hydra's
instantiate from ITS OWN subtree, plus the run's identity (`RunInfo`) and what the checkpoint kept of it
(`resume`). So adding a sink is a class here (or anywhere importable) and one YAML file in conf/logger/;
the Tracker (lnbench.training.tracker) and the training loop do not change. metrics.jsonl
(lnbench.training.sinks.jsonl) is the one sink that is not chosen: the Tracker always writes it (see there why).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Protocol


@dataclass
class RunInfo:
    """What every sink may know of the run besides its own config."""

    run_dir: Path
    name: str
    group: Optional[str] = None
    tags: list[str] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)  # the run's resolved config, as plain data


class Sink(Protocol):
    """A sink is made as `Sink(run=RunInfo, resume=dict | None, **its config)`. `resume` is None for a new
    run, else what its `state()` returned at the checkpoint the run continues from ({} if the sink was not
    on then): rows logged after that checkpoint are logged again, so a sink drops any it kept."""

    where: Optional[str]  # where it stores things, for the log and summary.json (None: nowhere to show)

    def log(self, record: dict[str, Any]) -> None:
        """One record, as metrics.jsonl has it: step, split, epoch, samples, ..., metrics, time."""

    def state(self) -> dict[str, Any]:
        """Plain data (str, numbers, lists, dicts; the checkpoint loads with weights_only=True)."""

    def finish(self, summary: dict[str, Any]) -> None:
        """The run ended (any status): summary.json's content, already written."""


def sink_state_from_checkpoint(ckpt: dict[str, Any] | None) -> dict[str, dict[str, Any]] | None:
    """The sinks' states a checkpoint holds (None: no checkpoint, a new run). A checkpoint of lnbench 0.1,
    which kept them elsewhere, never gets here: its config's moved keys refuse it (lnbench.training.checkpoint)."""
    return None if ckpt is None else ckpt["sinks"]
