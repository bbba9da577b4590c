"""Nothing a user types breaks a run, or someone else's (issue 9).

- bad input of every kind (an unknown key added with `+`, a value torch's constructors refuse, a dataset
  that cannot be built) is one paragraph, exit 2, and leaves nothing on disk;
- a refused or no-op invocation leaves an existing run directory byte for byte as it was;
- a sweep survives a job that segfaults or is SIGKILLed (what the OOM killer sends), and re-running
  it retries only that job;
- Ctrl-C on a sweep exits 130 with the counts and the command that resumes it, under every launcher;
- weight norm's data-dependent init works on every implementation path.
"""

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import (
    REPO,
    TINY_CLI,
    lnbench_cmd,
    locked_by_another_process,
    needs_data,
    run_cli,
    start_cli,
    summary_of,
    tiny,
)

from lnbench.cli import main


def snapshot(folder: Path) -> dict[str, tuple[int, str]]:
    """Every file under `folder` (hidden ones too): its size and SHA-256; folders as (-1, "")."""
    out = {}
    for p in sorted(folder.rglob("*")):
        rel = str(p.relative_to(folder))
        out[rel] = (p.stat().st_size, hashlib.sha256(p.read_bytes()).hexdigest()) if p.is_file() else (-1, "")
    return out


def refused(args, capsys) -> str:
    """`lnbench train <args>` in this process: it must be refused before Hydra runs (exit 2, one paragraph)."""
    code = main(["train", *args])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("lnbench: error: "), err
    assert "Traceback" not in err
    return lines[0]


BASE = ["model.hidden_size=8", "threads=1", "progress=false", "logger.wandb.mode=disabled", "steps=2"]
# (overrides, what the paragraph must say: the key as typed, and what is allowed)
BAD = {
    "plus-unknown-top": (["+foo=1"], ["foo=1 is not allowed", "Its keys are checkpoint_every,"]),
    "plus-unknown-nested": (["+model.foo=1"], ["model.foo=1 is not allowed", "Its keys are cell,"]),
    "plus-other-optimizers-key": (
        ["+optim.momentum=0.9"],
        ["optim.momentum=0.9 is not allowed", "AdamConfig", "Its keys are betas,"],
    ),
    "plusplus-unknown": (["++model.norm.bar=2"], ["model.norm.bar=2 is not allowed", "Its keys are data_init,"]),
    "delete-required": (["~seed"], ["~seed is not allowed", "seed=<value>"]),
    "betas-out-of-range": (
        ["optim.betas=[2.0,0.9]"],
        ["optim.betas[0]=2.0 is not allowed", "it must be >= 0 and < 1"],
    ),
    "eps-not-positive": (["optim.eps=-1"], ["optim.eps=-1.0 is not allowed: it must be a number > 0"]),
    "target-not-importable": (
        ["dataset._target_=nowhere.Data"],
        ["dataset._target_=nowhere.Data is not allowed", "No module named 'nowhere'"],
    ),
    "seq-mnist-len-5": (
        ["dataset=seq_mnist", "dataset.seq_len=5"],
        ["dataset.seq_len=5 is not allowed for seq_mnist: it must divide 784"],
    ),
    "negative-seed": (["seed=-1"], ["seed=-1 is not allowed: it must be an integer >= 0"]),
    "negative-eta-min": (
        ["schedule=cosine", "schedule.main.eta_min=-1"],
        ["schedule.main.eta_min=-1 is not allowed: it is the learning rate the cosine ends at: a number >= 0"],
    ),
    "end-factor-above-1": (["schedule=linear", "schedule.main.end_factor=2"], ["schedule.main.end_factor=2 is not"]),
    "missing-data-dir": (
        ["dataset=mnist", "dataset.data_dir=/nonexistent/data"],
        ["no MNIST IDX files under /nonexistent/data"],
    ),
    "wrong-type": (["steps=ten"], ["steps=ten is not allowed", "could not be converted to Integer"]),
    "bad-enum": (
        ["model.norm.kind=instance"],
        ["model.norm.kind=instance is not allowed", "expected one of [none, batch, layer, weight, rms, group]"],
    ),
    "sweep-with-a-typo": (
        ["-m", "seed=0,x"],
        ["seed=x is not allowed (in the sweep job", "could not be converted to Integer"],
    ),
    "sweep-with-unknown-key": (
        ["-m", "steps=2,3", "+stepz=1"],
        ["stepz=1 is not allowed", "Its keys are checkpoint_every,"],
    ),
    # issue 32: plausible input that used to be a traceback, pass without a word, or bury the point
    "betas-one": (["optim.betas=[0.9]"], ["optim.betas=[0.9] is not allowed: Adam takes two decay rates"]),
    "seed-over-64-bits": (
        ["seed=99999999999999999999"],
        ["seed=99999999999999999999 is not allowed: it must be a 64-bit integer"],
    ),
    "steps-over-64-bits": (
        ["steps=99999999999999999999"],
        ["steps=99999999999999999999 is not allowed: it must be a 64-bit integer"],
    ),
    "joblib-no-slots": (
        ["-m", "seed=0,1", "hydra/launcher=joblib", "hydra.launcher.n_jobs=0"],
        ["hydra.launcher.n_jobs=0 is not allowed: it is how many jobs joblib runs at once"],
    ),
    "same-job-twice": (["-m", "seed=0,0"], ["seed=0,0 is not allowed: it sweeps seed=0 more than once"]),
    "same-preset-twice": (
        ["-m", "model=ln_lstm,lstm,ln_lstm"],
        ["model=ln_lstm,lstm,ln_lstm is not allowed: it sweeps model=ln_lstm more"],
    ),
    "model-too-big": (
        ["model.hidden_size=100000000"],
        [
            "model.hidden_size=100000000 is not allowed: "
            "lnbench.models.SequenceModel cannot be built in this machine's memory"
        ],
    ),
    "imports-not-a-list": (["imports=mynorm"], ["imports takes a list: write imports=[mynorm]"]),
    "misspelt-key": (["optim.lrr=0.1"], ["AdamConfig has no key 'lrr'. Did you mean lr?"]),
    "misspelt-added-key": (["+model.hiden_size=3"], ["has no key 'hiden_size'. Did you mean hidden_size?"]),
    "misspelt-preset": (["model=ln_lstmm"], ["there is no model preset 'ln_lstmm'. Did you mean ln_lstm or wn_lstm?"]),
    "wn-init-one-step": (
        ["model=wn_lstm", "model.norm.data_init=true", "dataset=seq_mnist", "dataset.seq_len=1"],
        ["model.norm.data_init=true could initialise only 1 of the 2"],
    ),
}


