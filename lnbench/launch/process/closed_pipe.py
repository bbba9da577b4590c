"""stdout that a closed reader ends quietly: `lnbench status DIR | head -1`, `lnbench train ... | head`."""

from __future__ import annotations

import os
import sys


class QuietWhenClosed:
    """stdout that a closed reader ends quietly (`lnbench status DIR | head -1`): at the first write to a pipe whose
    reader has gone, the rest goes to /dev/null; no BrokenPipeError traceback, no "Exception ignored" at exit, and
    a run goes on (its log is in train.log). Everything else is the stream's own."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._to_devnull()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._to_devnull()

    def _to_devnull(self) -> None:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, self._stream.fileno())
        os.close(null)
        try:
            self._stream.flush()  # what the closed pipe refused goes to /dev/null now
        except (OSError, ValueError):
            pass

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def quiet_when_closed() -> None:
    """Every command's stdout (each sweep job's process too: lnbench.launch.entry.Job)."""
    if not isinstance(sys.stdout, QuietWhenClosed) and sys.stdout is not None:
        sys.stdout = QuietWhenClosed(sys.stdout)
