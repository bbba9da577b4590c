"""metrics.jsonl: the run's own record of every logged value, one JSON object per line."""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from lnbench.config.choices import RECORD_SINK
from lnbench.runs import METRICS
from lnbench.training.sinks import RunInfo

log = logging.getLogger("lnbench")
FILE = METRICS
KEY = RECORD_SINK  # its name among the sinks (its state in a checkpoint)


class MetricsJsonl:
    """One JSON object per line, flushed as written, so a killed run keeps every line but the last.

    A resumed run first cuts the file to the size it had at the checkpoint: the lines logged after it
    (and a line torn by the kill) are dropped, since the resumed run logs those steps again. Where the file has
    lost bytes below that size (a copy cut short, a full disk), it is cut to its last whole line instead, so the
    lines appended next start on a line of their own.
    """

    def __init__(self, *, run: RunInfo, resume: dict[str, Any] | None):
        self.path = run.run_dir / FILE
        keep_bytes = (resume or {}).get("bytes")
        if keep_bytes is not None:
            size = self.path.stat().st_size if self.path.exists() else 0
            if size < keep_bytes:
                log.warning(
                    "%s has %d bytes, fewer than the %d it had at the checkpoint: lines are missing.",
                    self.path,
                    size,
                    keep_bytes,
                )
            cut = whole_lines(self.path, min(size, keep_bytes))
            if cut < size:
                os.truncate(self.path, cut)
        self._f = open(self.path, "ab")
        self.where = str(self.path)

    def log(self, record: dict[str, Any]) -> None:
        self._f.write((json.dumps(record) + "\n").encode())  # one write per line
        self._f.flush()

    def state(self) -> dict[str, Any]:
        """Bytes written so far: where a resume from a checkpoint taken now cuts the file."""
        return {"bytes": self._f.tell()}

    def finish(self, summary: dict[str, Any]) -> None:
        self._f.close()


def whole_lines(path: os.PathLike, size: int) -> int:
    """The length of the file's first `size` bytes without a last line cut off: up to its last newline."""
    if size == 0:
        return 0
    with open(path, "rb") as f:
        end = size
        while end > 0:
            start = max(0, end - 65536)
            f.seek(start)
            chunk = f.read(end - start)
            newline = chunk.rfind(b"\n")
            if newline >= 0:
                return start + newline + 1
            end = start
    return 0