NEEDS_DATA = {"wn-init-one-step"}  # MNIST: only a sequence dataset of one-step sequences gets that far
# 10 s each (the memory check sizes the model); a sweep's job too big is in the default suite (test_preflight)
SLOW = {"model-too-big"}


@pytest.mark.parametrize(
    "overrides,says",
    [
        pytest.param(*v, id=k, marks=[needs_data] * (k in NEEDS_DATA) + [pytest.mark.slow] * (k in SLOW))
        for k, v in BAD.items()
    ],
)
def test_bad_input_is_one_paragraph_exit_2_and_nothing_on_disk(overrides, says, tmp_path, capsys):
    flags = [o for o in overrides if o == "-m"]  # Hydra's flags go before the overrides
    rest = [o for o in overrides if o != "-m"]
    line = refused([*flags, *BASE, *rest, f"hydra.run.dir={tmp_path}/run", f"hydra.sweep.dir={tmp_path}/sweep"], capsys)
    for s in says:
        assert s in line, line
    assert list(tmp_path.iterdir()) == []


# What torch's SGD refuses and no domain of lnbench's covers: Nesterov momentum without momentum.
TORCH_REFUSES = ["optim=sgd", "optim.nesterov=true", "optim.momentum=0"]


def test_the_real_cli_exits_2_for_an_error_torch_raises(tmp_path):
    r = run_cli("train", *TINY_CLI, *TORCH_REFUSES, f"hydra.run.dir={tmp_path}/run")
    assert r.returncode == 2 and "Traceback" not in r.stderr and not (tmp_path / "run").exists()
    assert r.stderr.strip().splitlines() == [r.stderr.strip()] and "Nesterov momentum requires" in r.stderr


def test_hydra_full_error_still_shows_the_traceback_of_a_torch_error(tmp_path):
    r = run_cli("train", *TINY_CLI, *TORCH_REFUSES, f"hydra.run.dir={tmp_path}/run", env={"HYDRA_FULL_ERROR": "1"})
    assert r.returncode != 0 and "Traceback" in r.stderr and "Nesterov momentum requires" in r.stderr


