"""lnbench on SLURM (issue 21): `hydra/launcher=slurm` against a real scheduler, and its parts without one.

The tests marked `slurm` need a cluster: `make slurm-up` starts a one-node one on this machine (root, Debian's
packages), `make test-slurm` runs them; without one they skip, saying why. They check what a shared cluster
does to a sweep: a claim preset's sweep completes and is judged; `scontrol requeue` and submitit's own fake
preemption make a job checkpoint, come back and end with the metrics of an uninterrupted run; a job that
reaches its time limit requeues itself and finishes; `scancel` of one job fails that job only, by name;
`lnbench check` run again while its jobs are queued submits nothing twice.

SLURM holds a requeued job for about two and a half minutes (BeginTime) before it may start again; the tests
release it at once (`scontrol update StartTime=now`) to stay short, as an operator may.
"""

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from conftest import TINY_CLI, lnbench_cmd, metrics_without_time, run_cli, start_cli, summary_of

from lnbench import environment
from lnbench.training import checkpoint

# submitit configures logging when imported (dictConfig, which closes the handlers that exist then): imported
# by the tests that need it, never while pytest collects the suite.
if (
    importlib.util.find_spec("submitit") is None
    or importlib.util.find_spec("hydra_plugins.hydra_submitit_launcher") is None
):
    pytest.skip("the launchers extra is not installed (pip install -e '.[launchers]')", allow_module_level=True)


def slurm_modules():
    from lnbench.launch.slurm import launcher as slurm
    from lnbench.launch.slurm import queue as slurm_status

    return slurm, slurm_status


# ---- without a cluster: the poller, the stop signals, the preset, a lost job's record --------------
def test_the_poller_says_once_that_sacct_is_unavailable_and_reads_squeue(monkeypatch, caplog):
    _, slurm_status = slurm_modules()
    calls = []
    queue = {"out": "5_0|RUNNING|vm\n5_1|PENDING|\n"}

    def fake_run(cmd, **kw):
        calls.append(cmd[0])
        if cmd[0] == "sacct":
            raise subprocess.CalledProcessError(1, cmd, "", "Slurm accounting storage is disabled\n")
        return subprocess.CompletedProcess(cmd, 0, queue["out"], "")

    monkeypatch.setattr(slurm_status.subprocess, "run", fake_run)
    w = slurm_status.QueueWatcher(delay_s=0)
    for j in ("5_0", "5_1", "5_2"):
        w.register_job(j)
    for _ in range(3):
        w.update()
    assert calls == ["sacct", "squeue", "squeue", "squeue"]  # sacct asked once, never again
    said = [r.getMessage() for r in caplog.records]
    assert len([m for m in said if "sacct is unavailable" in m]) == 1
    assert "Slurm accounting storage is disabled" in said[0]
    assert w.get_state("5_0", mode="cache") == "RUNNING" and not w.is_done("5_1", mode="cache")
    assert w.is_done("5_2", mode="cache")  # listed by none of three polls: it has left the queue
    assert w.get_state("5_2", mode="cache") == slurm_status.GONE
    queue["out"] = "5_0|CANCELLED|vm\n5_1|REQUEUED|\n"
    w.update()
    assert w.is_done("5_0", mode="cache") and not w.is_done("5_1", mode="cache")


def test_a_job_missing_from_one_poll_is_not_over(monkeypatch):
    """Just submitted, a job may not be listed yet: over only when two polls in a row miss it."""
    _, slurm_status = slurm_modules()
    monkeypatch.setattr(slurm_status.subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(cmd, 0, "", ""))
    w = slurm_status.QueueWatcher(delay_s=0)
    w.use_sacct = False
    w.register_job("7_0")
    w.update()
    assert not w.is_done("7_0", mode="cache")
    w.update()
    assert w.is_done("7_0", mode="cache")


