"""Without an extra (pyproject.toml), its launcher is refused with the extra to install, and lnbench check runs on
Hydra's basic launcher instead of joblib, saying so once. The same from an installed wheel: test_wheel.py."""

import importlib.util

import pytest
from hydra.errors import MissingConfigException

from lnbench.check import cli as check
from lnbench.config.hydra_errors import composing
from lnbench.errors import ConfigError


@pytest.mark.parametrize(
    "launcher, extra", [("joblib", "joblib"), ("submitit_slurm", "slurm"), ("submitit_local", "slurm")]
)
def test_a_launcher_of_a_missing_extra_is_refused_naming_the_extra(launcher, extra):
    typed = f"hydra/launcher={launcher}"
    with pytest.raises(ConfigError) as refused, composing(["seed=0,1", typed]):
        raise MissingConfigException(
            "not found", missing_cfg_file=f"hydra/launcher/{launcher}", options=["basic", "slurm"]
        )
    said = str(refused.value)
    assert said.startswith(f"{typed} is not allowed") and f"pip install 'lnbench[{extra}]'" in said and "basic" in said


def test_another_missing_preset_is_refused_as_before():
    with pytest.raises(ConfigError, match="there is no model preset 'ln_lstmm'"), composing(["model=ln_lstmm"]):
        raise MissingConfigException("not found", missing_cfg_file="model/ln_lstmm", options=["ln_lstm"])


def test_check_without_joblib_runs_on_the_basic_launcher_saying_so_once(monkeypatch, capsys, tmp_path):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if "joblib" in name else real(name, *a))
    args = check.Args(["fig6_mnist"], out=tmp_path)
    check.basic_launcher_unless_joblib(args)
    check.basic_launcher_unless_joblib(args)  # (main calls it once; a second call changes nothing)
    assert args.overrides == ["hydra/launcher=basic"]
    assert capsys.readouterr().err.count("pip install 'lnbench[joblib]'") == 1
    assert "hydra/launcher=basic" in check.sweep_command(args, "fig6_mnist")


def test_check_keeps_joblib_where_installed_and_the_launcher_you_chose(tmp_path):
    chosen = check.Args(["fig6_mnist"], out=tmp_path, overrides=["hydra/launcher=submitit_local"])
    check.basic_launcher_unless_joblib(chosen)
    assert chosen.overrides == ["hydra/launcher=submitit_local"]
    if importlib.util.find_spec("hydra_plugins.hydra_joblib_launcher"):
        installed = check.Args(["fig6_mnist"], out=tmp_path)
        check.basic_launcher_unless_joblib(installed)
        assert installed.overrides == [] and "hydra/launcher=joblib" in check.sweep_command(installed, "fig6_mnist")
