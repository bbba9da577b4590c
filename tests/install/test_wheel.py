"""`pip install <repo>` as a user does it: the wheel built from the checkout's files, installed with the lock into a
fresh venv outside the checkout, and `lnbench` run from another folder, where nothing of the checkout can help it.

A few minutes, most of them installing torch and the rest (`make test-install`; CI runs it as its own step). torch is
installed as `make setup` installs it ($TORCH from $TORCH_INDEX, else `torch==` the version running here), so pip
takes it from its cache or the machine's wheels instead of downloading a CUDA build.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.install
ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements.lock"


def sh(*cmd, cwd=None, env=None, timeout=900) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def ok(done: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    said = f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert done.returncode == 0, f"{' '.join(done.args)} exited {done.returncode}:\n{said}"
    return done


def source_copy(dest: Path) -> Path:
    """The files git would commit (tracked and new, not ignored): no build/ or egg-info left in the checkout."""
    listed = sh("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=ROOT)
    files = [f for f in listed.stdout.split("\0") if f] if listed.returncode == 0 else None
    if files is None:  # not a git checkout: everything but what is never shipped
        never = (".git", ".venv", "outputs", "build", "*.egg-info", "__pycache__")
        shutil.copytree(ROOT, dest, ignore=shutil.ignore_patterns(*never))
        return dest
    for f in files:
        if (ROOT / f).is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, dest / f)
    return dest


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(the venv's bin folder, the environment to run it in, a working folder outside the checkout)."""
    tmp = tmp_path_factory.mktemp("wheel")
    assert ROOT not in tmp.resolve().parents, "the venv must be outside the checkout"
    # Nothing of the checkout on the path, for pip too: it would take the checkout's lnbench.egg-info (an editable
    # install's) for lnbench installed already, and skip the wheel.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(WANDB_MODE="offline", PATH=f"{tmp / 'venv' / 'bin'}{os.pathsep}{env['PATH']}")
    env["LNBENCH_CACHE"] = str(tmp / "kernels")  # the kernels built from the wheel's own sources, not a cached build
    wheel_dir = tmp / "dist"
    ok(sh(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", wheel_dir, source_copy(tmp / "src"), env=env))
    (wheel,) = wheel_dir.glob("lnbench-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "lnbench/conf/train.yaml" in names and "lnbench/conf/experiment/fig6_mnist.yaml" in names
    assert any(n.startswith("lnbench/nn/fast/csrc/") and n.endswith(".cpp") for n in names)
    assert "lnbench/nn/fast/csrc/kernel_common.h" in names  # both kernels include it
    assert not any(n.startswith(("calibration/", "tests/")) for n in names)  # a checkout's, not the package's
    ok(sh(sys.executable, "-m", "venv", tmp / "venv", env=env))
    pip = [tmp / "venv" / "bin" / "python", "-m", "pip", "install", "-q", "-c", LOCK]
    index = ["--index-url", os.environ["TORCH_INDEX"]] if os.environ.get("TORCH_INDEX") else []
    ok(sh(*pip, *index, os.environ.get("TORCH") or f"torch=={torch.__version__.split('+')[0]}", env=env))
    ok(sh(*pip, wheel, env=env))  # no extra: what `pip install <repo>` gives
    work = tmp / "elsewhere"
    work.mkdir()
    return tmp / "venv" / "bin", env, work


def lnbench(installed, *args) -> subprocess.CompletedProcess:
    bin_dir, env, work = installed
    return sh(bin_dir / "lnbench", *args, cwd=work, env=env)


def test_it_runs_from_its_own_files(installed):
    bin_dir, env, work = installed
    where = ok(sh(bin_dir / "python", "-c", "import lnbench; print(lnbench.CONF_DIR)", cwd=work, env=env)).stdout
    assert Path(where.strip()) == next((bin_dir.parent / "lib").glob("python3*")) / "site-packages" / "lnbench" / "conf"


def test_presets_train_sweep_and_report(installed):
    _, _, work = installed
    presets = ok(lnbench(installed, "presets")).stdout
    assert "fig6_mnist" in presets and "ln_lstm" in presets and "shakespeare" in presets
    run = ok(lnbench(installed, "train", "steps=5", "eval_every=5", "progress=false", "hydra.run.dir=run"))
    assert "incompatible or buggy" not in run.stderr + run.stdout  # Hydra's plugin scan without the slurm extra
    summary = json.loads((work / "run" / "summary.json").read_text())
    assert summary["status"] == "completed"
    if shutil.which("c++") or shutil.which("g++"):  # the wheel's C++ sources build: the run says so
        assert summary["provenance"]["kernels"].startswith("native ("), summary["provenance"]["kernels"]
    ok(
        lnbench(
            installed, "train", "-m", "steps=5", "eval_every=5", "progress=false", "seed=0,1", "hydra.sweep.dir=sweep"
        )
    )
    statuses = [json.loads(p.read_text())["status"] for p in (work / "sweep").glob("*/summary.json")]
    assert statuses == ["completed"] * 2
    ok(lnbench(installed, "report", "sweep"))
    assert any((work / "sweep" / "report").iterdir())


def test_without_the_extras_lnbench_says_which_to_install(installed):
    joblib = lnbench(installed, "train", "-m", "steps=5", "seed=0,1", "hydra/launcher=joblib", "hydra.sweep.dir=never")
    assert joblib.returncode == 2 and "pip install 'lnbench[joblib]'" in joblib.stderr, joblib.stderr
    slurm = lnbench(installed, "train", "-m", "steps=5", "seed=0,1", "hydra/launcher=slurm", "hydra.sweep.dir=never")
    assert slurm.returncode == 2 and "pip install 'lnbench[slurm]'" in slurm.stderr, slurm.stderr
    check = lnbench(installed, "check", "fig6_mnist", "--out", "check", "no_such_key=1")  # refused before any sweep
    assert check.returncode == 2 and check.stderr.count("pip install 'lnbench[joblib]'") == 1, check.stderr
    assert "hydra/launcher=basic" in check.stderr and not (installed[2] / "never").exists()
