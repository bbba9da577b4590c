"""The run lock: one process per run directory, and whether a live process holds a run's lock."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from lnbench.errors import ConfigError
from lnbench.runs.files import LOCK


def lock_held(path: Path) -> bool:
    """Whether a live process holds the run's lock (RunLock flocks `<run>/.lock` for the run's life; the file
    stays after a kill). Read without taking the lock: even a moment's hold could make a job starting just then
    believe its directory is in use."""
    return lock_state(path) is True


def lock_state(path: Path) -> bool | None:
    """True: a live process holds the lock; False: none does, as seen from here (the lock file names this
    machine, so a process killed with kill -9 is known to be gone); None: it cannot be told from here (no lock
    file, or the lock of a process on another machine, e.g. a SLURM job on a compute node: flocks over a
    shared file system are not listed here)."""
    try:
        st = path.stat()
    except OSError:
        return None
    held = _flock_holders(st)
    if held is None:  # no /proc/locks (not Linux): the pid the lock file names, on this host
        held = _pid_alive(path)
    return True if held else (False if _names_this_host(path) else None)


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
        return process_alive(int(pid), host) is True
    except ValueError:
        return False


def process_alive(pid: int, host: str) -> bool | None:
    """Whether process `pid` of machine `host` lives; None: it cannot be told from here (another machine)."""
    if not this_host(host):
        return None
    try:
        os.kill(pid, 0)
    except PermissionError:  # another user's: it lives
        return True
    except OSError:
        return False
    return True


def this_host(host: str) -> bool:
    return host in (socket.gethostname().split(".")[0], os.uname().nodename)


def _names_this_host(path: Path) -> bool:
    try:
        host = path.read_text().split()[-1]  # "pid 123 on host"
    except (OSError, IndexError):
        return False
    return this_host(host)


class RunLock:
    """An exclusive lock on `<run dir>/.lock` for the life of the run (released by the OS if killed).

    Taken once per run: by lnbench.launch.preflight for an existing run directory (before Hydra writes there),
    else by the job; a forked job process shares its parent's. A second RunLock on the same directory, in
    this process too, is refused: nothing locks twice. The file is removed on release, so a finished or
    refused run leaves no `.lock`; a process that locked a file just removed by its holder notices (another
    inode at the path) and tries again.
    """

    def __init__(self, run_dir: Path):
        # Unix only: imported here so that the module itself loads on a machine without it.
        import fcntl  # noqa: PLC0415 (platform-only)

        self.path = Path(run_dir) / LOCK
        while True:
            self._f = open(self.path, "a+")
            try:
                fcntl.flock(self._f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                self._f.seek(0)
                holder = self._f.read().strip() or "unknown"
                self._f.close()
                raise ConfigError(
                    f"{run_dir} is in use by another lnbench process ({holder}): two runs may not write into "
                    f"one directory. Wait for it to end, or give this run its own hydra.run.dir."
                ) from None
            try:
                if os.stat(self.path).st_ino == os.fstat(self._f.fileno()).st_ino:
                    break
            except FileNotFoundError:
                pass
            self._f.close()  # locked a file its holder removed on release: lock the current one
        self._f.truncate(0)
        self._f.write(f"pid {os.getpid()} on {os.uname().nodename}\n")
        self._f.flush()

    def release(self) -> None:
        if self._f.closed:
            return
        self.path.unlink(missing_ok=True)  # while still locked: nobody can take a file being removed
        self._f.close()

    def __enter__(self) -> "RunLock":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
