"""Defaults of your own (hydra_plugins/lnbench_user_config): the user's folder on Hydra's search path, its
local/default.yaml applied to every run after lnbench's presets and before +experiment and the command line, the
`site` node the presets read, local/<group>/<preset>.yaml where that preset is chosen (Hydra's specialisation)."""

import os
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
        site:
          wandb_entity: my-team
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


def test_the_readmes_example_as_written_reaches_every_preset_that_reads_it(tmp_path, monkeypatch):
    """The README's own snippet: site.data_dir is the data folder of every dataset read from files, the entity the
    W&B sink's; a config without them (the adding problem, logger=none) composes as ever."""
    (tmp_path / "local").mkdir()
    (tmp_path / "local" / "default.yaml").write_text(EXAMPLE)
    monkeypatch.setenv("LNBENCH_CONFIG_DIR", str(tmp_path))
    plain = composed()  # adding: no data_dir; W&B on
    assert plain.logger.wandb.entity == "my-team" and "data_dir" not in plain.dataset
    for dataset in ("mnist", "seq_mnist", "binarized_mnist", "shakespeare"):
        assert composed(f"dataset={dataset}").dataset.data_dir == "/scratch/me/data"
    assert dict(composed("logger=none").logger) == {}
    assert composed("dataset=mnist", "dataset.data_dir=/mine").dataset.data_dir == "/mine"  # the command line wins


def test_without_your_defaults_the_presets_read_what_they_did(monkeypatch):
    monkeypatch.setenv("LNBENCH_DATA_DIR", "/the/env")
    cfg = composed("dataset=mnist")
    assert (cfg.dataset.data_dir, cfg.logger.wandb.entity, cfg.logger.wandb.project) == ("/the/env", None, "lnbench")