def test_extra_stop_signals_come_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(
        "LNBENCH_STOP_SIGNALS", "USR2, SIGUSR1"
    )  # a name of no signal: refused (tests/test_environment.py)
    assert environment.stop_signals() == (signal.SIGUSR2, signal.SIGUSR1)
    with checkpoint.StopSignals(tmp_path) as stop:
        os.kill(os.getpid(), signal.SIGUSR2)  # without the handler this would end the test process
        deadline = time.time() + 5
        while stop.requested is None and time.time() < deadline:
            time.sleep(0.01)
    assert stop.requested == signal.SIGUSR2
    assert signal.getsignal(signal.SIGUSR2) is signal.SIG_DFL  # given back
    monkeypatch.delenv("LNBENCH_STOP_SIGNALS")
    assert environment.stop_signals() == ()


def test_the_slurm_preset_is_lnbench_launcher_with_requeue_settings():
    from hydra import compose, initialize_config_dir
    from hydra.core.plugins import Plugins

    from lnbench.config.schema import register_configs
    from lnbench.launch.entry import CONF_DIR

    register_configs()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose(
            "train", overrides=["hydra/launcher=slurm", "hydra.launcher.partition=gpu"], return_hydra_config=True
        )
    launcher = cfg.hydra.launcher
    assert launcher._target_ == "hydra_plugins.lnbench_submitit_slurm.launcher.SlurmLauncher"
    assert launcher.partition == "gpu"
    assert launcher.max_num_timeout == 3 and launcher.signal_delay_s == 120  # as the README's SLURM section says
    assert str(launcher.submitit_folder).endswith("/.submitit")  # no %j: one folder, there before any job starts
    # Hydra finds the class among its plugins (it instantiates launchers from hydra_plugins only)
    from hydra.plugins.launcher import Launcher

    found = Plugins.instance().class_name_to_class.get(launcher._target_)
    assert found is not None and issubclass(found, Launcher) and found.__mro__[1].__name__ == "SlurmLauncher"


def test_slurm_durations_and_a_failed_jobs_exception_line():
    slurm, slurm_status = slurm_modules()
    assert slurm_status.seconds("00:01:00") == 60 and slurm_status.seconds("1-02:03:04") == 93784
    assert slurm_status.seconds("05:30") == 330 and slurm_status.seconds("UNLIMITED") == float("inf")
    message = (
        "Job (task=0) failed during processing with trace:\n----------------------\n"
        "Traceback (most recent call last):\n"
        '  File "x.py", line 1, in <module>\nTimeoutError: it reached its time limit (00:01:00)\n'
        "----------------------\nYou can check full logs with 'job.stderr(0)' and 'job.stdout(0)'or at paths:\n"
        "  - /s/.submitit/3_0_0_log.err\n  - /s/.submitit/3_0_0_log.out"
    )
    assert slurm.raised(message) == "it reached its time limit (00:01:00)"
    assert (
        slurm.raised("lnbench.launch.failures.JobFailed: lnbench: job 2 (seed=1) failed: x")
        == "lnbench: job 2 (seed=1) failed: x"
    )


def test_a_lost_job_is_failed_in_its_summary_and_keeps_what_its_run_wrote(tmp_path):
    slurm, _ = slurm_modules()
    from omegaconf import OmegaConf

    cfg = OmegaConf.create({"hydra": {"overrides": {"task": ["seed=1"]}}})
    ran, never = tmp_path / "1", tmp_path / "2"
    (ran / ".hydra").mkdir(parents=True)
    (ran / ".hydra" / "overrides.yaml").write_text("- seed=1\n- steps=9\n")
    (ran / "summary.json").write_text(json.dumps({"status": "interrupted", "steps": 40, "params": 505}))
    slurm.record_lost(ran, cfg, "9_1", "SLURM job 9_1 ended CANCELLED without a result")
    assert summary_of(ran) == {
        "status": "failed",
        "steps": 40,
        "params": 505,
        "slurm_job": "9_1",
        "error": "SLURM job 9_1 ended CANCELLED without a result",
    }
    assert (ran / ".hydra" / "overrides.yaml").read_text() == "- seed=1\n- steps=9\n"  # the job's own, kept
    slurm.record_lost(never, cfg, "9_2", "cancelled while pending")
    assert summary_of(never)["status"] == "failed" and summary_of(never)["steps"] == 0
    assert OmegaConf.load(never / ".hydra" / "overrides.yaml") == ["seed=1"]
    (ran / "summary.json").write_text(json.dumps({"status": "diverged", "steps": 7}))
    slurm.record_lost(ran, cfg, "9_1", "x")
    assert summary_of(ran) == {"status": "diverged", "steps": 7}  # the run said how it ended


