"""Defaults of your own (hydra_plugins/lnbench_user_config): the user's folder on Hydra's search path, its
local/default.yaml applied to every run after lnbench's presets and before +experiment and the command line."""

import re
import textwrap

import pytest
from conftest import REPO, TINY_CLI, run_cli
from hydra import compose, initialize_config_dir

from lnbench import CONF_DIR
from lnbench.cli import main
from lnbench.config.schema import register_configs
from tests.cli.test_hardening import refused


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


# ---- issue 40: defaults of your own that cannot break lnbench ---------------------------------------------------
README = (REPO / "README.md").read_text()
EXAMPLE = re.search(r"```yaml\n(# ~/.config/lnbench/local/default.yaml\n.*?)```", README, re.S).group(1)


def test_the_readmes_example_as_written_applies_where_each_key_exists(tmp_path, monkeypatch):
    """The README's own snippet: data_dir for a dataset read from files, the entity while W&B is on; elsewhere
    ignored, never an error (it used to refuse every run on the adding problem, and every `logger=none` run)."""
    (tmp_path / "local").mkdir()
    (tmp_path / "local" / "default.yaml").write_text(EXAMPLE)
    monkeypatch.setenv("LNBENCH_CONFIG_DIR", str(tmp_path))
    plain = composed()  # adding: no data_dir; W&B on
    assert plain.logger.wandb.entity == "my-team" and "data_dir" not in plain.dataset
    assert composed("dataset=mnist").dataset.data_dir == "/scratch/me/data"
    assert dict(composed("logger=none").logger) == {}
    assert composed("dataset=mnist", "dataset.data_dir=/mine").dataset.data_dir == "/mine"  # the command line wins


