"""Files a killed run cannot leave half-written: write a temp file beside the target, then rename.

os.replace is atomic on POSIX: a reader (or a resumed run) sees the old file or the new one, never a
mix. Append-only logs (metrics.jsonl) cannot be replaced per line; a kill can tear their last line,
which `read_jsonl` skips and counts, and which a resumed run cuts off (lnbench.training.sinks.jsonl).
"""

from __future__ import annotations

import json
import os
import tempfile
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Iterator

_UMASK = os.umask(0o022)
os.umask(_UMASK)


@contextmanager
def replacing(path: str | Path) -> Iterator[Path]:
    """Yields a temp path beside `path`; when the block ends without error the temp file replaces `path`.

    The block writes the temp file (and may close it); it is fsynced before the rename and the folder
    after it, so a crash right after leaves either the old file or the complete new one.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp makes it private; give it the mode open() would
    os.close(fd)
    try:
        yield Path(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def fsync_dir(folder: str | Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems do not fsync folders; the rename is still atomic
    finally:
        os.close(fd)


def write_json(path: str | Path, obj: Any) -> None:
    write_bytes(path, json.dumps(obj, indent=2, default=str).encode())


def write_bytes(path: str | Path, data: bytes) -> None:
    with replacing(path) as tmp:
        tmp.write_bytes(data)


def write_files(folder: str | Path, files: dict[str, bytes]) -> None:
    """Several files that belong together (a report and its figures): every temp file is written first, and
    only then are they all renamed into place, so a failure while writing (a full disk) replaces none."""
    with ExitStack() as stack:
        for name, data in files.items():
            stack.enter_context(replacing(Path(folder) / name)).write_bytes(data)


def unwritable(folder: str | Path) -> str | None:
    """Why `folder` cannot be made and written into, or None: asked before a long computation whose results would
    go there. Tried, not read from permissions (root may write anywhere but where the file system refuses, e.g.
    under /proc or on a read-only mount): a probe file in the nearest folder that exists, and a probe folder
    where `folder` itself has yet to be made. Nothing is left behind."""
    probe = Path(folder).absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        return f"{probe} is a file, not a directory"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{probe} is not writable by you"
    try:
        with tempfile.TemporaryFile(dir=probe):
            pass
        if probe != Path(folder).absolute():
            os.rmdir(tempfile.mkdtemp(prefix=".lnbench-probe-", dir=probe))
    except OSError as e:
        return f"{probe} refuses new files ({e.strerror or e})"
    return None


def read_jsonl(path: str | Path) -> tuple[list[dict], int]:
    """The JSON objects of a JSONL file, read line by line, and how many lines were skipped: a line torn by a
    kill, or damaged anywhere in the file, is not an object and is skipped, never raised on (the readers say so)."""
    records, skipped = [], 0
    with open(path, "rb") as f:
        for raw in f:
            if not raw.strip():
                continue
            try:
                record = json.loads(raw.decode("utf-8"))
            except ValueError:  # JSONDecodeError, or bytes that are not UTF-8
                skipped += 1
                continue
            if isinstance(record, dict):
                records.append(record)
            else:
                skipped += 1
    return records, skipped
