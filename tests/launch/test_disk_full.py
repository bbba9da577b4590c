"""The machine's state, not the input's nor a bug: a disk that fills up (or a used-up quota, or a read-only file
system) at any write of a run is named as such, exit 1, one paragraph and no traceback, and the run goes on from
its last checkpoint once there is room. Injected in-process at each write point (no disk is filled)."""

import errno
import os
from contextlib import contextmanager
from types import SimpleNamespace

import pytest
import torch
from conftest import TINY_CLI, summary_of

import lnbench.atomic
from lnbench.cli import main
from lnbench.training.sinks.jsonl import MetricsJsonl

RUN = [*TINY_CLI, "steps=4", "eval_every=2", "checkpoint_every=2"]
SAYS = {
    errno.ENOSPC: "is full",
    errno.EDQUOT: "has no room left in your disk quota",
    errno.EROFS: "is mounted read-only",
}


def disk_error(code: int, path) -> OSError:
    return OSError(code, os.strerror(code), str(path))


@pytest.fixture
def full_disk(monkeypatch):
    """full_disk(file, from_write, code): every write of `file` from its `from_write`-th on fails with `code`."""

    def fill(name: str, from_write: int, code: int = errno.ENOSPC) -> None:
        seen = {"n": 0}

        def counted(path):
            if path.name == name:
                seen["n"] += 1
                if seen["n"] >= from_write:
                    raise disk_error(code, path)

        if name == "metrics.jsonl":
            log = MetricsJsonl.log
            monkeypatch.setattr(MetricsJsonl, "log", lambda self, record: (counted(self.path), log(self, record)))
            return
        replacing = lnbench.atomic.replacing

        @contextmanager
        def failing(path):
            counted(path.__class__(path))
            with replacing(path) as tmp:
                yield tmp

        monkeypatch.setattr(lnbench.atomic, "replacing", failing)

    return fill


def train(args, capsys) -> tuple[int, str]:
    try:
        code = main(["train", *args])
    except SystemExit as e:  # a single run that did not complete exits from inside Hydra's task function
        code = e.code
    return code, capsys.readouterr().err


def said_as_the_disks(code: int, err: str, run_dir, state: str = "is full") -> None:
    assert code == 1, err
    assert "Traceback" not in err and "bug" not in err, err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"lnbench: the disk holding {run_dir} {state} ("), last
    assert f"continue with `lnbench train resume={run_dir}`" in last, last


@pytest.mark.parametrize(
    "name,from_write",
    [("checkpoint.pt", 2), ("metrics.jsonl", 3), ("summary.json", 1), ("config.yaml", 1)],
)
def test_a_full_disk_at_each_write_of_a_run_is_named_as_the_machines_state(
    name, from_write, full_disk, tmp_path, capsys
):
    run_dir = tmp_path / "run"
    full_disk(name, from_write)
    code, err = train([*RUN, f"hydra.run.dir={run_dir}"], capsys)
    said_as_the_disks(code, err, run_dir)
    if (run_dir / "checkpoint.pt").exists():  # one written before the disk filled: whole
        torch.load(run_dir / "checkpoint.pt", weights_only=True)
    assert not list(run_dir.glob(".*.tmp")), "a temp file left behind"


def test_a_full_disk_at_hydras_records_of_the_run_is_named_too(monkeypatch, tmp_path, capsys):
    """Hydra writes <run>/.hydra/*.yaml before lnbench's task function runs (lnbench.launch.hydra_records)."""
    run_dir = tmp_path / "run"
    replacing = lnbench.atomic.replacing

    @contextmanager
    def records_full(path):
        if path.parent.name == ".hydra":
            raise disk_error(errno.ENOSPC, path)
        with replacing(path) as tmp:
            yield tmp

    monkeypatch.setattr(lnbench.atomic, "replacing", records_full)
    said_as_the_disks(*train([*RUN, f"hydra.run.dir={run_dir}"], capsys), run_dir)
    assert not (run_dir / "checkpoint.pt").exists()  # stopped before training