def test_the_readmes_example_runs_without_a_word(tmp_path):
    (tmp_path / "local").mkdir()
    (tmp_path / "local" / "default.yaml").write_text(EXAMPLE)
    env = {"LNBENCH_CONFIG_DIR": str(tmp_path)}
    run = tmp_path / "run"
    tiny = [a for a in TINY_CLI if not a.startswith("logger.")]
    done = run_cli("train", *tiny, "logger=none", f"hydra.run.dir={run}", env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "your defaults" not in done.stderr and "Traceback" not in done.stderr


def test_a_presets_own_defaults_apply_where_it_is_chosen(user_dir):
    """local/dataset/mnist.yaml (no `dataset:` above its keys) applies where dataset=mnist, also when a preset
    chooses it, under +experiment and the command line; local/optim/sgd.yaml where optim=sgd."""
    (user_dir / "local" / "dataset").mkdir()
    (user_dir / "local" / "dataset" / "mnist.yaml").write_text("batch_size: 7\nval_size: 100\n")
    (user_dir / "local" / "optim").mkdir()
    (user_dir / "local" / "optim" / "sgd.yaml").write_text("momentum: 0.5\n")
    assert (composed("dataset=mnist").dataset.batch_size, composed().dataset.batch_size) == (7, 64)
    assert composed("+experiment=fig6_mnist").dataset.val_size == 100  # the preset chose dataset=mnist
    assert composed("dataset=mnist", "dataset.batch_size=3").dataset.batch_size == 3
    assert composed("optim=sgd").optim.momentum == 0.5 and "momentum" not in composed().optim


def test_site_reaches_the_slurm_launcher(user_dir):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    (user_dir / "local" / "default.yaml").write_text("site:\n  slurm_partition: gpu\n  slurm_account: me\n")
    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("train", overrides=["hydra/launcher=slurm"], return_hydra_config=True)
    assert (cfg.hydra.launcher.partition, cfg.hydra.launcher.account) == ("gpu", "me")


@pytest.mark.parametrize(
    "text,says",
    [
        ("# @package _global_\nsteps: 5\nlogger:\n  wandb: [\n", ["default.yaml is not YAML: line 5, column 1"]),
        ("- steps: 5\n", ["default.yaml, line 1: the file must be a mapping"]),
        ("steps: 5\nsite:\n  data_dri: /x\n", ["default.yaml, line 3: site.data_dri is not allowed", "data_dir?"]),
        ("threads_follow: 2\n", ["default.yaml, line 1: threads_follow: 2 is not allowed", "true or false"]),
        ("seed: 1\nsteps: abc\n", ["default.yaml, line 2: steps is not allowed", "could not be converted"]),
        ("stepz: 5\n", ["default.yaml, line 1: stepz is not allowed here: no lnbench config has it", "steps?"]),
        ("optim:\n  momentum: 0.9\n", ["line 2: optim.momentum is not allowed here: only some optim", "sgd"]),
        ("logger:\n  wandb:\n    tags: [a]\n", ["line 3: logger.wandb.tags is not allowed", "logger preset"]),
    ],
    ids=["syntax", "a-list", "typo", "flag-2", "type", "top-typo", "one-optimizer", "one-sink"],
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
        ("", ["local=null"], "local=null is not allowed: LNBENCH_CONFIG_DIR is empty"),
    ],
    ids=["a-file", "missing", "no-such-local", "folder-off", "folder-off-null"],
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


@pytest.mark.parametrize(
    "key,value,new",
    [
        ("dataset.data_dir", "/x", "site.data_dir"),
        ("logger.wandb.entity", "me", "site.wandb_entity"),
        ("logger.wandb.project", "p", "site.wandb_project"),
        ("hydra.launcher.partition", "gpu", "site.slurm_partition"),
        ("hydra.launcher.account", "a", "site.slurm_account"),
    ],
)
def test_a_key_that_moved_into_site_is_refused_with_its_new_name(key, value, new, user_dir, capsys, tmp_path):
    text = "steps: 5\n" + "".join(f"{'  ' * i}{part}:\n" for i, part in enumerate(key.split(".")[:-1]))
    text += f"{'  ' * key.count('.')}{key.rpartition('.')[2]}: {value}\n"
    (user_dir / "local" / "default.yaml").write_text(text)
    line = refused([f"hydra.run.dir={tmp_path / 'run'}"], capsys)
    at = f"default.yaml, line {key.count('.') + 2}: {key} is not allowed in your defaults any more: it is {new} now"
    assert at in line and not (tmp_path / "run").exists()


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
    assert cfg.hydra.launcher.cpus_per_task == 4 and cfg.dataset.get("data_dir") is None
    assert cfg.logger.wandb.entity == "my-team" and "partition" not in basic.hydra.launcher


# ---- issue 47: every reader of your folder refuses what Hydra would hang on, skip silently or blame elsewhere ------
BOMB = "".join(  # 4 levels of 20 aliases: 160,000 values from 5 lines (a billion laughs, kept small)
    f"{c}: &{c} [{', '.join([f'*{p}'] * 20 if p else ['x'] * 20)}]\n" for p, c in zip(["", "a", "b", "c"], "abcd")
)
LOOP = "a: &a [1, *a]\n"
DEEP = "a: " + "[" * 1500 + "]" * 1500 + "\n"


def write(root, rel, text=None, link=None):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if link is not None:
        path.symlink_to(link)
    else:
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


@pytest.mark.parametrize(
    "rel,text,says",
    [
        ("local/default.yaml", BOMB, "default.yaml is not allowed: its aliases (*name) expand to more than 100,000"),
        ("model/mine.yaml", BOMB, "model/mine.yaml is not allowed: its aliases (*name) expand"),
        ("local/dataset/adding.yaml", BOMB, "local/dataset/adding.yaml is not allowed: its aliases (*name) expand"),
        ("experiment/mine.yaml", BOMB, "experiment/mine.yaml is not allowed: its aliases (*name) expand"),
        ("local/default.yaml", LOOP, "default.yaml, line 1: an alias (*name) there contains itself"),
        ("local/default.yaml", DEEP, "default.yaml is not allowed: it nests deeper than any config does"),
        ("local/default.yaml", b"steps: \xff\n", "default.yaml cannot be read ('utf-8' codec can't decode"),
        ("local/default.yaml", "defaults: 3\n", "default.yaml, line 1: defaults is not allowed as written"),
        ("model/mine.yaml", "defaults: 3\n", "mine.yaml, line 1: defaults is not allowed as written"),
        ("local/default.yaml", "defaults:\n  - override /model: null\n", "line 2: defaults is not allowed as written"),
    ],
    ids=[
        "bomb",
        "bomb-preset",
        "bomb-specialised",
        "bomb-experiment",
        "self-alias",
        "deep",
        "utf8",
        "defaults-3",
        "defaults-3-preset",
        "override-null",
    ],  # fmt: skip
)
def test_a_file_of_yours_hydra_would_hang_or_crash_on_is_refused_naming_it(rel, text, says, user_dir, capsys, tmp_path):
    path = write(user_dir, rel, text)
    line = refused([f"hydra.run.dir={tmp_path / 'run'}"], capsys)
    assert line.startswith(f"lnbench: error: {path}") and says in line, line
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("rel", ["local/default.yaml", "model/mine.yaml", "local/dataset/adding.yaml"])
def test_a_pipe_or_folder_where_a_file_of_yours_goes_is_refused_not_read(rel, user_dir, capsys, tmp_path):
    """Reading a named pipe would wait for ever."""
    (user_dir / rel).parent.mkdir(parents=True, exist_ok=True)
    (user_dir / rel).unlink(missing_ok=True)
    os.mkfifo(user_dir / rel)
    line = refused([f"hydra.run.dir={tmp_path / 'run'}"], capsys)
    assert f"{user_dir / rel} is not allowed: it is not a plain file (a folder, a pipe, a device)" in line, line
    if rel == "model/mine.yaml":  # lnbench presets lists the presets where Hydra finds them, yours too
        assert main(["presets"]) == 2 and "mine.yaml is not allowed: it is not a plain file" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["presets"], ["check", "ln_gain_init", "--out", "{t}/out"]], ids=["presets", "check"])
