"""`lnbench status DIR` (issue 32): a run's, a sweep's and a check's jobs by state (per stage for a check), the
time so far and an estimate of the time left, from files alone; a live report calls running jobs running."""

import json
import os
import subprocess
import sys
import time

import pytest
import yaml
from conftest import REPO, TINY_CLI, lnbench_cmd

from lnbench.cli import main
from lnbench.launch.sweep import status
from tests.report.test_report import make_job


def multirun(sweep, params: dict, task: list[str]) -> None:
    sweep.mkdir(parents=True, exist_ok=True)
    hydra = {"sweeper": {"params": params}, "overrides": {"task": task}}
    (sweep / "multirun.yaml").write_text(yaml.safe_dump({"hydra": hydra}))


def old(job, seconds=3600):
    """Files last written an hour ago: a job that stopped, not one whose lock is out of sight."""
    for p in [job, *job.rglob("*")]:
        os.utime(p, (time.time() - seconds, time.time() - seconds))


def test_a_live_sweep_counts_its_jobs_by_state_with_the_pending_ones_and_a_time_left(tmp_path, holding):
    sweep = tmp_path / "sweep"
    multirun(sweep, {}, ["seed=0,1,2,3,4,5"])
    make_job(sweep, 0, ["seed=0"])  # completed: 30 steps, 3 s
    make_job(sweep, 1, ["seed=1"], status="failed", error="RuntimeError: boom")
    running = make_job(sweep, 2, ["seed=2"], config={"seed": 2, "steps": 100})
    (running / "summary.json").unlink()  # a running job has written no summary yet
    holding(running)
    stopped = make_job(sweep, 3, ["seed=3"], config={"seed": 3, "steps": 100})
    (stopped / "summary.json").unlink()
    old(stopped)
    out = status.lines(sweep)
    assert out[0] == f"sweep {sweep}"
    assert out[1] == "  jobs       2 of 6 done (1 completed, 1 failed), 1 running, 1 stopped, 2 pending"
    assert out[2] == "  running    2 (seed=2): step 30 of 100, ~7 s left"  # 70 steps at 0.1 s each
    # 7 s for the running job, then 2 pending at the 3 s a completed job took, over the 1 slot running now
    assert out[3].endswith(" so far, ~13 s left (estimate)") and out[3].startswith("  time       ")


def test_a_job_whose_lock_is_out_of_sight_is_running_while_its_log_is_fresh(tmp_path):
    """SLURM: the lock is held on a compute node, invisible here; a log written a moment ago says it runs."""
    sweep = tmp_path / "sweep"
    multirun(sweep, {}, ["seed=0,1"])
    for num in (0, 1):
        job = make_job(sweep, num, [f"seed={num}"], config={"seed": num, "steps": 100})
        (job / "summary.json").unlink()
    old(sweep / "1")
    assert status.lines(sweep)[1] == "  jobs       0 of 2 done, 1 running, 1 stopped"