@pytest.mark.parametrize("code", sorted(SAYS))
def test_each_disk_state_is_said_for_what_it_is_however_deep_in_the_chain(code, tmp_path, capsys):
    """Where the write failed inside another exception's handling (torch, a sink, the summary after a failure)."""
    from lnbench.launch import failures

    run_dir = tmp_path / "run"
    try:
        try:
            raise disk_error(code, run_dir / "metrics.jsonl")
        except OSError:
            raise RuntimeError("a writer's own wrapper")  # as torch's C++ writer wraps it
    except RuntimeError as wrapped:
        error = wrapped
    assert failures.classify(error) == failures.MACHINE_STATE
    assert failures.say(error, None, run_dir) == 1
    said_as_the_disks(1, capsys.readouterr().err, run_dir, SAYS[code])
    assert failures.classify(disk_error(errno.EACCES, run_dir)).bug  # not the disk's state: a bug, as before
    line = failures.one_line(3, ["seed=1"], error, run_dir)
    assert line.startswith(f"lnbench: job 3 (seed=1) failed: the disk holding {run_dir} {SAYS[code]}")


@pytest.mark.slow
def test_a_run_stopped_by_a_full_disk_continues_from_its_checkpoint_to_an_uninterrupted_runs_numbers(
    full_disk, monkeypatch, tmp_path, capsys
):
    from conftest import results_of

    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    assert train([*RUN, f"hydra.run.dir={whole}"], capsys)[0] == 0
    full_disk("checkpoint.pt", 2)  # step 0's is written, step 2's is not
    said_as_the_disks(*train([*RUN, f"hydra.run.dir={stopped}"], capsys), stopped)
    assert torch.load(stopped / "checkpoint.pt", weights_only=True)["step"] == 0
    monkeypatch.undo()  # room again
    code, err = train([f"resume={stopped}"], capsys)
    assert code == 0, err
    assert results_of(summary_of(stopped)) == results_of(summary_of(whole))


@pytest.mark.slow
def test_a_full_disk_in_one_job_of_a_sweep_is_named_and_the_others_are_kept(tmp_path, capsys):
    replacing = lnbench.atomic.replacing

    @contextmanager
    def job_1_full(path):  # at its checkpoint, and job 2's at Hydra's records of it
        if path.parent.name == "1" and path.name == "checkpoint.pt" or path.parent.parent.name == "2":
            raise disk_error(errno.ENOSPC, path)
        with replacing(path) as tmp:
            yield tmp

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(lnbench.atomic, "replacing", job_1_full)
        code = main(["train", "-m", *RUN, "seed=0,1,2,3", f"hydra.sweep.dir={tmp_path}"])
    said = capsys.readouterr()
    err = said.err + said.out  # Hydra's line for the first failed job; each job's own, in its log on the console
    assert code == 1 and "Traceback" not in err and "bug" not in err, err
    lines = sorted({ln[ln.index("lnbench: job") :] for ln in err.splitlines() if "lnbench: job" in ln})
    assert len(lines) == 2, err
    for job, line in zip(("1", "2"), lines):
        assert line.startswith(f"lnbench: job {job} (") and f"the disk holding {tmp_path / job} is full" in line
        assert "continue with the same sweep command" in line
    for job in ("0", "3"):
        assert summary_of(tmp_path / job)["status"] == "completed"


@pytest.mark.parametrize("multirun", [False, True])
def test_a_disk_full_before_the_run_starts_is_said_before_anything_is_written(multirun, monkeypatch, tmp_path, capsys):
    import lnbench.launch.preflight as preflight

    monkeypatch.setattr(preflight.os, "statvfs", lambda path: SimpleNamespace(f_bavail=0, f_frsize=4096))
    out = tmp_path / "out"
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    code, err = train([*(["-m", "seed=0,1"] if multirun else []), *RUN, f"{key}={out}"], capsys)
    assert code == 1 and err.strip().splitlines() == [
        f"lnbench: the disk holding {tmp_path} is full (No space left on device). Nothing was started. Free some "
        "space there, then run the same command again."
    ], err
    assert not out.exists()


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EACCES])
def test_a_log_file_on_a_full_disk_drops_its_lines_quietly_and_only_then(code, tmp_path, capsys, monkeypatch):
    """train.log's handler (Hydra's) on a full disk: no "--- Logging error ---" traceback per line (the run's next
    write names the disk); any other error of a handler is still logging's to print."""
    import logging

    from lnbench.launch import failures

    handler = logging.FileHandler(tmp_path / "train.log")
    handler.stream.write = lambda text: (_ for _ in ()).throw(disk_error(code, tmp_path / "train.log"))
    monkeypatch.setattr(logging.getLogger(), "handlers", [handler])  # the job's, as Hydra leaves them
    failures.quiet_full_disk_logs()
    failures.quiet_full_disk_logs()  # once is enough
    logging.getLogger("lnbench").warning("a line")
    err = capsys.readouterr().err
    assert ("--- Logging error ---" in err) == (code != errno.ENOSPC), err