# ---- refused and no-op invocations change nothing in an existing run directory -------------------
@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("finished") / "run"
    r = run_cli("train", *TINY_CLI, "steps=3", "eval_every=3", f"hydra.run.dir={run_dir}")
    assert r.returncode == 0, r.stderr
    return run_dir


@pytest.mark.slow
def test_refused_and_no_op_invocations_leave_a_run_directory_as_it_was(finished_run, tmp_path):
    before = snapshot(finished_run)
    assert ".lock" not in before and "crash.log" not in before  # a finished run leaves neither
    invocations = {  # args -> expected exit code
        (f"resume={finished_run}",): 0,  # nothing to do: it completed
        (f"resume={finished_run}", "steps=5"): 2,  # would change the config
        (f"resume={finished_run}", "+foo=1"): 2,
        (f"resume={finished_run}", "-m"): 2,
        (*TINY_CLI, "steps=3", "eval_every=3", f"hydra.run.dir={finished_run}", "optim.betas=[2.0,0.9]"): 2,
        (*TINY_CLI, "steps=4", f"hydra.run.dir={finished_run}"): 2,  # another config in its directory
    }
    for args, code in invocations.items():
        r = run_cli("train", *args)
        assert r.returncode == code, (args, r.stderr)
        assert "Traceback" not in r.stderr
        assert snapshot(finished_run) == before, args
    overrides = (finished_run / ".hydra" / "overrides.yaml").read_text()
    assert "resume=" not in overrides and "hydra.run.dir" not in overrides


@pytest.mark.slow
def test_a_resume_refused_because_the_run_is_in_use_leaves_its_crash_log(finished_run, tmp_path):
    """The holder of the lock keeps its crash.log (faulthandler's file) and its lock; the refused process
    changes nothing (it used to delete the crash.log, and the holder then died with FileNotFoundError)."""
    with locked_by_another_process(finished_run, with_crash_log=True):
        before = snapshot(finished_run)
        for args in (
            [f"resume={finished_run}"],
            [*TINY_CLI, "steps=3", "eval_every=3", f"hydra.run.dir={finished_run}"],
        ):
            r = run_cli("train", *args)
            assert r.returncode == 2 and "is in use by another lnbench process" in r.stderr, r.stderr
            assert snapshot(finished_run) == before
    (finished_run / "crash.log").unlink()


@pytest.mark.slow
def test_a_resumed_run_keeps_the_overrides_it_was_started_with(tmp_path):
    run_dir = tmp_path / "run"
    assert (
        run_cli(
            "train", *TINY_CLI, "steps=4", "checkpoint_every=2", "eval_every=2", f"hydra.run.dir={run_dir}"
        ).returncode
        == 0
    )
    saved = {p: (run_dir / ".hydra" / p).read_bytes() for p in ("overrides.yaml", "config.yaml", "hydra.yaml")}
    summary = summary_of(run_dir)
    (run_dir / "summary.json").write_text(json.dumps({**summary, "status": "interrupted"}))  # as if stopped
    r = run_cli("train", f"resume={run_dir}")
    assert r.returncode == 0, r.stderr
    assert {p: (run_dir / ".hydra" / p).read_bytes() for p in saved} == saved


def test_run_lock_is_taken_once_and_leaves_no_file(tmp_path):
    """Nothing locks a run twice (issue 24: three locks per run), so a second lock is refused even in the
    process that holds the first, as in another one."""
    from lnbench.errors import ConfigError
    from lnbench.runs import RunLock

    with RunLock(tmp_path):
        with pytest.raises(ConfigError, match="is in use by another lnbench process"):
            RunLock(tmp_path)
        assert (tmp_path / ".lock").exists()  # the refused one leaves the holder's file alone
        other = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from lnbench.runs import RunLock; RunLock(sys.argv[1])",
                str(tmp_path),
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        assert other.returncode != 0 and "ConfigError" in other.stderr and "is in use" in other.stderr
    assert not (tmp_path / ".lock").exists()
    with RunLock(tmp_path):  # and it can be taken again
        pass


# ---- a sweep survives any one job ---------------------------------------------------------------
FAULTY_SWEEP = [
    "-m",
    "seed=0,1,2",
    "dataset._target_=tests.faults.CrashingAdding",
    "steps=3",
    "eval_every=3",
    *TINY_CLI,
]


