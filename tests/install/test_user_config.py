"""Defaults of your own (hydra_plugins/lnbench_user_config): the user's folder on Hydra's search path, its
local/default.yaml applied to every run after lnbench's presets and before +experiment and the command line."""

import textwrap

import pytest
from conftest import run_cli
from hydra import compose, initialize_config_dir

from lnbench import CONF_DIR
from lnbench.config.schema import register_configs


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    (tmp_path / "local").mkdir()
    (tmp_path / "local" / "default.yaml").write_text(
        textwrap.dedent("""\
        # @package _global_
        logger:
          wandb:
            entity: my-team
        steps: 77
        """)
    )
    (tmp_path / "local" / "laptop.yaml").write_text("# @package _global_\nsteps: 5\n")
    monkeypatch.setenv("LNBENCH_CONFIG_DIR", str(tmp_path))
    return tmp_path


def composed(*overrides, config_dir=CONF_DIR):
    register_configs()
    with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
        return compose("train", overrides=list(overrides))


def test_local_defaults_apply_under_experiment_and_command_line(user_dir):
    cfg = composed()
    assert (cfg.logger.wandb.entity, cfg.steps) == ("my-team", 77)
    assert composed("steps=3").steps == 3  # the command line wins
    assert composed("+experiment=smoke").steps == 4  # a preset's own value wins (smoke: 4 steps)
    assert composed("local=laptop").steps == 5 and composed("local=laptop").logger.wandb.entity is None


def test_without_a_folder_or_switched_off_the_presets_hold(tmp_path, monkeypatch):
    monkeypatch.setenv("LNBENCH_CONFIG_DIR", str(tmp_path / "none"))
    assert composed().steps == 2000
    monkeypatch.setenv("LNBENCH_CONFIG_DIR", "")
    assert composed().steps == 2000


def test_another_hydra_app_does_not_get_the_folder(user_dir, tmp_path):
    other = tmp_path / "other_app"
    other.mkdir()
    (other / "train.yaml").write_text("defaults:\n  - optional local: default\n  - _self_\nsteps: 1\n")
    with initialize_config_dir(config_dir=str(other), version_base="1.3"):
        assert compose("train").steps == 1


def test_cfg_job_says_where_the_values_came_from(user_dir):
    env = {"LNBENCH_CONFIG_DIR": str(user_dir), "WANDB_MODE": "offline"}
    done = run_cli("train", "--cfg", "job", env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "entity: my-team" in done.stdout and "steps: 77" in done.stdout
    assert str(user_dir / "local" / "default.yaml") in done.stderr and str(CONF_DIR) in done.stderr
    listed = run_cli("train", "--info", "defaults", env=env, timeout=120).stdout
    assert "local/default" in listed
