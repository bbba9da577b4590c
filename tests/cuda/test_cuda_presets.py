"""On a GPU: every model preset trains a few steps on CUDA through the recipe, and a sweep of the CLI forks its jobs
from a process that never started CUDA (a child of one that had could not use it)."""

import json

import pytest
import torch
from conftest import REPO, run_cli, summary_of
from cuda_support import DEVICE, ON_GPU, REQUIRES_CUDA, fake_data, presets, tiny_cuda

from lnbench.nn.fast import triton_lstm
from lnbench.training.recipe import train

pytestmark = REQUIRES_CUDA


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return fake_data(tmp_path_factory)


@pytest.mark.parametrize("model,kind", presets())
def test_every_model_preset_trains_on_cuda(model, kind, data_dir, tmp_path):
    summary = train(tiny_cuda(model, kind, data_dir, "steps=2", "eval_every=2", "log_every=1"), tmp_path)
    assert summary["status"] == "completed" and summary["steps"] == 2
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["split"] for r in records] == ["train", "train", "val", "test"]
    assert all(r["loss"] == r["loss"] and abs(r["loss"]) < 1e6 for r in records)  # finite
    prov = summary["provenance"]
    assert prov["device"] == DEVICE
    if not ON_GPU:
        return
    assert prov["gpu"] == torch.cuda.get_device_name()
    assert prov["cuda_tf32"] is False and prov["cudnn_deterministic"] is True
    if model == "ln_lstm":  # the GPU path lnbench picks for it, named in the provenance
        assert prov["kernels"] == ("triton (CUDA graphs)" if triton_lstm.available() else "torch ops (CUDA)")
    elif model in ("lstm", "gru"):
        assert prov["kernels"] == "torch's fused kernel (cuDNN)"


def test_a_cuda_sweep_forks_jobs_that_use_cuda(tmp_path):
    """Two jobs of a CLI sweep on CUDA: the sweep's process checks the jobs (device, memory) without starting CUDA,
    so each forked job starts it itself, and both complete on the GPU."""
    out = tmp_path / "sweep"
    done = run_cli(
        "train", "-m", "model=lstm,ln_lstm", "model.hidden_size=8", "dataset=adding", "dataset.seq_len=8",
        "dataset.val_size=16", "dataset.test_size=16", "dataset.batch_size=8", "steps=3", "eval_every=3",
        f"device={DEVICE}", "progress=false", "logger=none", f"hydra.sweep.dir={out}", cwd=REPO, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "started CUDA" not in done.stderr  # the jobs were forked, not run in the sweep's own process
    for job in ("0", "1"):
        summary = summary_of(out / job)
        assert summary["status"] == "completed" and summary["provenance"]["device"] == DEVICE


def test_a_packed_sweep_on_cuda_completes_every_replica(tmp_path):
    """hydra/launcher=packed on the GPU: 3 seeds as one pack, each an ordinary completed run whose numbers are its
    own (an evaluation once summed a CUDA metric with a count kept on the CPU, and every replica failed)."""
    out = tmp_path / "sweep"
    done = run_cli(
        "train", "-m", "hydra/launcher=packed", "model=ln_lstm", "model.hidden_size=8", "dataset=adding",
        "dataset.seq_len=8", "dataset.val_size=16", "dataset.test_size=16", "dataset.batch_size=8", "steps=3",
        "eval_every=3", "seed=0,1,2", f"device={DEVICE}", "progress=false", "logger=none", f"hydra.sweep.dir={out}",
        cwd=REPO, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    summaries = [summary_of(out / job) for job in ("0", "1", "2")]
    assert all(s["status"] == "completed" and s["packed"] == 3 for s in summaries)
    assert len({s["test"]["mse"] for s in summaries}) == 3  # three seeds, three models