def sweep(sweep_dir: Path, *args: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "WANDB_MODE": "disabled", "PYTHONPATH": str(REPO), **(env or {})}
    full_env.pop("HYDRA_FULL_ERROR", None)
    return subprocess.run(
        [*lnbench_cmd(), "train", *args, f"hydra.sweep.dir={sweep_dir}"],
        cwd=REPO,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def statuses(sweep_dir: Path) -> dict[str, str]:
    return {p.parent.name: json.loads(p.read_text())["status"] for p in sorted(sweep_dir.glob("*/summary.json"))}


@pytest.mark.parametrize(
    "fault,launcher",
    [
        pytest.param("segv", "basic", marks=pytest.mark.slow),  # the default suite has test_errors' failing sweep job
        pytest.param("kill", "basic", marks=pytest.mark.slow),
        pytest.param("segv", "joblib", marks=pytest.mark.slow),
        pytest.param("kill", "joblib", marks=pytest.mark.slow),
    ],
)
def test_a_sweep_survives_a_crashing_job_and_a_rerun_retries_only_it(fault, launcher, tmp_path):
    d = tmp_path / "sweep"
    extra = ["hydra/launcher=joblib"] if launcher == "joblib" else []
    r = sweep(d, *FAULTY_SWEEP, *extra, env={"LNBENCH_TEST_FAULT": f"{fault}:1"})
    assert statuses(d) == {"0": "completed", "1": "failed", "2": "completed"}, r.stderr
    assert r.returncode == 1 and "Traceback" not in r.stderr
    crash = (d / "1" / "crash.log").read_text()
    assert {"segv": "Segmentation fault", "kill": "SIGKILL"}[fault] in crash
    assert {"segv": "SIGSEGV", "kill": "OOM killer"}[fault] in json.loads((d / "1" / "summary.json").read_text())[
        "error"
    ]
    assert not list(d.glob("*/.lock"))
    done = {j: snapshot(d / j) for j in ("0", "2")}
    done = {j: {k: v for k, v in s.items() if not k.startswith((".hydra", "train.log"))} for j, s in done.items()}

    r = sweep(d, *FAULTY_SWEEP, *extra)  # the fault gone: only job 1 trains, from its checkpoint
    assert r.returncode == 0, r.stderr
    assert statuses(d) == {"0": "completed", "1": "completed", "2": "completed"}
    for j, files in done.items():
        assert {k: v for k, v in snapshot(d / j).items() if k in files} == files
    assert not (d / "1" / "crash.log").read_text() == "" and summary_of(d / "1")["steps"] == 3


# ---- Ctrl-C on a sweep --------------------------------------------------------------------------
LONG_SWEEP = ["-m", "seed=0,1,2", "steps=100000", "log_every=5", "checkpoint_every=1000", *TINY_CLI]


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["basic", "joblib", "warm", "submitit_local"])
def test_ctrl_c_on_a_sweep_exits_130_with_the_command_to_resume(launcher, tmp_path):
    d = tmp_path / "sweep"
    extra = [] if launcher == "basic" else [f"hydra/launcher={launcher}"]
    p = start_cli("train", *LONG_SWEEP, *extra, f"hydra.sweep.dir={d}")  # its own process group, as a shell runs it
    deadline = time.time() + 300

    def training() -> bool:  # a job has logged a training step (whole lines only)
        return any(
            line.endswith("}") and json.loads(line).get("split") == "train"
            for j in d.glob("*/metrics.jsonl")
            for line in j.read_text().splitlines()
        )

    try:
        while not training():
            assert time.time() < deadline and p.poll() is None, p.communicate()
            time.sleep(0.5)
        os.killpg(p.pid, signal.SIGINT)
        out, err = p.communicate(timeout=300)
    finally:  # a failed or timed-out test must not leave its long sweep running (submitit jobs have their own sessions)
        kill_processes_naming(str(d))
    assert p.returncode == 130, err
    assert "Traceback" not in err + out
    (line,) = [ln for ln in err.splitlines() if ln.startswith("lnbench: ")]
    assert "SIGINT received" in line and "job(s) completed" in line and "interrupted with a checkpoint" in line
    assert f"hydra.sweep.dir={d}`" in line and "lnbench train -m seed=0,1,2" in line
    interrupted = [j for j, s in statuses(d).items() if s == "interrupted"]
    assert interrupted and all((d / j / "checkpoint.pt").exists() for j in interrupted)