# ---- against a real cluster ------------------------------------------------------------------------
def cluster_problem() -> str | None:
    """Why there is no usable SLURM cluster here (None where there is one)."""
    if not shutil.which("sbatch") or not shutil.which("squeue"):
        return "SLURM is not installed: `make slurm-up` installs and starts a one-node cluster (needs root and apt)"
    try:
        ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=20).stdout
        nodes = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError) as e:
        return f"SLURM does not answer ({e}): `make slurm-up` starts it"
    if "UP" not in ping or not any(
        s.strip().rstrip("*~#").startswith(("idle", "mix", "alloc", "comp")) for s in nodes.split()
    ):
        return (
            f"no SLURM controller with a usable node ({ping.strip()}; nodes: {nodes.split()}): "
            "`make slurm-up` starts one"
        )
    return None


@pytest.fixture(scope="module")
def cluster():
    """Asked once, when the first SLURM test runs (never while the default suite collects this file)."""
    if problem := cluster_problem():
        pytest.skip(problem)


# conftest's tiny LSTM run, with no logger, and checkpoints only at step 0, at a signal and at the end.
TINY = [*(o for o in TINY_CLI if not o.startswith("logger.")), "logger=none", "checkpoint_every=1000000"]
ON_SLURM = ["hydra/launcher=slurm", "hydra.launcher.cpus_per_task=1", "hydra.launcher.timeout_min=10"]


def start_sweep(folder: Path, *overrides: str) -> subprocess.Popen:
    return start_cli(
        "train",
        "-m",
        *overrides,
        *ON_SLURM,
        f"hydra.sweep.dir={folder}",
        cwd=folder.parent,
        stderr=subprocess.STDOUT,
        own_group=False,
    )


def wait_for(what, timeout: float, proc: subprocess.Popen | None = None, every: float = 0.5):
    deadline = time.time() + timeout
    while not (found := what()):
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the sweep ended first (exit {proc.returncode}):\n{proc.stdout.read()}")
        assert time.time() < deadline, f"timed out after {timeout} s waiting for {what.__name__}"
        time.sleep(every)
    return found


def fake_preemption(job_id: str) -> None:
    """submitit's test preemption (SlurmJob._interrupt): SIGTERM, then its requeue signal (SIGUSR2), with SLURM
    keeping the job running. Each scancel is retried while slurmctld answers "Job can not be altered now, try again
    later": a sibling array task was just requeued (seen once in 5 runs on a loaded machine)."""
    for sig in ("SIGTERM", "USR2"):
        for attempt in range(40):
            done = subprocess.run(["scancel", job_id, "--signal", sig], capture_output=True, text=True)
            if done.returncode == 0:
                break
            assert "try again later" in done.stderr, done.stderr
            time.sleep(0.25)
        else:
            pytest.fail(f"scancel {job_id} --signal {sig}: SLURM refused it for 10 s: {done.stderr}")


def ledger_ids(sweep: Path) -> dict[str, str]:
    slurm, _ = slurm_modules()
    return {k: v["job_id"] for k, v in slurm.read_ledger(sweep).items()}


def last_train_step(run: Path) -> int:
    try:
        lines = (run / "metrics.jsonl").read_text().splitlines()
    except OSError:
        return 0
    steps = [json.loads(ln)["step"] for ln in lines if ln.endswith("}") and '"split": "train"' in ln]
    return max(steps, default=0)


def scontrol(job_id: str) -> dict[str, str]:
    out = subprocess.run(
        ["scontrol", "show", "job", "--oneliner", job_id], capture_output=True, text=True
    ).stdout.split("\n")[0]
    return dict(w.split("=", 1) for w in out.split() if "=" in w)


class Releaser(threading.Thread):
    """Lets the jobs of a test start again at once after a requeue (SLURM holds them ~150 s: BeginTime),
    optionally raising their time limit once requeued (the time-limit test's second allocation finishes)."""

    def __init__(self, job_ids, time_limit: str | None = None):
        super().__init__(daemon=True)
        self.job_ids, self.time_limit, self.stop = job_ids, time_limit, threading.Event()

    def run(self):
        while not self.stop.wait(1.0):
            for job in self.job_ids():
                info = scontrol(job)
                if info.get("JobState") == "PENDING" and info.get("Reason") == "BeginTime":
                    extra = [f"TimeLimit={self.time_limit}"] if self.time_limit else []
                    subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now", *extra], capture_output=True)