def test_the_other_readers_of_your_presets_refuse_a_bomb_too(argv, user_dir, capsys, tmp_path):
    path = write(user_dir, "experiment/mine.yaml", BOMB)
    assert main([a.format(t=tmp_path) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"lnbench: error: {path} is not allowed: its aliases") and "Traceback" not in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "rel,target,says",
    [
        ("local/default.yaml", "default.yaml", "default.yaml is a symbolic link that loops"),
        (
            "local/default.yaml",
            "/nonexistent/x.yaml",
            "is a symbolic link to /nonexistent/x.yaml, which does not exist",
        ),
        ("model/mine.yaml", "mine.yaml", "mine.yaml is a symbolic link that loops"),
        ("local/dataset/adding.yaml", "adding.yaml", "adding.yaml is a symbolic link that loops"),
    ],
    ids=["loop", "dangling", "loop-preset", "loop-specialised"],
)
def test_a_link_that_leads_nowhere_is_named_not_taken_for_no_file(rel, target, says, user_dir, capsys, tmp_path):
    (user_dir / rel).unlink(missing_ok=True)
    write(user_dir, rel, link=target)
    line = refused([f"hydra.run.dir={tmp_path / 'run'}"], capsys)
    assert says in line and "Fix the link" in line, line


def test_a_folder_that_is_a_link_loop_is_named(monkeypatch, capsys, tmp_path):
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    monkeypatch.setenv("LNBENCH_CONFIG_DIR", str(tmp_path / "loop"))
    line = refused([f"hydra.run.dir={tmp_path / 'run'}"], capsys)
    assert (
        f"LNBENCH_CONFIG_DIR={tmp_path / 'loop'} is not allowed: {tmp_path / 'loop'} is a symbolic link that loops"
        in line
    )


@pytest.mark.parametrize(
    "given,says",
    [
        ("/elsewhere/laptop", "local=/elsewhere/laptop is not allowed: it is a path"),
        ("../laptop", "local=../laptop is not allowed: it is a path"),
        ("", "local= is not allowed: it is empty"),
        ("null", "local=null is not allowed: Hydra takes no null here"),
    ],
    ids=["absolute", "relative", "empty", "null"],
)
def test_a_local_choice_hydra_would_not_load_is_refused(given, says, user_dir, capsys, tmp_path):
    line = refused([f"local={given}", f"hydra.run.dir={tmp_path / 'run'}"], capsys)
    assert says in line and "(default, laptop)" in line and "~local runs without one" in line, line


def test_a_local_choice_is_what_hydra_loads(user_dir):
    assert composed("local=laptop.yaml").steps == 5  # Hydra reads laptop.yaml as laptop: so does the check
    (user_dir / "local" / "default.yaml").write_text("stepz: 1\n")  # ~local: this file is not read, nor refused
    from lnbench.config.user_folder import check

    check(["~local"])
    assert composed("~local").steps == 2000


@pytest.mark.parametrize(
    "rel,text,says",
    [
        ("local/default.yaml", "defaults:\n  - override /model: nope\n", "default.yaml, line 2: model: nope is not"),
        (
            "local/default.yaml",
            "steps: 3\ndefaults:\n  - override /hydra/launcher: nope\n",
            "default.yaml, line 3: hydra/launcher: nope is not allowed: there is no hydra/launcher preset 'nope'",
        ),
        ("local/default.yaml", "defaults:\n  - nothing_here\n", "default.yaml, line 2: local: nothing_here is not"),
        ("local/default.yaml", "defaults:\n  - override /nogroup: x\n", "default.yaml, line 2: the file is not"),
        ("local/dataset/adding.yaml", "batch_size: 8\nseq_lenn: 3\n", "adding.yaml, line 2: dataset.seq_lenn is not"),
        ("local/dataset/adding.yaml", "seq_len: abc\n", "adding.yaml, line 1: dataset.seq_len is not allowed"),
    ],
    ids=["no-model", "no-launcher", "bare-name", "no-group", "specialised-key", "specialised-type"],
)
def test_what_hydra_refuses_in_a_file_of_yours_names_the_file_and_line(rel, text, says, user_dir, capsys, tmp_path):
    path = write(user_dir, rel, text)
    line = refused([f"hydra.run.dir={tmp_path / 'run'}"], capsys)
    assert line.startswith(f"lnbench: error: {path}") and says in line, line