def test_the_readmes_example_runs_and_says_once_what_it_ignored(tmp_path):
    (tmp_path / "local").mkdir()
    (tmp_path / "local" / "default.yaml").write_text(EXAMPLE)
    env = {"LNBENCH_CONFIG_DIR": str(tmp_path)}
    run = tmp_path / "run"
    tiny = [a for a in TINY_CLI if not a.startswith("logger.")]
    done = run_cli("train", *tiny, "logger=none", f"hydra.run.dir={run}", env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    said = [ln for ln in done.stderr.splitlines() if "your defaults in" in ln]
    assert len(said) == 1 and "dataset.data_dir, logger.wandb.entity" in said[0] and "ignored here" in said[0]


def test_a_sweep_over_datasets_applies_data_dir_to_the_jobs_that_read_files(user_dir, capsys):
    (user_dir / "local" / "default.yaml").write_text(EXAMPLE)
    from lnbench.launch.preflight import preflight

    register_configs()
    plan = preflight(
        ["-m", "dataset=adding,mnist", "model=mlp,ln_lstm", f"hydra.sweep.dir={user_dir / 's'}"], str(CONF_DIR)
    )
    assert plan is not None and not (user_dir / "s").exists()
    notes = [ln for ln in capsys.readouterr().err.splitlines() if "your defaults in" in ln]
    assert len(notes) == 1 and "dataset.data_dir" in notes[0]  # once, for the jobs on the adding problem


@pytest.mark.parametrize(
    "text,says",
    [
        ("# @package _global_\nsteps: 5\nlogger:\n  wandb: [\n", ["default.yaml is not YAML: line 5, column 1"]),
        ("- steps: 5\n", ["default.yaml, line 1: the file must be a mapping"]),
        ("steps: 5\ndataset:\n  data_dri: /x\n", ["default.yaml, line 3: dataset.data_dri is not a key", "data_dir?"]),
        ("threads_follow: 2\n", ["default.yaml, line 1: threads_follow: 2 is not allowed", "true or false"]),
        ("seed: 1\nsteps: abc\n", ["default.yaml, line 2: steps is not allowed", "could not be converted"]),
        ("stepz: 5\n", ["default.yaml, line 1: stepz is not a key of any lnbench config", "steps?"]),
    ],
    ids=["syntax", "a-list", "typo", "flag-2", "type", "top-typo"],
)
def test_a_bad_file_is_one_paragraph_naming_file_and_line_exit_2(text, says, user_dir, capsys, tmp_path):
    (user_dir / "local" / "default.yaml").write_text(text)
    line = refused([f"hydra.run.dir={tmp_path / 'run'}"], capsys)
    for s in says:
        assert s in line, line
    assert str(user_dir / "local" / "default.yaml") in line and not (tmp_path / "run").exists()


@pytest.mark.parametrize("text", ["", "# only a comment\n", "steps: 6\n"], ids=["empty", "comment", "no-package-line"])
def test_an_empty_file_or_one_without_its_package_line_is_fine(text, user_dir):
    (user_dir / "local" / "default.yaml").write_text(text)
    assert composed().steps == (6 if "steps" in text else 2000)


def test_a_broken_preset_of_yours_is_named_before_it_is_chosen(user_dir, capsys, tmp_path):
    (user_dir / "model").mkdir()
    (user_dir / "model" / "mine.yaml").write_text("defaults: [/base_sequence\n")
    line = refused([f"hydra.run.dir={tmp_path / 'run'}"], capsys)
    assert f"{user_dir / 'model' / 'mine.yaml'} is not YAML: line 2" in line


@pytest.mark.parametrize(
    "folder,args,says",
    [
        ("{t}/afile", [], "LNBENCH_CONFIG_DIR={t}/afile is not allowed: {t}/afile is a file, not a folder"),
        ("{t}/missing", [], "LNBENCH_CONFIG_DIR={t}/missing is not allowed: {t}/missing does not exist"),
        (
            "{t}/user",
            ["local=nope"],
            "local=nope is not allowed: there is no {t}/user/local/nope.yaml. The files there are default, laptop",
        ),
        ("", ["local=laptop"], "local=laptop is not allowed: LNBENCH_CONFIG_DIR is empty"),
    ],
    ids=["a-file", "missing", "no-such-local", "folder-off"],
)
def test_a_bad_folder_or_local_choice_is_refused(folder, args, says, monkeypatch, capsys, tmp_path):
    t = tmp_path / "t"
    t.mkdir()
    (t / "afile").write_text("")
    (t / "user").mkdir()
    (t / "user" / "local").mkdir()
    (t / "user" / "local" / "default.yaml").write_text("")
    (t / "user" / "local" / "laptop.yaml").write_text("")
    monkeypatch.setenv("LNBENCH_CONFIG_DIR", folder.format(t=t))
    line = refused([*args, f"hydra.run.dir={tmp_path / 'run'}"], capsys)
    assert says.format(t=t) in line, line


@pytest.mark.parametrize(
    "argv",
    [["check", "ln_gain_init", "--out", "{t}/out"], ["bench", "--quick", "--json", "{t}/out/b.json"]],
    ids=["check", "bench"],
)
def test_check_and_bench_refuse_a_bad_file_before_their_long_work(argv, user_dir, capsys, tmp_path):
    (user_dir / "local" / "default.yaml").write_text("steps: [\n")
    assert main([a.format(t=tmp_path) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("lnbench: error: ") and "default.yaml is not YAML" in err
    assert not (tmp_path / "out").exists()  # no page written first, nothing timed


def test_hydras_composition_step_is_still_the_one_wrapped():
    """hydra_plugins/lnbench_user_config wraps a private method of Hydra's: this fails when Hydra renames it."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    assert getattr(ConfigLoaderImpl._compose_config_from_defaults_list, "lnbench_user_config", False)


def test_the_install_docs_cluster_example_as_written(tmp_path, monkeypatch):
    """docs/install.md's two files: the defaults pick the cluster launcher, whose keys reach it and no other."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    docs = (REPO / "docs" / "install.md").read_text()
    blocks = re.findall(r"```yaml\n# ~/.config/lnbench/(\S+)\n(.*?)```", docs, re.S)
    assert {p for p, _ in blocks} == {"local/default.yaml", "hydra/launcher/cluster.yaml"}
    for rel, text in blocks:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    monkeypatch.setenv("LNBENCH_CONFIG_DIR", str(tmp_path))
    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("train", return_hydra_config=True)
        basic = compose("train", overrides=["hydra/launcher=basic"], return_hydra_config=True)
    assert cfg.hydra.launcher.partition == "gpu" and cfg.hydra.launcher.account == "my-account"
    assert cfg.logger.wandb.entity == "my-team" and "partition" not in basic.hydra.launcher
