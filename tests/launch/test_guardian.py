"""No orphans (issue 32): when a sweep's process is killed, the processes it started stop within seconds, its
running jobs after a checkpoint, and running the same command again resumes them to the numbers of a sweep
never interrupted."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import REPO, TINY_CLI, metrics_without_time, start_cli, summary_of

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the guardian watches /proc (Linux)")


def alive(pid: int) -> bool:
    """Running (a zombie left for a PID 1 that does not reap is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def session(sid: int) -> list[int]:
    """The running processes of a session (a sweep started with start_new_session: all of its processes)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid and fields[0] not in ("Z", "X"):
                found.append(int(entry))
    return found


def wait_until(predicate, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


FAKE_SWEEP = textwrap.dedent("""
    import subprocess, sys, time
    from lnbench.launch.process.guardian import guarding
    with guarding():
        # like an idle loky worker: in the sweep's process group, deaf to SIGTERM
        deaf = subprocess.Popen([sys.executable, "-c",
                                 "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"])
        print(deaf.pid, flush=True)
        time.sleep(120)
""")


def test_a_killed_sweeps_process_leaves_no_process_that_ignores_sigterm(tmp_path):
    sweep = subprocess.Popen(
        [sys.executable, "-c", FAKE_SWEEP],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        deaf = int(sweep.stdout.readline())
        time.sleep(1.5)  # the guardian notes the sweep's children every half second
        assert alive(deaf)
        sweep.kill()
        sweep.wait()
        assert wait_until(lambda: not alive(deaf), 5), "the sweep's child outlived it"
        assert wait_until(lambda: not session(sweep.pid), 5), session(sweep.pid)
        assert "the sweep's process died; its 1 helper process(es)" in sweep.stderr.read()
    finally:
        for pid in session(sweep.pid):
            os.kill(pid, signal.SIGKILL)


def test_a_sweep_that_ends_takes_its_guardian_with_it():
    from lnbench.launch.process.guardian import guarding

    with guarding():
        assert os.waitpid(-1, os.WNOHANG) == (0, 0)  # the guardian runs
    with pytest.raises(ChildProcessError):
        os.waitpid(-1, os.WNOHANG)  # the guardian was reaped: no child left, not even a zombie


CHECK = textwrap.dedent("""
    import subprocess, sys, time
    from lnbench.launch.process.guardian import die_with_parent
    # like lnbench check's sweep: SIGTERM is how a sweep is asked to stop after its jobs' checkpoints
    on_term = ("import signal, sys, time; "
               "signal.signal(signal.SIGTERM, lambda *a: (print('stopped', flush=True), sys.exit(0)))")
    sweep = subprocess.Popen([sys.executable, "-c", on_term + "; print('ready', flush=True); time.sleep(120)"],
                             preexec_fn=die_with_parent)
    print(sweep.pid, flush=True)
    time.sleep(120)
""")


def test_a_killed_check_asks_its_sweep_to_stop():
    check = subprocess.Popen(
        [sys.executable, "-c", CHECK],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        sweep = int(check.stdout.readline())
        assert check.stdout.readline() == "ready\n"  # the sweep shares the pipe: its handler is in place
        check.kill()
        check.wait()
        assert check.stdout.readline() == "stopped\n"  # SIGTERM, not SIGKILL: it stops its own way
        assert wait_until(lambda: not alive(sweep), 5)
    finally:
        for pid in session(check.pid):
            os.kill(pid, signal.SIGKILL)


SWEEP = [
    "-m",
    "seed=0,1",
    "hydra/launcher=joblib",
    "hydra.launcher.n_jobs=2",
    "steps=4000",
    "log_every=100",
    "eval_every=2000",
    "checkpoint_every=100000",
    *TINY_CLI,
]


def start(sweep_dir: Path) -> subprocess.Popen:
    return start_cli("train", *SWEEP, f"hydra.sweep.dir={sweep_dir}", stderr=subprocess.STDOUT)


@pytest.mark.slow
def test_kill_9_of_a_joblib_sweep_stops_its_jobs_and_a_rerun_resumes_them_exactly(tmp_path):
    reference = start(tmp_path / "reference")
    out = reference.communicate(timeout=600)[0]
    assert reference.returncode == 0, out[-3000:]

    sweep_dir = tmp_path / "sweep"
    sweep = start(sweep_dir)
    try:

        def training():
            return all(
                len((sweep_dir / j / "metrics.jsonl").read_text().splitlines()) >= 2
                if (sweep_dir / j / "metrics.jsonl").exists()
                else False
                for j in ("0", "1")
            )

        assert wait_until(training, 300), "the jobs never started training"
        sweep.kill()  # SIGKILL: no handler, no clean-up of its own
        sweep.wait()
        assert wait_until(lambda: not session(sweep.pid), 10), f"left after 10 s: {session(sweep.pid)}"
    finally:
        for pid in session(sweep.pid):
            os.kill(pid, signal.SIGKILL)
    assert {summary_of(sweep_dir / j)["status"] for j in ("0", "1")} == {"interrupted"}  # each wrote its checkpoint

    again = start(sweep_dir)
    out = again.communicate(timeout=600)[0]
    assert again.returncode == 0, out[-3000:]
    assert "2: 2 completed, 0 failed" in out and "in use by another lnbench process" not in out
    for j in ("0", "1"):
        assert metrics_without_time(sweep_dir / j) == metrics_without_time(tmp_path / "reference" / j)
