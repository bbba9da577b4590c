"""W&B trouble never costs results: no network, no key, or W&B raising mid-run, the run goes on, local
metrics stay complete and the log says how to sync later. W&B only ever sees loopback addresses here."""
import logging

import pytest

from conftest import metrics_without_time, summary_of, tiny
from lnbench.train import train

RUN = ["steps=6", "log_every=2", "eval_every=3", "checkpoint_every=4"]


@pytest.fixture(autouse=True)
def isolated_wandb(tmp_path, monkeypatch):
    """W&B pointed at a closed loopback port, with its settings, cache and credentials in tmp_path."""
    for var in ("WANDB_API_KEY", "WANDB_ENTITY", "WANDB_PROJECT", "WANDB_RUN_ID", "WANDB_RESUME", "WANDB_MODE"):
        monkeypatch.delenv(var, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("NETRC", str(home / "netrc"))
    for var, sub in (("WANDB_CONFIG_DIR", "config"), ("WANDB_CACHE_DIR", "cache"), ("WANDB_DATA_DIR", "data")):
        monkeypatch.setenv(var, str(home / sub))
    monkeypatch.setenv("WANDB_ERROR_REPORTING", "false")
    monkeypatch.setenv("WANDB_SILENT", "true")
    yield
    import wandb

    if wandb.run is not None:
        wandb.run.finish()


@pytest.fixture(scope="module")
def local_only(tmp_path_factory):
    """The metrics of the same run with W&B disabled: what every run below must still write."""
    run_dir = tmp_path_factory.mktemp("local")
    train(tiny("ln_lstm", "adding", *RUN), run_dir)
    return metrics_without_time(run_dir)


def offline_folders(run_dir):
    return sorted(p.name for p in (run_dir / "wandb").glob("offline-run-*"))


@pytest.mark.parametrize("key", [None, "a" * 40], ids=["no-key", "unreachable-server"])
def test_online_without_network_or_key_goes_on_offline(key, tmp_path, monkeypatch, caplog, local_only):
    if key:
        monkeypatch.setenv("WANDB_API_KEY", key)
    caplog.set_level(logging.WARNING, "lnbench")
    summary = train(tiny("ln_lstm", "adding", *RUN, "logger.mode=online", "logger.init_timeout=5"), tmp_path / "run")
    assert summary["status"] == "completed"
    assert metrics_without_time(tmp_path / "run") == local_only
    assert "W&B could not go online" in caplog.text and "wandb sync" in caplog.text
    assert "wandb sync" in summary["wandb"] and len(offline_folders(tmp_path / "run")) == 1


def test_wandb_raising_mid_run_costs_nothing(tmp_path, monkeypatch, caplog, local_only):
    from wandb.sdk.wandb_run import Run

    calls = []
    real = Run.log

    def log(self, *a, **k):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("the W&B service went away")
        return real(self, *a, **k)

    monkeypatch.setattr(Run, "log", log)
    caplog.set_level(logging.WARNING, "lnbench")
    summary = train(tiny("ln_lstm", "adding", *RUN, "logger.mode=offline"), tmp_path / "run")
    assert summary["status"] == "completed"
    assert metrics_without_time(tmp_path / "run") == local_only
    assert "W&B failed at step" in caplog.text and "metrics.jsonl keeps every step" in caplog.text
    assert len(calls) == 3  # no more W&B calls after the failure


def test_wandb_finish_raising_costs_nothing(tmp_path, monkeypatch, caplog, local_only):
    from wandb.sdk.wandb_run import Run

    def finish(self, *a, **k):
        raise TimeoutError("upload did not finish")

    monkeypatch.setattr(Run, "finish", finish)
    caplog.set_level(logging.WARNING, "lnbench")
    summary = train(tiny("ln_lstm", "adding", *RUN, "logger.mode=offline"), tmp_path / "run")
    assert summary["status"] == "completed" and summary_of(tmp_path / "run")["status"] == "completed"
    assert "W&B did not finish cleanly" in caplog.text
    monkeypatch.undo()


def test_a_resumed_run_logs_to_the_same_wandb_run(tmp_path, monkeypatch):
    import torch

    from lnbench.track import Tracker

    original = Tracker.log

    class HardStop(Exception):
        pass

    def log(self, split, step, values, **extra):
        original(self, split, step, values, **extra)
        if split == "train" and step == 6 and not getattr(Tracker, "stopped", False):
            Tracker.stopped = True
            raise HardStop

    monkeypatch.setattr(Tracker, "log", log)
    cfg = tiny("ln_lstm", "adding", *RUN, "steps=8", "logger.mode=offline")
    with pytest.raises(HardStop):
        train(cfg, tmp_path / "run")
    run_id = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)["wandb_id"]
    train(cfg, tmp_path / "run")
    folders = offline_folders(tmp_path / "run")
    assert len(folders) == 2 and all(f"-{run_id}" in f for f in folders)  # `wandb sync` joins them
    monkeypatch.delattr(Tracker, "stopped")