def finish(proc: subprocess.Popen, sweep: Path, timeout: float = 300) -> str:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out = proc.communicate()[0]
        pytest.fail(f"the sweep did not end in {timeout} s:\n{out}")
    finally:
        cancel(sweep)
    return out


def cancel(sweep: Path) -> None:
    """No job of a test outlives it."""
    ids = {i.split("_")[0] for i in ledger_ids(sweep).values()}
    if ids:
        subprocess.run(["scancel", *ids], capture_output=True)


def statuses(sweep: Path) -> dict[str, str]:
    return {p.parent.name: json.loads(p.read_text())["status"] for p in sweep.glob("*/summary.json")}


@pytest.mark.slurm
@pytest.mark.usefixtures("cluster")
def test_a_claim_preset_sweep_completes_on_slurm_and_is_judged(tmp_path):
    sweep = tmp_path / "sweep"
    proc = start_sweep(sweep, "+experiment=[ln_gain_init,smoke]", "optim.lr=1e-3", "logger=none", "progress=false")
    out = finish(proc, sweep)
    assert proc.returncode == 0, out
    assert statuses(sweep) == {str(i): "completed" for i in range(6)}  # gain {1.0, 0.1} x seed {0, 1, 2}
    accounting = subprocess.run(["sacct", "-n"], capture_output=True).returncode == 0
    assert "Bypassing sacct" not in out and out.count("sacct is unavailable") == (0 if accounting else 1)
    report = run_cli("report", str(sweep))
    assert report.returncode == 0, report.stderr
    claims = json.loads((sweep / "report" / "claims.json").read_text())
    assert {c["id"] for c in claims} == {"gain_init.ln_1.0_beats_0.1", "gain_init.ln_1.0_faster_than_0.1"}
    assert all(c["verdict"] in ("held", "contradicted", "inconclusive") and c["n_seeds"] == 3 for c in claims)


