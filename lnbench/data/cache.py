"""Datasets kept by a process for the jobs it forks (lnbench.launch.process.warm): a sweep's jobs of one dataset config
share it instead of each making it again. A forked job gets the kept dataset as its parent holds it, copy-on-write
(its changes stay its own); a job with no kept dataset makes its own, as every job did before.

Kept only where the data is what the job would make itself: for a job on one torch thread, made on one (a
parent that ran torch's ops on several would hand its forked jobs an OpenMP thread pool they cannot use; a
parallel launcher gives each job one core, so its jobs run on one), by a dataset of lnbench's own, without
drawing from the global random generators (torch, numpy, python's), whose states a job's model initialisation
goes on from. At most KEEP datasets are kept, the last ones asked for (a sweep's seeds each make their own), and
at most KEEP_BYTES of their tensors (MNIST's 60,000 training images are 188 MB as floats).
"""

from __future__ import annotations

import json
import random
from typing import Any, Callable

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

KEEP = 4
KEEP_BYTES = 512 * 2**20
_kept: dict[str, Any] = {}  # key -> dataset, oldest first
_sizes: dict[str, int] = {}


def key(dataset_cfg: DictConfig, threads: int) -> str:
    return json.dumps([OmegaConf.to_container(dataset_cfg, resolve=True), threads], sort_keys=True, default=str)


def kept(dataset_cfg: DictConfig, threads: int) -> Any | None:
    """The dataset kept for this config for a job on `threads` torch threads (its runtime's), or None."""
    if not _kept:
        return None
    try:
        return _kept.get(key(dataset_cfg, threads))
    except Exception:  # noqa: BLE001 - a config that does not resolve: the job makes (and refuses) it itself
        return None


def keep(dataset_cfg: DictConfig, threads: int, make: Callable[[], Any]) -> bool:
    """Makes and keeps the dataset of `dataset_cfg` as a job on `threads` (1) threads would (True), unless it is
    kept already; False where it cannot be kept (see the module doc) or making it failed: the job then makes
    it itself, and meets the same error there, reported as its own."""
    target = str(dataset_cfg.get("_target_", ""))
    if threads != 1 or not target.startswith("lnbench.data."):
        return False
    try:
        k = key(dataset_cfg, threads)
    except Exception:  # noqa: BLE001
        return False
    if k in _kept:
        _kept[k], _sizes[k] = _kept.pop(k), _sizes.pop(k)  # the last asked for
        return True
    before, had = rng_states(), torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        dataset = make()
    except Exception:  # noqa: BLE001 - the job's own attempt reports it
        return False
    finally:
        torch.set_num_threads(had)
        drew = rng_states() != before
        restore(before)
    if drew:  # its making moved a global generator: a job must make it itself, and move it as it does
        return False
    size = nbytes(dataset)
    if size > KEEP_BYTES:
        return False
    while _kept and (len(_kept) >= KEEP or sum(_sizes.values()) + size > KEEP_BYTES):
        oldest = next(iter(_kept))
        del _kept[oldest], _sizes[oldest]
    _kept[k], _sizes[k] = dataset, size
    return True


def nbytes(obj: Any, depth: int = 5) -> int:
    """The bytes of the tensors and arrays an object holds (its attributes, their tuples, lists and dicts)."""
    if isinstance(obj, (torch.Tensor, np.ndarray)):
        return int(obj.nbytes)
    if depth == 0:
        return 0
    if isinstance(obj, dict):
        return sum(nbytes(v, depth - 1) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(nbytes(v, depth - 1) for v in obj)
    return nbytes(vars(obj), depth - 1) if hasattr(obj, "__dict__") else 0


def forget() -> None:
    _kept.clear()
    _sizes.clear()


def rng_states() -> tuple:
    _, key_, *rest = np.random.get_state()
    return torch.get_rng_state().tolist(), key_.tolist(), rest, random.getstate()


def restore(states: tuple) -> None:
    t, key_, rest, py = states
    torch.set_rng_state(torch.tensor(t, dtype=torch.uint8))
    np.random.set_state(("MT19937", np.array(key_, dtype=np.uint32), *rest))
    random.setstate(py)
