"""Files a killed run cannot leave half-written: write a temp file beside the target, then rename.

os.replace is atomic on POSIX: a reader (or a resumed run) sees the old file or the new one, never a
mix. Append-only logs (metrics.jsonl) cannot be replaced per line; a kill can tear their last line,
which `read_jsonl` skips and flags, and which a resumed run cuts off (see lnbench.training.checkpoint).
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
    """Why `folder` cannot be made and written into (its nearest existing ancestor is a file, or not
    writable), or None: asked before a long computation whose results would go there."""
    probe = Path(folder)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        return f"{probe} is a file, not a directory"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{probe} is not writable by you"
    return None


def read_jsonl(path: str | Path) -> tuple[list[dict], bool]:
    """Records of a JSONL file, and whether a torn (unparseable) last line was skipped."""
    records, torn = [], False
    lines = Path(path).read_text(errors="replace").splitlines()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if i != len(lines) - 1:
                raise
            torn = True
    return records, torn
