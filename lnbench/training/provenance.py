"""Where a run's numbers came from: the code (git commit, uncommitted changes), the library versions and
the machine. Written into every run's summary.json (and its W&B summary), so runs compared months later,
or across machines, say what differed.

Cheap by design (about 10 ms): versions are read from the installed packages' metadata, never by importing
them (wandb's import alone costs seconds), and git is asked only when the code runs from a checkout.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from lnbench.config.runtime import Runtime

PACKAGES = ("lnbench", "torch", "hydra-core", "omegaconf", "wandb")
# How the launcher set up the process, recorded where set: how idle OpenMP threads wait, a preloaded
# allocator, malloc's own settings, a lowered ISA for torch's kernels (and lnbench's)
RUNTIME_ENV = (
    "OMP_WAIT_POLICY",
    "GOMP_SPINCOUNT",
    "OMP_NUM_THREADS",
    "LD_PRELOAD",
    "MALLOC_ARENA_MAX",
    "ATEN_CPU_CAPABILITY",
    "LNBENCH_NATIVE",
)
SOURCE = Path(__file__).resolve().parents[2]  # the checkout's root when lnbench runs from one


def collect(device: str | None = None, kernels: str | None = None, runtime: Runtime | None = None) -> dict[str, Any]:
    """Flat keys (the W&B summary shows them as provenance/<key>); values a JSON file can hold. `kernels`:
    what runs the model's recurrence (lnbench.models.sequence), which decides its last bits; `runtime`: the
    run's thread count and how it was decided (lnbench.config.runtime), since it decides them too, and its heap."""
    info: dict[str, Any] = {**git_state(SOURCE)}
    info.update({f"{name.replace('-', '_')}_version": version(name) for name in PACKAGES})
    info.update(
        python=platform.python_version(),
        os=f"{platform.system()} {platform.release()}",
        host=platform.node(),
        cpu=cpu_model(),
        cpu_count=os.cpu_count(),
    )
    if runtime is not None:
        info.update(torch_threads=runtime.threads, threads_chosen_by=runtime.why)
    info.update({k.lower(): os.environ[k] for k in RUNTIME_ENV if os.environ.get(k)})
    if runtime is not None and runtime.keeps_freed_memory:
        info["malloc"] = "keeps freed memory (lnbench.launch.process.heap)"
    if kernels is not None:
        info["kernels"] = kernels
    if device is not None:
        info["device"] = device
        if device.startswith("cuda") and torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return info


@lru_cache(maxsize=None)  # the installed version of the code this process runs: read once (a job's parent reads it)
def version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


@lru_cache(maxsize=None)
def git_state(root: Path) -> dict[str, Any]:
    """{git_commit, git_dirty} of the checkout at root; {} when lnbench is not run from one (an installed
    wheel) or git is missing. Dirty counts changes to tracked files: run outputs are git-ignored."""
    if not (root / ".git").exists():
        return {}
    try:
        commit = _git(root, "rev-parse", "HEAD")
        changed = _git(root, "status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return {}
    return {"git_commit": commit, "git_dirty": bool(changed)}


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10, check=True)
    return done.stdout.strip()


@lru_cache(maxsize=None)
def cpu_model() -> str:
    """The CPU's marketing name (Linux: /proc/cpuinfo; elsewhere what platform knows). A name without a model
    number (a VM's "AMD EPYC") gets the family and model, which tell one generation from the next."""
    try:
        info = dict(
            ln.split(":", 1) for ln in Path("/proc/cpuinfo").read_text().split("\n\n")[0].splitlines() if ":" in ln
        )
        info = {k.strip(): v.strip() for k, v in info.items()}
        name = info.get("model name") or info.get("Model")
        if name:
            generic = not any(ch.isdigit() for ch in name) and "cpu family" in info
            return f"{name} (family {info['cpu family']} model {info.get('model', '?')})" if generic else name
    except OSError:
        pass
    if sys.platform == "darwin":
        try:
            return subprocess.run(
                ["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True, timeout=5
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return platform.processor() or platform.machine()