def test_a_finished_run_and_a_finished_sweep(tmp_path, capsys):
    run = make_job(tmp_path, "run", ["seed=0"])
    assert main(["status", str(run)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"run {run}",
        "  state      completed, step 30 of 30",
        "  time       3 s of training; nothing running",
    ]
    sweep = tmp_path / "sweep"
    multirun(sweep, {"model": "mlp,ln_mlp"}, ["seed=0,1"])
    for num, (model, seed) in enumerate([(m, s) for m in ("mlp", "ln_mlp") for s in (0, 1)]):
        make_job(sweep, num, [f"model={model}", f"seed={seed}"])
    out = status.lines(sweep)
    assert out[1] == "  jobs       4 of 4 done (4 completed)" and "nothing running" in out[2]


def test_a_check_is_counted_per_preset_and_stage(tmp_path, holding):
    check = tmp_path / "check"
    preset = check / "ln_gain_init"
    multirun(preset, {"optim.lr": "1e-3,1e-2", "seed": "0,1"}, ["+experiment=ln_gain_init"])
    for num, (lr, seed) in enumerate([(lr, s) for lr in ("1e-3", "1e-2") for s in (0, 1)]):
        make_job(preset, num, [f"optim.lr={lr}", f"seed={seed}"])
    judge = preset / "judge-1"
    multirun(judge, {}, ["+cell=a_judge,b_judge", "seed=1000,1001,1002"])
    for num in range(2):
        config = {"seed": 1000 + num, "steps": 30, "stage": "judge"}
        job = make_job(judge, num, ["+cell=a_judge", f"seed={1000 + num}"], config=config)
    (job / "summary.json").unlink()
    holding(job)
    multirun(check / "pmnist", {"seed": "0,1,2"}, ["+experiment=pmnist"])  # started: no job yet
    out = status.lines(check)
    assert out[0] == f"check {check}"
    assert out[1] == (
        "  ln_gain_init  tune 4 of 4 done (4 completed) · judge 1 of 6 done (1 completed), 1 running, 4 pending"
    )
    assert out[2] == "  pmnist        tune 0 of 3 done, 3 pending"
    assert out[3] == "  jobs       5 of 13 done (5 completed), 1 running, 7 pending"


def test_a_folder_of_sweeps_is_counted_per_sweep(tmp_path):
    for name, seeds in (("10-00-00", (0, 1)), ("11-00-00", (0,))):
        multirun(tmp_path / name, {}, [f"seed={','.join(map(str, seeds))}"])
        make_job(tmp_path / name, 0, ["seed=0"])
    out = status.lines(tmp_path)
    assert out[:3] == [
        f"sweeps {tmp_path}",
        "  10-00-00  1 of 2 done (1 completed), 1 pending",
        "  11-00-00  1 of 1 done (1 completed)",
    ]


@pytest.mark.parametrize(
    "args,says",
    [
        ([], "the following arguments are required: DIR"),
        (["{t}/nowhere"], "DIR {t}/nowhere does not exist"),
        (["{t}/empty"], "no runs under {t}/empty"),
    ],
)
def test_bad_status_input_is_one_paragraph_exit_2(args, says, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["status", *(a.format(t=tmp_path) for a in args)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("lnbench: error: ") and says.format(t=tmp_path) in err


def test_a_live_report_calls_running_jobs_running_not_unrecorded(tmp_path, holding):
    from lnbench.report import load_runs, make_report
    from lnbench.report.page import provenance_lines

    prov = {"git_commit": "abc", "torch_version": "2.13.0"}
    sweep = tmp_path / "sweep"
    make_job(sweep, 0, ["seed=0"], provenance=prov)
    running = make_job(sweep, 1, ["seed=1"])
    (running / "summary.json").unlink()
    holding(running)
    lines = provenance_lines(make_report(sweep, load_runs(sweep), {}, x_axes=()))
    assert not any("made before lnbench recorded it" in line for line in lines), lines
    assert lines[-1] == "provenance not recorded yet by the 1 run(s) still running (each records it when it ends): `1`"


@pytest.mark.slow
def test_status_of_a_live_joblib_sweep(tmp_path):
    sweep = tmp_path / "sweep"
    env = {**os.environ, "WANDB_MODE": "disabled", "PYTHONPATH": str(REPO)}
    args = [
        "-m",
        "seed=0,1,2",
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        "steps=3000",
        "log_every=100",
        *TINY_CLI,
        f"hydra.sweep.dir={sweep}",
    ]
    proc = subprocess.Popen(
        [*lnbench_cmd(), "train", *args], cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        seen = []
        while proc.poll() is None:
            seen.append(
                subprocess.run([*lnbench_cmd(), "status", str(sweep)], env=env, capture_output=True, text=True).stdout
            )
            time.sleep(1)
    finally:
        proc.wait(timeout=600)
    assert proc.returncode == 0
    assert any("2 running, 1 pending" in s and "~" in s and "left (estimate)" in s for s in seen), seen
    final = subprocess.run(
        [sys.executable, "-m", "lnbench.cli", "status", str(sweep)], env=env, capture_output=True, text=True
    ).stdout
    assert "3 of 3 done (3 completed)" in final
    assert json.loads((sweep / "0" / "summary.json").read_text())["status"] == "completed"


def test_the_end_block_counts_a_job_another_process_holds_as_in_use_not_completed(tmp_path, holding):
    """The exit code of such a sweep is 1 (its job was refused): the block agrees, whatever the holder's summary."""
    from lnbench.launch.sweep.end import end_of_sweep_block, job_statuses

    make_job(tmp_path, 0, ["seed=0"])
    held = make_job(tmp_path, 1, ["seed=1"])  # its holder wrote "completed" at an earlier end
    holding(held)
    block = end_of_sweep_block(tmp_path, job_statuses(tmp_path))
    assert "  jobs       2: 1 completed, 0 failed, 0 diverged, 0 interrupted, 1 in use" in block
    assert "  in use     1: its directory is in use by another lnbench process: this sweep did not run it" in block


def first_round(tmp_path, state: str, pid: int):
    """A check in its first round (tuning jobs only, no page yet): 2 completed, 1 stopped, 1 not started."""
    check = tmp_path / "check"
    preset = check / "ln_gain_init"
    multirun(preset, {"seed": "0,1,2,3"}, ["+experiment=ln_gain_init"])
    for num in range(3):
        make_job(preset, num, [f"seed={num}"], config={"seed": num, "steps": 30})
    (preset / "2" / "summary.json").write_text('{"status": "interrupted", "steps": 10}')
    old(preset / "2")
    command = ["ln_gain_init", "--out", str(check)]
    record = {"command": command, "presets": ["ln_gain_init"], "pid": pid, "host": os.uname().nodename}
    (check / ".check.json").write_text(json.dumps({**record, "state": state}))
    return check, "`lnbench check ln_gain_init --out " + str(check) + "`"


@pytest.mark.parametrize("where", ["", "ln_gain_init"])
def test_a_check_in_its_first_round_is_a_check_with_its_presets_and_command(tmp_path, where):
    check, command = first_round(tmp_path, "running", os.getpid())
    out = status.lines(check / where)
    assert out[0] == f"check {check / where} (running: {command})"
    assert out[1] == "  ln_gain_init  tune 2 of 4 done (2 completed), 1 stopped, 1 pending"
    assert status.lines(check / "ln_gain_init" / "0")[0] == f"run {check / 'ln_gain_init' / '0'}"  # a job: a run


@pytest.mark.parametrize("state,said", [("stopped", "stopped"), ("running", "stopped (its process is gone)")])
def test_a_stopped_check_says_so_and_how_to_continue_with_no_time_left(tmp_path, state, said):
    # Ctrl-C (its record says stopped) or kill -9 (its process gone): jobs pending, none running, no estimate
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    check, command = first_round(tmp_path, state, int(gone.stdout))
    out = status.lines(check)
    assert out[0] == f"check {check} ({said}: {command})"
    assert out[-1].startswith("  time       ") and out[-1].endswith(f"nothing running ({said}: {command} continues it)")
    assert not any("left" in line for line in out)


def test_a_stopped_check_rounds_sweep_says_the_checks_command_not_hydra_sweep_dir(tmp_path):
    from lnbench.launch.sweep import stop
    from lnbench.launch.sweep.end import end_of_sweep_block, job_statuses

    check, command = first_round(tmp_path, "stopped", os.getpid())
    sweep = check / "ln_gain_init"
    block = end_of_sweep_block(sweep, job_statuses(sweep))
    assert f"  continue   {command}: the check goes on" in block and "hydra.sweep.dir" not in block
    said = stop.message(sweep, 2, ["-m", "+experiment=ln_gain_init", f"hydra.sweep.dir={sweep}"])
    assert f"Resume the check with {command}:" in said and "hydra.sweep.dir" not in said
    (check / ".check.json").unlink()  # a sweep of its own: its own command
    assert "hydra.sweep.dir" in end_of_sweep_block(sweep, job_statuses(sweep))