@pytest.mark.slurm
@pytest.mark.usefixtures("cluster")
def test_a_requeued_job_continues_from_its_checkpoint_to_the_metrics_of_an_uninterrupted_run(tmp_path):
    """Job 0: `scontrol requeue` (SIGTERM from SLURM, which requeues it). Job 1: submitit's fake preemption
    (SIGTERM and SIGUSR2 while SLURM keeps it running): the job requeues itself. Both resume from the
    checkpoint written at the signal and end with an uninterrupted run's metrics.jsonl (times excluded)."""
    run = [*TINY, "steps=6000", "log_every=25", "eval_every=500"]
    sweep = tmp_path / "sweep"
    refs = [
        subprocess.Popen(
            [*lnbench_cmd(), "train", *run, f"seed={s}", f"hydra.run.dir={tmp_path / f'ref{s}'}"],
            cwd=tmp_path,
            env={**os.environ, "WANDB_MODE": "disabled"},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for s in (0, 1)
    ]
    proc = start_sweep(sweep, *run, "seed=0,1")
    releaser = Releaser(lambda: list(ledger_ids(sweep).values()))
    try:
        ids = wait_for(lambda: len(ledger_ids(sweep)) == 2 and ledger_ids(sweep), 120, proc)

        def both_training():
            return all(last_train_step(sweep / j) >= 200 for j in ("0", "1"))

        wait_for(both_training, 180, proc, every=0.2)
        subprocess.run(["scontrol", "requeue", ids["0"]], check=True)
        fake_preemption(ids["1"])
        releaser.start()  # only now: released at once, job 1 could get the SIGUSR2 in its next allocation
        out = finish(proc, sweep)
    finally:
        releaser.stop.set()
    assert proc.returncode == 0, out
    for r in refs:
        assert r.wait(timeout=300) == 0
    for j in ("0", "1"):
        s = summary_of(sweep / j)
        assert s["status"] == "completed" and s["steps"] == 6000, s
        (at,) = s["resumed_at"]
        assert 200 <= at < 6000, s  # once, from the checkpoint written at the signal (no periodic ones: step 0 only)
        assert int(scontrol(ids[j]).get("Restarts", 0)) == 1
        assert metrics_without_time(sweep / j) == metrics_without_time(tmp_path / f"ref{j}")
    assert (
        "requeueing SLURM job"
        in (sweep / ".submitit" / f"{ids['1']}_0_log.err").read_text()
        + (sweep / ".submitit" / f"{ids['1']}_0_log.out").read_text()
    )


def steps_lasting(seconds: float, folder: Path) -> int:
    """The TINY run's steps (a multiple of 1000) that take about `seconds` on this machine, from a short run."""
    calib = subprocess.run(
        [*lnbench_cmd(), "train", *TINY, "steps=2000", "log_every=1000", "eval_every=2000", f"hydra.run.dir={folder}"],
        cwd=folder.parent,
        capture_output=True,
        text=True,
    )
    assert calib.returncode == 0, calib.stderr
    return max(10, round(seconds / summary_of(folder)["time_per_step"] / 1000)) * 1000


@pytest.mark.slurm
@pytest.mark.usefixtures("cluster")
def test_a_job_at_its_time_limit_requeues_itself_and_finishes(tmp_path):
    """Once the job trains, its time limit drops to 1 minute; with submitit's notice set 55 s before the limit,
    SLURM sends it at its next check (every 30 s), long before this job's steps are done. The job checkpoints
    and requeues itself, counted against max_num_timeout. Requeued, the releaser gives it 10 minutes again,
    so that the second allocation finishes the run."""
    sweep = tmp_path / "sweep"
    # ~75 s of steps on this machine, well over SLURM's 30 s between two checks of the limits (a fixed 40000,
    # ~45 s on the machine it was sized on, sometimes ended before the notice on a faster one)
    n = steps_lasting(75.0, tmp_path / "calibration")
    proc = start_sweep(
        sweep, *TINY, f"steps={n}", "log_every=1000", "eval_every=10000", "seed=0", "hydra.launcher.signal_delay_s=55"
    )
    releaser = Releaser(lambda: list(ledger_ids(sweep).values()), time_limit="10")
    try:
        (job,) = wait_for(lambda: ledger_ids(sweep), 120, proc).values()
        wait_for(lambda: last_train_step(sweep / "0") >= 1000, 180, proc, every=0.2)
        subprocess.run(["scontrol", "update", f"JobId={job}", "TimeLimit=1"], check=True)
        releaser.start()
        out = finish(proc, sweep, timeout=400)
    finally:
        releaser.stop.set()
        cancel(sweep)
    assert proc.returncode == 0, out
    s = summary_of(sweep / "0")
    assert s["status"] == "completed" and s["steps"] == n and len(s.get("resumed_at", [])) == 1, s
    assert 1000 <= s["resumed_at"][0] < n, s
    assert int(scontrol(job).get("Restarts", 0)) == 1
    log = "".join(p.read_text() for p in (sweep / ".submitit").glob(f"{job}_0_log.*"))
    assert "SIGUSR2 received" in log and f"requeueing SLURM job {job} (time limit)" in log
    steps = [r["step"] for r in metrics_without_time(sweep / "0") if r["split"] == "train"]
    assert steps == list(range(1000, n + 1, 1000))  # each step logged once: the resume appended, nothing twice


@pytest.mark.slurm
@pytest.mark.usefixtures("cluster")
def test_scancel_fails_the_cancelled_jobs_by_name_and_the_others_complete(tmp_path):
    """Four jobs on two cores: job 1 is cancelled while it trains, job 3 while it waits in the queue."""
    sweep = tmp_path / "sweep"
    proc = start_sweep(sweep, *TINY, "steps=5000", "log_every=25", "eval_every=1000", "seed=0,1,2,3")
    try:
        ids = wait_for(lambda: len(ledger_ids(sweep)) == 4 and ledger_ids(sweep), 120, proc)
        wait_for(lambda: last_train_step(sweep / "1") >= 100, 180, proc, every=0.2)
        assert scontrol(ids["3"])["JobState"] == "PENDING"
        live = run_cli("status", str(sweep))  # from files: job 3, queued, has no directory (multirun.yaml counts it)
        assert live.returncode == 0, live.stderr
        assert "0 of 4 done" in live.stdout and " running" in live.stdout and " pending" in live.stdout, live.stdout
        assert "left" in live.stdout, live.stdout
        subprocess.run(["scancel", ids["1"], ids["3"]], check=True)
        out = finish(proc, sweep)
    except BaseException:
        cancel(sweep)
        raise
    assert proc.returncode == 1, out
    assert statuses(sweep) == {"0": "completed", "1": "failed", "2": "completed", "3": "failed"}
    block = out[out.index("sweep done:") :]
    assert "jobs       4: 2 completed, 2 failed" in block
    # squeue lists a cancelled running job as CANCELLED; a pending array job cancelled is simply gone
    said = {
        "1": "ended CANCELLED without a result: it was cancelled",
        "3": "ended NOT_IN_QUEUE without a result: it left",
    }
    for j in ("1", "3"):
        assert f"failed     {j}: SLURM job {ids[j]} {said[j]}" in block
        assert f"SLURM job {ids[j]} {said[j]}" in summary_of(sweep / j)["error"]
    assert (sweep / "1" / "checkpoint.pt").exists()  # written at scancel's SIGTERM: a re-run continues it
    report = run_cli("report", str(sweep))  # the job that never ran is listed too
    assert report.returncode == 0, report.stderr
    text = (sweep / "report" / "report.md").read_text()
    assert all(f"SLURM job {ids[j]} ended" in text for j in ("1", "3"))

    again = start_sweep(sweep, *TINY, "steps=5000", "log_every=25", "eval_every=1000", "seed=0,1,2,3")
    out = finish(again, sweep)
    assert again.returncode == 0, out
    assert out.count("(completed earlier: skipped)") == 2  # jobs 0 and 2: not submitted again
    assert statuses(sweep) == {str(j): "completed" for j in range(4)}
    assert len(summary_of(sweep / "1")["resumed_at"]) == 1 and "resumed_at" not in summary_of(sweep / "3")


@pytest.mark.slurm
@pytest.mark.usefixtures("cluster")
def test_check_run_again_while_its_jobs_are_queued_submits_nothing_twice(tmp_path):
    out = tmp_path / "check"
    args = [
        "check",
        "ln_gain_init",
        "optim.lr=1e-3",
        "steps=40",
        "eval_every=20",
        "log_every=10",
        "progress=false",
        "hydra/launcher=slurm",
        "hydra.launcher.cpus_per_task=1",
        "--out",
        str(out),
    ]
    env = {**os.environ, "WANDB_MODE": "disabled"}
    first = subprocess.Popen(
        [*lnbench_cmd(), *args], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    sweep = out / "ln_gain_init"
    try:
        ids = wait_for(lambda: len(ledger_ids(sweep)) == 6 and ledger_ids(sweep), 120, first)
        pending = subprocess.run(
            ["squeue", "--me", "-h", "-r", "-t", "PENDING", "-o", "%i"], capture_output=True, text=True
        ).stdout.split()
        assert set(pending) & set(ids.values()), "no job was pending: nothing to test"  # 6 jobs, 2 cores
        second = run_cli(*args, cwd=tmp_path, timeout=600)
        first_out, _ = first.communicate(timeout=600)
    finally:
        if first.poll() is None:
            first.kill()
        cancel(sweep)
    assert second.returncode == 0 and first.returncode == 0, second.stdout + second.stderr + first_out
    assert "already queued as SLURM job" in second.stdout + second.stderr
    assert ledger_ids(sweep) == ids  # the same jobs: none submitted again
    assert len(list((sweep / ".submitit").glob("*_submission.sh"))) == 1  # one array, sbatch'ed once
    assert statuses(sweep) == {str(i): "completed" for i in range(6)}
    for j in range(6):  # each job trained once, never resumed by a second copy of itself
        assert "resumed_at" not in summary_of(sweep / str(j))
        assert "in use by another lnbench process" not in (sweep / str(j) / "train.log").read_text()
    page = (out / "check.md").read_text()
    assert page.count("gain_init.ln_1.0") == 2 and "no verdict" not in page
