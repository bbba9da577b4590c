"""A sweep asks for something this machine does not have (a device, SLURM): refused before any job starts, as a
single run is, whichever launcher would run the jobs; one paragraph, exit 2, no sweep folder left behind."""

import logging

import pytest
import torch

from lnbench.cli import main

LOCAL_LAUNCHERS = ["basic", "joblib", "packed", "submitit_local"]
LACKING = {"cuda": "torch sees no CUDA device", "cuda:1": "torch sees no CUDA device", "mps": "MPS is not available"}


@pytest.fixture
def no_gpu(monkeypatch):
    """This machine as a CPU-only one, whatever it has."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)


def refused(args, capsys) -> str:
    code = main(["train", *args])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


def launcher_available(launcher):
    if launcher == "submitit_local":
        pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    if launcher == "joblib":
        pytest.importorskip("hydra_plugins.hydra_joblib_launcher")


CASES = [(launcher, "cuda") for launcher in LOCAL_LAUNCHERS] + [("basic", d) for d in ("cuda:1", "mps", "cpu,cuda")]


@pytest.mark.parametrize("launcher,device", CASES)
def test_a_sweep_on_a_device_the_machine_lacks_is_refused_before_any_job(launcher, device, no_gpu, tmp_path, capsys):
    launcher_available(launcher)
    sweep = tmp_path / "sweep"
    err = refused(
        ["-m", f"hydra/launcher={launcher}", f"device={device}", "seed=0,1", f"hydra.sweep.dir={sweep}"], capsys
    )
    lacking = device.split(",")[-1]
    assert err.startswith(f"lnbench: error: device={lacking} is not allowed here: {LACKING[lacking]}"), err
    assert not sweep.exists()


@pytest.mark.parametrize(
    "device,multirun", [("cuda:abc", False), ("cuda:-1", True), ("gpu", True), ("cuda:0:1", False)]
)
def test_a_device_name_torch_cannot_read_is_refused_not_a_bug(device, multirun, tmp_path, capsys):
    where = tmp_path / "out"
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    err = refused([*(["-m", "seed=0,1"] if multirun else []), f"device={device}", f"{key}={where}"], capsys)
    assert f"device='{device}' is not allowed: use auto, cpu, cuda or cuda:N (N = 0, 1, ...) or mps." in err
    assert not where.exists()


@pytest.mark.parametrize("launcher", ["slurm", "submitit_slurm"])
def test_a_slurm_sweep_needs_slurm_and_leaves_its_nodes_device_to_them(launcher, no_gpu, tmp_path, monkeypatch, capsys):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    from lnbench.launch.entry import CONF_DIR
    from lnbench.launch.preflight import preflight

    sweep = tmp_path / "sweep"
    args = ["-m", f"hydra/launcher={launcher}", "device=cuda", "seed=0,1", f"hydra.sweep.dir={sweep}"]
    monkeypatch.setenv("PATH", str(tmp_path))  # no srun
    # submitit_slurm's own warning goes to the root logger: none of an earlier in-process run's handlers
    monkeypatch.setattr(logging.getLogger(), "handlers", [])
    assert main(["train", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert (
        "Traceback" not in err
        and f"hydra/launcher={launcher} is not allowed here: this machine is no SLURM cluster's (no srun" in err
    )
    assert not sweep.exists()
    srun = tmp_path / "srun"
    srun.write_text("#!/bin/sh\n")
    srun.chmod(0o755)
    plan = preflight(args, CONF_DIR)  # the nodes' devices are theirs: not refused here
    assert plan is not None and plan.kind.remote and not sweep.exists()
