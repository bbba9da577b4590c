"""What a job process makes ready before it forks a sweep job (lnbench.launch.process.warm, lnbench.data.cache) changes
no number: a warm worker's second job, and a job on a kept dataset, log what a cold job of the same config logs."""

import shutil

import torch
import yaml
from conftest import TINY_CLI, metrics_without_time, run_cli, tiny

from lnbench.config.runtime import Runtime
from lnbench.data import cache as data_cache
from lnbench.launch.process.isolate import in_child_process
from lnbench.launch.process.warm import prepare
from lnbench.training.recipe import train


def test_a_warm_workers_jobs_log_what_a_cold_run_logs(tmp_path):
    """One joblib worker runs four jobs, seeds 0 and 1 at two learning rates: each after the first finds the
    worker warm (its imports, its git record), and the second of each seed finds its dataset kept, made for the
    job before it. Their metrics.jsonl equal single runs' (no sweep, no fork, nothing kept) of the same config."""
    common = ["steps=6", "log_every=2", "eval_every=3", *TINY_CLI]
    sweep = run_cli(
        "train", "-m", "seed=0,1", "optim.lr=0.001,0.01", "hydra/launcher=joblib", "hydra.launcher.n_jobs=1",
        f"hydra.sweep.dir={tmp_path / 'sweep'}", *common,
    )  # fmt: skip
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    jobs = {}
    for d in (tmp_path / "sweep").iterdir():
        if (d / ".hydra").is_dir():
            task = yaml.safe_load((d / ".hydra" / "overrides.yaml").read_text())
            jobs[tuple(o for o in task if o.split("=")[0] in ("seed", "optim.lr"))] = d
    assert len(jobs) == 4
    for overrides in (("seed=0", "optim.lr=0.01"), ("seed=1", "optim.lr=0.01")):
        single = run_cli("train", *overrides, f"hydra.run.dir={tmp_path / 'single'}", *common)
        assert single.returncode == 0, single.stderr[-3000:]
        cold = metrics_without_time(tmp_path / "single")
        assert len(cold) == 3 + 2 + 1  # train at 2, 4, 6; val at 3, 6; test
        assert metrics_without_time(jobs[overrides]) == cold, overrides
        shutil.rmtree(tmp_path / "single")


def kept_and_run(cfg, run_dir):
    run_dir.mkdir()
    summary = train(cfg, run_dir, runtime=Runtime(1, "test"))
    return summary["test"], data_cache.kept(cfg.dataset, 1) is not None  # asked for the job's one thread


def test_a_job_on_a_kept_dataset_logs_what_a_job_that_made_its_own_logs(tmp_path):
    cfg = tiny("ln_lstm", "adding", "threads=1", "logger=none", "seed=3")
    data_cache.forget()
    try:
        cold_test, had = in_child_process(tmp_path, kept_and_run, cfg, tmp_path / "cold")
        assert not had
        prepare(cfg, 1)
        warm_test, had = in_child_process(tmp_path, kept_and_run, cfg, tmp_path / "warm")
        assert had  # the job took the kept dataset
        assert warm_test == cold_test
        assert metrics_without_time(tmp_path / "warm") == metrics_without_time(tmp_path / "cold")
    finally:
        data_cache.forget()


def test_a_dataset_is_kept_only_where_a_job_would_make_the_same(tmp_path):
    cfg = tiny("ln_lstm", "adding", "threads=1", "seed=4")
    data_cache.forget()
    before = torch.get_rng_state()
    try:
        # its making draws from torch's global generator: a job must draw as it does, so it makes its own
        assert not data_cache.keep(cfg.dataset, 1, lambda: torch.rand(3))
        assert torch.equal(torch.get_rng_state(), before)  # and this process's generator is as it was
        assert not data_cache.keep(cfg.dataset, 2, lambda: object())  # a job on two threads: never kept
        assert not data_cache.keep(cfg.dataset, 1, lambda: 1 / 0)  # a failure is the job's own to meet
        assert data_cache.keep(cfg.dataset, 1, lambda: "made")
        for seed in range(data_cache.KEEP):  # the oldest goes once KEEP others were asked for
            assert data_cache.keep(tiny("ln_lstm", "adding", f"seed={10 + seed}").dataset, 1, lambda: "other")
        assert data_cache.keep(cfg.dataset, 1, lambda: "made again")
        big = torch.zeros(data_cache.KEEP_BYTES // 4 + 1)  # more bytes than a worker keeps
        assert not data_cache.keep(tiny("ln_lstm", "adding", "seed=99").dataset, 1, lambda: (big,))
        assert data_cache.kept(cfg.dataset, 1) == "made again"
        assert data_cache.kept(cfg.dataset, 2) is None  # kept for a job on one thread only
    finally:
        data_cache.forget()
