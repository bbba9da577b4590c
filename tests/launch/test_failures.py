"""Errors tell the user's mistake from ours (issue 24): input that validation refused is one paragraph and
exit 2; an exception raised in lnbench's or a user's component code is a bug: exit 1, its traceback on
stderr and in the run's crash.log, and a line saying where to report it."""

import sys

import pytest
from conftest import REPO, TINY_CLI, compose_train, run_cli, summary_of

from lnbench.errors import ConfigError, DataError, Diverged, Interrupted
from lnbench.launch import failures

# A registered model (the default ln_lstm's schema) whose constructor has a bug: tests/faults.py.
BUGGY = [*TINY_CLI, "steps=2", "model._target_=tests.faults.BuggySequenceModel"]
THE_BUG = "TypeError: object of type 'int' has no len()"


def test_a_bug_planted_in_a_models_constructor_is_reported_as_ours(tmp_path):
    run_dir = tmp_path / "run"
    r = run_cli("train", *BUGGY, f"hydra.run.dir={run_dir}", env={"PYTHONPATH": str(REPO)})
    sys.stderr.write(r.stderr)  # shown with -s: the output a user sees
    assert r.returncode == 1, r.stderr
    assert "Traceback (most recent call last)" in r.stderr and THE_BUG in r.stderr
    assert 'self.widths = len(kwargs["hidden_size"])' in r.stderr  # the frame of the bug itself
    assert "is not allowed" not in r.stderr and "lnbench: error:" not in r.stderr  # not sent to fix the config
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("lnbench: this is a bug, not a mistake in your input") and f"{run_dir / 'crash.log'}" in last
    crash = (run_dir / "crash.log").read_text()
    assert THE_BUG in crash and "tests/faults.py" in crash
    summary = summary_of(run_dir)
    assert summary["status"] == "failed" and summary["error"].startswith("TypeError")


def test_a_bug_in_a_sweep_job_fails_each_job_with_its_traceback_kept(tmp_path):
    r = run_cli("train", "-m", *BUGGY, "seed=0,1", f"hydra.sweep.dir={tmp_path}", env={"PYTHONPATH": str(REPO)})
    assert r.returncode == 1
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("lnbench: job")]
    assert (
        lines and THE_BUG in lines[0] and "this is a bug" in lines[0] and str(tmp_path / "0" / "crash.log") in lines[0]
    )
    for job in ("0", "1"):
        assert summary_of(tmp_path / job)["status"] == "failed"
        assert THE_BUG in (tmp_path / job / "crash.log").read_text()


def test_who_is_to_blame_for_an_error_while_building(tmp_path, monkeypatch):
    from lnbench.training.recipe import setup_data, setup_model, setup_optimizer

    monkeypatch.syspath_prepend(str(REPO))
    cfg = compose_train(["model.hidden_size=8", "model._target_=tests.faults.BuggySequenceModel"])
    spec = setup_data(cfg.dataset).spec
    with pytest.raises(TypeError, match="has no len"):  # ours: the constructor's own error, not a ConfigError
        setup_model(cfg.model, spec)
    (tmp_path / "brokenmod.py").write_text("import not_installed_anywhere\nclass Model: pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ImportError, match="not_installed_anywhere"):  # the module's own import fails: its bug
        setup_model(compose_train(["model._target_=brokenmod.Model"]).model, spec)
    with pytest.raises(ConfigError, match="model._target_=nowhere.Model is not allowed"):  # the user's: no such module
        setup_model(compose_train(["model._target_=nowhere.Model"]).model, spec)
    model = setup_model(compose_train(["model.hidden_size=8"]).model, spec)
    with pytest.raises(ConfigError, match=r"optim.betas=\[2.0, 0.9\] is not allowed"):  # torch checks its arguments
        setup_optimizer(compose_train(["optim.betas=[2.0,0.9]"]).optim, cfg.schedule, model, model.head.weight.device)


@pytest.mark.parametrize(
    "error,status,code,bug",
    [
        (ConfigError("x"), "failed", 2, False),
        (DataError("x"), "failed", 2, False),
        (Diverged(3, "d"), "diverged", 1, False),
        (Interrupted(15, 4, "d"), "interrupted", 143, False),
        (KeyboardInterrupt(), "interrupted", 130, False),
        (failures.JobCrashed("x"), "failed", 1, False),
        (TypeError("x"), "failed", 1, True),
        (RuntimeError("x"), "failed", 1, True),
    ],
)
def test_the_failure_policy(error, status, code, bug):
    assert failures.classify(error) == failures.Failure(status, code, bug)