def test_ctrl_c_while_a_submitit_job_warms_up_is_an_interrupted_job(tmp_path, monkeypatch):
    """A Ctrl-C in a submitit job's first second (warm_up's imports) ends the job as interrupted, with an
    answer for the waiting sweep; raised out of the job, submitit reports no result and the sweep a
    traceback and exit 1 (the slow Ctrl-C test above hit that window)."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from omegaconf import open_dict, read_write

    from lnbench.config.launchers import SUBMITIT_LOCAL
    from lnbench.config.schema import register_configs
    from lnbench.launch import start
    from lnbench.launch.entry import CONF_DIR, Job
    from lnbench.launch.preflight import Plan, without_hydra

    register_configs()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose("train", overrides=[*TINY_CLI, "hydra/launcher=submitit_local"], return_hydra_config=True)
    with read_write(cfg), open_dict(cfg):
        cfg.hydra.runtime.output_dir = str(tmp_path / "0")
        cfg.hydra.mode = RunMode.MULTIRUN
        cfg.hydra.job.num = 0

    def ctrl_c():
        raise KeyboardInterrupt

    monkeypatch.setattr(start, "warm_up", ctrl_c)  # the job's warm-up (lnbench.launch.process.isolate)
    HydraConfig.instance().set_config(cfg)
    try:
        answer = Job(Plan([], True, tmp_path, SUBMITIT_LOCAL))(without_hydra(cfg))
    except KeyboardInterrupt:
        pytest.fail("the Ctrl-C escaped the job: submitit gets no result, the sweep prints a traceback")
    finally:
        HydraConfig.instance().cfg = None
    assert answer == {"status": "interrupted"}
    assert not list((tmp_path / "0").glob(".lock*"))  # the run's lock was let go


def kill_processes_naming(text: str) -> None:
    """SIGKILL every process whose command line contains `text` (here: a test's own sweep directory)."""
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if text in (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                os.kill(int(proc.name), signal.SIGKILL)
        except (OSError, ValueError):
            pass


# ---- weight norm's data-dependent init on every path --------------------------------------------
@pytest.mark.parametrize(
    "model,impl", [(m, i) for m in ("wn_lstm", "wn_gru") for i in ("auto", "fast", "reference")] + [("wn_mlp", None)]
)
def test_weight_norm_data_init_normalizes_every_layer_on_every_path(model, impl):
    from hydra.utils import instantiate

    from lnbench.nn.norm import weight_norm_data_init
    from lnbench.training.recipe import setup_model

    dataset_name = "mnist" if model == "wn_mlp" else "adding"
    cfg = tiny(model, dataset_name, "model.norm.data_init=true", *([f"model.impl={impl}"] if impl else []))
    from conftest import HAVE_DATA

    if dataset_name == "mnist" and not HAVE_DATA:
        pytest.skip("real data not found")
    ds = instantiate(cfg.dataset, _convert_="all")
    x, _ = ds.train_batch(0)

    def built(c):
        torch.manual_seed(0)
        return setup_model(c.model, ds.spec)

    m = built(cfg)
    assert weight_norm_data_init(m, x) == 2
    with torch.no_grad():
        if model == "wn_mlp":
            a = m.body[0](x)
        else:
            a = m.cells[0].weight_x(x.transpose(0, 1)).reshape(-1, m.cells[0].weight_x.out_features)
    assert torch.allclose(a.mean(0), torch.zeros(()), atol=1e-4) and torch.allclose(
        a.std(0, unbiased=False), torch.ones(()), atol=1e-3
    )
    if model != "wn_mlp":  # the recurrent matrix too (its g is no longer ||v||, as after a plain init)
        wh = m.cells[0].weight_h.parametrizations.weight
        assert not torch.allclose(wh.original0.squeeze(1), wh.original1.norm(dim=1))
        ref = built(tiny(model, dataset_name, "model.norm.data_init=true", "model.impl=reference"))
        weight_norm_data_init(ref, x)
        assert all(
            torch.equal(p, q) for p, q in zip(m.state_dict().values(), ref.state_dict().values())
        )  # any path: the same init
